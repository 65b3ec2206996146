"""benchmarks/train_throughput.py on tiny random models: both variants run, like-for-like token counts, bad input refused."""
import json
import math
from pathlib import Path

import pytest

from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "train_throughput.py"

CHATS = [
    [("what is the capital of france", "paris is the capital"), ("which city is it", "the city is paris"),
     ("what color is the cat", "the cat is blue")],
    [("name a number", "one two three"), ("and a color", "red or green"), ("which number", "two")],
]


@pytest.fixture(scope="module")
def bench():
    return load_script(_PATH)


@pytest.fixture
def chats(tmp_path):
    path = tmp_path / "chats.jsonl"
    lines = []
    for chat in CHATS:
        messages = [m for u, a in chat for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a})]
        lines.append(json.dumps({"messages": messages}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _tiny_models(bench):
    from rhea.modeling import RheaForCausalLM
    from rhea.testing import tiny_llama, tiny_tokenizer

    def make_base():
        tok = tiny_tokenizer()
        return tiny_llama(len(tok), seed=0), tok

    def make_rhea(rc):
        tok = tiny_tokenizer()
        return RheaForCausalLM.from_base(tiny_llama(len(tok), seed=0), tok, rc)

    return bench.Models("tiny-llama", make_rhea, make_base)


def _argv(chats, out, *extra):
    return ["--data", str(chats), "--out", str(out), "--device", "cpu", "--threads", "1", "--batch-size", "2",
            "--warmup", "1", "--steps", "2", "--lora-r", "4", "--lora-alpha", "8", *extra]


@pytest.mark.parametrize("order", [[], ["--interleave"]])
def test_both_variants_run_on_the_same_targets_and_write_json_and_png(bench, chats, tmp_path, order):
    out = tmp_path / "tt"
    assert bench.main(_argv(chats, out, *order), models=_tiny_models(bench)) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    meta = result["meta"]
    for key in ("model", "device", "device_name", "torch", "threads", "time", "clock", "batch_size", "lora", "aux_losses"):
        assert key in meta, key
    assert meta["model"] == "tiny-llama" and meta["threads"] == 1 and meta["clock"] == "cpu"
    assert meta["order"].startswith("interleaved" if order else "sequential")
    assert meta["pairs"] == 6 and meta["pairs_with_different_targets"] == 0 and meta["aux_losses"] == []
    joint, sft = result["variants"]["joint"], result["variants"]["sft"]
    for v in (joint, sft):
        assert v["timed_steps"] == 2 and len(v["per_step"]) == 3
        assert all(math.isfinite(r["loss"]) for r in v["per_step"])
        for clock in ("cpu", "wall"):
            assert v["seconds_per_step"][clock]["step"] > 0
        assert set(v["tokens_per_s"]) == {"target", "conversation", "processed"}
        assert v["peak_memory_mib"] is None  # CPU
    # the same turns: same tokens carrying loss and the same raw conversation, step by step
    assert [r["target"] for r in joint["per_step"]] == [r["target"] for r in sft["per_step"]]
    assert [r["conversation"] for r in joint["per_step"]] == [r["conversation"] for r in sft["per_step"]]
    assert joint["tokens"]["target"] == sft["tokens"]["target"] > 0
    # sft runs one pass per step over exactly its input; joint adds a compress pass where there is history
    assert all(r["passes"] == 1 and r["processed"] == r["conversation"] for r in sft["per_step"])
    assert any(r["passes"] == 2 for r in joint["per_step"])
    assert joint["trainable_params"] > sft["trainable_params"]  # two adapters + <mem> slots vs one adapter
    for key in ("conversation", "target", "processed"):
        assert result["ratio_joint_over_sft"][key] > 0


def test_autoencode_weight_adds_the_aux_pass(bench, chats, tmp_path):
    out = tmp_path / "ae"
    argv = _argv(chats, out, "--autoencode-weight", "0.5", "--steps", "1", "--warmup", "0", "--min-turn", "2")
    assert bench.main(argv, models=_tiny_models(bench)) == 0
    joint = json.loads(out.with_suffix(".json").read_text())["variants"]["joint"]
    assert joint["aux_losses"] == ["autoencode"]
    row = joint["per_step"][0]
    assert row["passes"] == 3 and math.isfinite(row["parts"]["autoencode"])


@pytest.mark.parametrize("extra, message", [
    (["--steps", "0"], "--steps 0 must be an int >= 1"),
    (["--warmup", "-1"], "--warmup -1 must be an int >= 0"),
    (["--batch-size", "0"], "--batch-size 0 must be"),
    (["--shape", "qwen9-giant"], "'qwen9-giant' is not a known shape"),
    (["--dtype", "fp8"], "--dtype 'fp8'"),
    (["--lora-r", "0"], "lora_r=0"),
    (["--device", "tpu"], "device='tpu' is not a torch device"),
])
def test_bad_arguments_are_named_errors_before_any_model_loads(bench, chats, tmp_path, capsys, extra, message):
    def never(*a):
        raise AssertionError("a model was built")

    argv = _argv(chats, tmp_path / "x") + extra
    assert bench.main(argv, models=bench.Models("never", never, never)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_unknown_model_and_missing_data_raise_named_errors(bench, chats, tmp_path):
    from rhea.errors import RheaError, UnknownModelError
    from rhea.training.errors import TrainingDataError

    with pytest.raises(UnknownModelError, match="smollm2-135m"):
        bench.check_args(bench.parse_args(["--model", "smolm2-135m", "--data", str(chats)]))
    with pytest.raises(TrainingDataError, match="does not exist"):
        bench.check_args(bench.parse_args(["--data", str(tmp_path / "none.jsonl")]))
    with pytest.raises(RheaError, match="--min-turn 5"):
        bench.check_args(bench.parse_args(["--data", str(chats), "--min-turn", "5"]))
