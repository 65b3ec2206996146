"""`rhea train` with ``run.stage: compressor`` (rhea.training.compressor_stage) on a tiny base: the shipped
configs run through the CLI, a resumed run continues the same losses, bad settings are named before any model
loads, and the stage's pieces (frozen decoder, plain-decoder shortcut, content weighting, capacity warm start)."""
import json
from pathlib import Path

import pytest
import torch

from rhea.testing import save_tiny_base
from rhea.training import TrainConfig, Trainer
from rhea.training.errors import TrainConfigError
from tests.training.test_compressor import _write_data

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("compressor-*.yaml"))
TINY = ["model.n_mem=2", "model.lora_r=2", "model.lora_alpha=4", "model.target_modules=[q_proj, v_proj]",
        "compressor.chunk_tokens=8", "compressor.eval_n=2", "compressor.self_replies=[]", "run.num_threads=1",
        "run.tf32=false"]


@pytest.fixture()
def setup(tmp_path):
    data = tmp_path / "data"
    _write_data(data, extra_replies=12)
    base = tmp_path / "base"
    save_tiny_base(base)
    babi = tmp_path / "babi"
    babi.mkdir()
    from tests.training.test_factqa import BABI

    # many one-question stories, so both sides of the held-apart split hold some
    (babi / "qa1_single-supporting-fact_test.txt").write_text("".join(
        f"1 the cat went to the city {i % 5}.\n2 Where is the cat? \tcity\t1\n" for i in range(40)) + BABI)
    return data, base, babi, tmp_path


def _config(data_dir, base, out, **sections) -> TrainConfig:
    """A tiny compressor-stage config; `sections` update its sections key by key."""
    cfg = {
        "model": {"base_model": str(base), "n_mem": 2, "lora_r": 2, "lora_alpha": 4, "lora_dropout": 0.0,
                  "target_modules": ["q_proj", "v_proj"], "latent_injection": "states"},
        "data": {"path": str(data_dir), "batch_size": 4},
        "optim": {"lr": 0.01, "grad_accum": 1, "epochs": None, "max_steps": 4, "schedule": "constant",
                  "warmup_steps": 2},
        "run": {"stage": "compressor", "output_dir": str(out), "save_every": 0, "log_with": "none"},
        "compressor": {"chunk_tokens": 8, "chunk_stride": 4, "eval_every": 2, "eval_n": 2},
    }
    for name, values in sections.items():
        cfg[name].update(values)
    return TrainConfig.from_dict(cfg)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_the_shipped_recipe_configs_run_through_the_cli(path, setup, capsys):
    """Each configs/compressor-<model>.yaml, shrunk to the tiny base by --set, trains two steps through `rhea train`
    and writes a loadable directory that records the stage; the generate adapter stays the base model."""
    from rhea.cli import main
    from rhea.modeling import RheaForCausalLM

    data, base, babi, root = setup
    out = root / "out"
    sets = TINY + [f"data.path={data}", f"run.output_dir={out}", "optim.max_steps=2", "compressor.eval_every=1",
                   "data.batch_size=4", f"compressor.babi={babi}", "compressor.babi_tasks=[1]",
                   "compressor.qa_eval_n=4"]
    argv = ["train", "--config", str(path), "--model", str(base)]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["optimizer_steps"] == 2 and report["final_dir"] == str(out / "final")
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["loss/total"] > 0 and m["loss/autoencode"] > 0 for m in metrics)
    cfg = TrainConfig.from_yaml(str(path))
    if cfg.compressor.qa_share:
        assert all("loss/factqa" in m for m in metrics)
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve] == [0, 1, 2] and all(r["n"] == 2 for r in curve)
    model = RheaForCausalLM.from_pretrained(out / "final", base_model=str(base))
    record = model.config.extra["training"]
    assert record["recipe"] == "rhea train (run.stage compressor)" and record["optimizer_steps"] == 2
    assert record["qa_share"] == cfg.compressor.qa_share and model.config.latent_injection == "states"
    generate_b = [p for n, p in model.peft_model.named_parameters() if ".generate." in n and "lora_B" in n]
    assert generate_b and all(not p.any() for p in generate_b)  # frozen: still the base model
    # benchmarks/compressor_curve.py draws the run from the trainer's files
    from tests.repo_scripts import load_script

    curve_tool = load_script(ROOT / "benchmarks" / "compressor_curve.py")
    assert curve_tool.main(["--run", str(out), "--out", str(root / "curve")]) == 0
    drawn = json.loads((root / "curve.json").read_text())
    assert [r["step"] for r in drawn["loss"]] == [1, 2] and drawn["run_args"]["run"]["stage"] == "compressor"


