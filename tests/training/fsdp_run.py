"""Entry point of the FSDP tests' launched processes: ``rhea train`` with a watchdog and an optional crash.

``accelerate launch ... tests/training/fsdp_run.py CONFIG [CRASH_AFTER_STEP]`` runs the same
`Trainer` as ``rhea train --config CONFIG``; with CRASH_AFTER_STEP every process dies (exit 3)
right after that step's checkpoint is written, like a killed job. A hung collective dumps every
thread's stack and exits instead of hanging the test (RHEA_TEST_WATCHDOG_S, default 150 s).
"""
import faulthandler
import os
import sys

from rhea.training import TrainConfig, Trainer


def main() -> int:
    faulthandler.dump_traceback_later(float(os.environ.get("RHEA_TEST_WATCHDOG_S", "150")), exit=True)
    config = TrainConfig.from_yaml(sys.argv[1])
    crash_after = int(sys.argv[2]) if len(sys.argv) > 2 else None
    trainer = Trainer(config)
    if crash_after is not None:
        save = trainer.save_checkpoint

        def save_then_die(epoch, batch, step):
            path = save(epoch, batch, step)
            if step == crash_after:
                print(f"[fsdp_run] killed after checkpoint {step}", flush=True)
                os._exit(3)
            return path

        trainer.save_checkpoint = save_then_die
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
