"""`rhea train --config cfg.yaml`: compress/generate LoRA training, the joint stage or the compressor stage
(``run.stage``; runs under accelerate launch too)."""
from __future__ import annotations

import argparse
import json


def _cmd_train(args) -> int:
    from rhea.training.config import TrainConfig
    from rhea.training.trainer import Trainer

    config = TrainConfig.from_yaml(args.config)
    for override in args.set or []:
        key, _, value = override.partition("=")
        section, _, name = key.partition(".")
        import yaml

        data = config.to_dict()
        if section not in data or name not in data[section]:
            from rhea.training.errors import TrainConfigError

            owners = [s for s, keys in data.items() if isinstance(keys, dict) and (name or section) in keys]
            hint = (f"did you mean {owners[0]}.{name or section}? " if owners else "") + "`rhea train --help` lists the keys"
            raise TrainConfigError(f"--set {override!r}: unknown key {key!r} (keys are SECTION.KEY, sections "
                                   f"{sorted(data)}); {hint}")
        data[section][name] = yaml.safe_load(value)
        config = TrainConfig.from_dict(data)
    if args.model is not None:  # an empty --model is refused by the config check, not ignored
        data = config.to_dict()
        data["model"]["base_model"] = args.model
        config = TrainConfig.from_dict(data)
    result = Trainer(config).train()
    print(json.dumps({"optimizer_steps": result.global_step, "seconds": round(result.seconds, 1),
                      "skipped_samples": result.skipped, "final_dir": result.final_dir}))
    return 0


def register(sub) -> None:
    from rhea.training.config import describe_fields

    train = sub.add_parser(
        "train",
        help="train the adapters: jointly (run.stage joint) or the compressor alone (run.stage compressor)",
        description="Compress/generate LoRA training. run.stage joint (the default) trains both adapters on "
        "conversations; run.stage compressor auto-encodes chunks of real replies through frozen-decoder latents (the "
        "shipped compressors' recipe: configs/compressor-<model>.yaml). Run on one device with `rhea train --config "
        "cfg.yaml`, or with `accelerate launch --config_file configs/accelerate/ddp.yaml -m rhea.cli train --config "
        "cfg.yaml`.",
        epilog="config keys (YAML sections; defaults follow the paper; documented in rhea/training/config.py):\n" + describe_fields(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument("--config", required=True, help="YAML file with sections model/data/optim/run")
    train.add_argument("--model", help="base model: model-zoo name (see `rhea models list`), local path or cached HF id "
                       "(same as --set model.base_model=NAME)")
    train.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one config key (repeatable)")
    train.set_defaults(func=_cmd_train)