def test_the_configs_state_the_shipped_settings():
    """The recipe configs hold what the shipped directories record of their training."""
    for path in CONFIGS:
        cfg = TrainConfig.from_yaml(str(path))
        name = cfg.model.base_model
        shipped = json.loads((ROOT / "rhea" / "data" / "adapters" / name / "rhea_config.json").read_text())
        record = shipped["extra"]["training"]
        assert cfg.run.stage == "compressor" and path.stem == f"compressor-{name}"
        assert cfg.model.n_mem == shipped["n_mem"] and cfg.model.latent_injection == shipped["latent_injection"]
        assert cfg.compressor.chunk_tokens == record["chunk_tokens"]
        assert cfg.compressor.chunk_stride == record["chunk_stride"]
        assert cfg.compressor.qa_share == record["qa_share"] and cfg.compressor.train_generate == record["train_generate"]
        def stem(p):  # the same replies, committed gzipped
            return Path(p).name.removesuffix(".gz")

        assert [stem(p) for p in cfg.compressor.self_replies] == [stem(p) for p in record["self_replies"]]
        if record["babi"]:
            assert Path(cfg.compressor.babi).name == Path(record["babi"]).name
            assert cfg.compressor.babi_tasks == record["babi_tasks"]


def test_a_resumed_run_continues_the_same_losses(setup):
    """Two steps, stop, resume to four: the same per-step losses as four steps in one go (the data order and the
    seeded fact-QA draws continue where the checkpoint left them)."""
    data, base, babi, root = setup
    qa = {"qa_share": 0.5, "babi": str(babi), "babi_tasks": [1], "qa_eval_n": 4, "eval_every": 0}
    whole = Trainer(_config(data, base, root / "whole", compressor=qa)).train()
    Trainer(_config(data, base, root / "cut", compressor=qa, optim={"max_steps": 2},
                    run={"save_every": 1})).train()
    resumed = Trainer(_config(data, base, root / "cut", compressor=qa,
                              run={"save_every": 1, "resume_from": "latest"})).train()
    assert [h["step"] for h in resumed.history] == [1, 2, 3, 4]
    for a, b in zip(whole.history, resumed.history):
        assert a["loss/total"] == pytest.approx(b["loss/total"], abs=1e-6)
        assert a["loss/factqa"] == pytest.approx(b["loss/factqa"], abs=1e-6)


def test_the_constant_schedule_warms_up_and_cools_down(setup):
    data, base, _, root = setup
    cfg = _config(data, base, root / "out", optim={"warmup_steps": 2, "cooldown_steps": 2, "lr": 0.01},
                  compressor={"eval_every": 0})
    history = Trainer(cfg).train().history
    # the rate after each step: warm-up done at step 2, then the fall to 0 at max_steps 4
    assert [round(h["lr"], 6) for h in history] == [0.01, 0.01, 0.005, 0.0]


def test_max_minutes_stops_with_a_checkpoint_that_resume_continues(setup, capsys):
    data, base, _, root = setup
    first = Trainer(_config(data, base, root / "out", run={"max_minutes": 1e-9}, compressor={"eval_every": 0})).train()
    assert first.global_step == 1 and "run.max_minutes" in capsys.readouterr().out
    assert (root / "out" / "checkpoint-1").is_dir()
    rest = Trainer(_config(data, base, root / "out", run={"resume_from": "latest"}, compressor={"eval_every": 0})).train()
    assert [h["step"] for h in rest.history] == [1, 2, 3, 4]


@pytest.mark.parametrize("sections, message", [
    ({"data": {"path": "/no/such/dir"}}, "data.path /no/such/dir is not a directory"),
    ({"compressor": {"babi": "/no/such/babi", "qa_share": 0.5}}, "compressor.babi /no/such/babi is not a directory"),
    ({"compressor": {"self_replies": ["/no/such.jsonl"]}}, "compressor.self_replies file /no/such.jsonl"),
])
def test_missing_inputs_are_named_before_any_model_loads(setup, sections, message):
    data, _, _, root = setup
    cfg = _config(data, "no-such-base-model", root / "out", **sections)
    with pytest.raises(TrainConfigError, match=message):
        Trainer(cfg)


@pytest.mark.parametrize("sections, message", [
    ({"compressor": {"qa_share": 0.1}, "data": {"batch_size": 2}}, "rounds to no fact-QA item"),
    ({"compressor": {"qa_share": 1.5}}, r"qa_share=1.5 must be in \[0, 1\]"),
    ({"compressor": {"content_weight": 0.5}, "data": {"batch_size": 1}}, "at least 2 reconstruction rows"),
    ({"compressor": {"content_weight": 2.0}}, "content_weight=2.0 must be in"),
    ({"compressor": {"chunk_stride": 0}}, "chunk_stride=0 must be >= 1"),
    ({"run": {"autoencode_weight": 0.5}}, "compressor stage auto-encodes by itself"),
    ({"optim": {"schedule": "cosine", "cooldown_steps": 2}}, "applies to optim.schedule 'constant'"),
    ({"optim": {"cooldown_steps": 9}}, "needs optim.max_steps >= it"),
    ({"optim": {"max_steps": None}}, "optim.max_steps is not set"),
    ({"compressor": {"babi_tasks": ["one"]}}, "babi_tasks"),
    ({"run": {"stage": "autoencoder"}}, "run.stage='autoencoder' must be"),
])
def test_bad_settings_are_named_errors(setup, sections, message):
    data, base, _, root = setup
    with pytest.raises(TrainConfigError, match=message):
        _config(data, base, root / "out", **sections)


def test_plain_decoder_shortcut_gives_the_same_loss(setup):
    """A frozen, still-zero generate adapter is the base model: the step runs the decoder with the LoRA branches
    off, and the loss equals the one with them on; a trained generate adapter is never skipped."""
    from rhea.training.compressor_stage import CompressorStep, generate_is_identity

    data, base, _, root = setup
    trainer = Trainer(_config(data, base, root / "out"))
    model, step = trainer.model, trainer.step_module
    assert generate_is_identity(model)
    texts = [c.text for c in trainer.samples.samples[:4]]
    with torch.no_grad():
        shortcut = step(texts)[0]
        step._decoder = __import__("contextlib").nullcontext
        full = step(texts)[0]
        assert torch.allclose(shortcut, full, atol=1e-6)
        next(p for n, p in model.peft_model.named_parameters() if ".generate." in n and "lora_B" in n).fill_(0.1)
    assert not generate_is_identity(model)
    assert CompressorStep(model, trainer.config)._decoder is __import__("contextlib").nullcontext


def test_only_the_compress_side_trains(setup):
    from rhea.modeling import RheaForCausalLM

    data, base, _, root = setup
    trainer = Trainer(_config(data, base, root / "out", compressor={"eval_every": 0}))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    after = RheaForCausalLM.from_pretrained(root / "out" / "final", base_model=str(base))
    moved = {n for n, p in after.named_parameters() if n in before and not torch.equal(p, before[n])}
    assert any(".compress." in n for n in moved) and "mem_slot_embeds" in moved
    assert not any(".generate." in n for n in moved)


def test_content_weighted_loss_weighs_tokens_by_their_control_loss(setup):
    from rhea.training.compressor import autoencode_batch
    from rhea.training.compressor_stage import content_weighted_loss

    data, base, _, root = setup
    trainer = Trainer(_config(data, base, root / "out", compressor={"content_weight": 0.5, "eval_every": 0},
                              optim={"max_steps": 1}))
    model = trainer.model
    texts = [c.text for c in trainer.samples.samples[:3]]
    with torch.no_grad():
        lat = model.compress(texts)
        b = autoencode_batch(model, texts)
        plain = model(input_ids=b["input_ids"], latent_embeds=lat, attention_mask=b["attention_mask"],
                      labels=b["labels"]).loss
        assert torch.allclose(content_weighted_loss(model, b, lat, 0.0), plain, atol=1e-5)  # share 0: plain
        logits = model(input_ids=b["input_ids"], latent_embeds=lat, attention_mask=b["attention_mask"]).logits
        ctrl = model(input_ids=b["input_ids"], latent_embeds=lat.roll(1, dims=0), attention_mask=b["attention_mask"]).logits
        labels = b["labels"][:, 1:]
        keep = labels != -100
        own = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), labels.clamp(min=0), reduction="none")[keep]
        c = torch.nn.functional.cross_entropy(ctrl[:, :-1].transpose(1, 2), labels.clamp(min=0), reduction="none")[keep]
        assert torch.allclose(content_weighted_loss(model, b, lat, 1.0), (own * c).sum() / c.sum(), atol=1e-5)
    assert trainer.train().history[0]["loss/autoencode"] > 0  # and it trains


def test_init_resize_warm_starts_more_slots_and_a_larger_compress_rank(setup, capsys):
    from rhea.modeling import RheaForCausalLM

    data, base, _, root = setup
    Trainer(_config(data, base, root / "first", optim={"max_steps": 1}, compressor={"eval_every": 0})).train()
    first = RheaForCausalLM.from_pretrained(root / "first" / "final", base_model=str(base))
    wide = Trainer(_config(data, base, root / "wide", optim={"max_steps": 1}, compressor={"eval_every": 0},
                           model={"init_from": str(root / "first" / "final"), "init_resize": True, "n_mem": 4,
                                  "lora_r": 6}))
    out = capsys.readouterr().out
    assert "resizing its read-out slots to 4" in out and "growing it to 6" in out
    assert wide.model.n_mem == 4 and wide.model.lora_rank("compress") == 6
    assert torch.equal(wide.model.mem_slot_embeds[:2], first.mem_slot_embeds)  # trained slots kept, not re-initialised
    kept = Trainer(_config(data, base, root / "same", optim={"max_steps": 1}, compressor={"eval_every": 0},
                           model={"init_from": str(root / "first" / "final"), "n_mem": 8}))
    assert kept.model.n_mem == 2  # without init_resize the directory's own count
    with pytest.raises(TrainConfigError, match="only grows it"):
        Trainer(_config(data, base, root / "cut", model={"init_from": str(root / "first" / "final"),
                                                          "init_resize": True, "lora_r": 1}))


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_training_config_is_valid(path):
    """Every config under configs/ (the accelerate launcher configs live in configs/accelerate/) loads as a
    TrainConfig: a key renamed in the library cannot leave a recipe behind."""
    TrainConfig.from_yaml(str(path))
