"""scripts/train_compressor.py: a run cut off with only its committable snapshot left (no OUT/checkpoint)
continues from the snapshot's step and weights; a snapshot of other settings is refused."""
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rhea.testing import save_tiny_base
from tests.repo_scripts import load_script
from tests.training.test_compressor import _write_data

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_compressor.py"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


@pytest.fixture()
def setup(tmp_path):
    data = tmp_path / "data"
    _write_data(data, extra_replies=12)
    base_dir = tmp_path / "base"
    save_tiny_base(base_dir)
    return data, base_dir, tmp_path


def _argv(data, base_dir, root, steps, **extra):
    argv = ["--data", str(data), "--out", str(root / "out"), "--base-model", str(base_dir), "--max-steps", str(steps),
            "--batch", "2", "--chunk-tokens", "8", "--eval-every", "2", "--eval-n", "2", "--save-every", "100",
            "--snapshot-dir", str(root / "snap"), "--snapshot-every", "2", "--lora-r", "2", "--lora-alpha", "4",
            "--targets", "q_proj,v_proj", "--n-mem", "2", "--injection", "projector"]
    for k, v in extra.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return argv


def test_snapshot_resume_continues_from_the_snapshot(script, setup, capsys):
    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 4))
    snap = root / "snap"
    state = json.loads((snap / "state.json").read_text())
    assert state["step"] == 4 and state["settings"]["lora_r"] == 2
    weights = load_file(str(snap / "trainable.safetensors"))
    assert weights and all(w.dtype == torch.bfloat16 for w in weights.values())
    assert any("mem_slot" in n for n in weights) and any("lora_" in n and "compress" in n for n in weights)
    curve = [json.loads(line) for line in (snap / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve] == [0, 2, 4]

    # the machine is gone: only the committed snapshot survives
    shutil.rmtree(root / "out")
    capsys.readouterr()
    script.main(_argv(data, base_dir, root, 6))
    assert "resumed from snapshot" in capsys.readouterr().out
    assert json.loads((snap / "state.json").read_text())["step"] == 6
    steps = [json.loads(line)["step"] for line in (root / "out" / "log.jsonl").read_text().splitlines()]
    assert steps == [5, 6]  # no step redone, none skipped
    # the curve carried over from the snapshot and grew
    assert [json.loads(line)["step"] for line in (snap / "curve.jsonl").read_text().splitlines()] == [0, 2, 4, 6]


def test_snapshot_weights_are_loaded(script, setup):
    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 2))
    shutil.rmtree(root / "out")
    (root / "out").mkdir()
    args = script.parse_args(_argv(data, base_dir, root, 2))
    model, train = script.build(args)[:2]
    params = script.trainable(model, False)
    assert script.load_snapshot(root / "snap", root / "out", params, args) == 2
    saved = load_file(str(root / "snap" / "trainable.safetensors"))
    for n, p in params.items():
        assert torch.equal(p.detach().to(torch.bfloat16), saved[n])


def test_snapshot_of_other_settings_is_refused(script, setup):
    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 2))
    shutil.rmtree(root / "out")
    with pytest.raises(SystemExit, match="other settings.*lora_r"):
        script.main(_argv(data, base_dir, root, 4, lora_r=4))


def test_max_minutes_stops_cleanly_and_the_same_command_continues(script, setup, capsys):
    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 4, max_minutes=1e-9))
    assert "--max-minutes" in capsys.readouterr().out
    assert json.loads((root / "snap" / "state.json").read_text())["step"] < 4
    assert (root / "out" / "checkpoint" / "state.pt").is_file()
    script.main(_argv(data, base_dir, root, 4))
    steps = [json.loads(line)["step"] for line in (root / "out" / "log.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_self_replies_add_training_chunks_only(script, setup):
    data, base_dir, root = setup
    replies = root / "self.jsonl"
    replies.write_text("".join(json.dumps({"source": f"ifeval/input_data.jsonl:{i}", "reply": f"the cat {i} is blue and "
                                                                                            "the dog is red today"}) + "\n"
                               for i in range(5)))
    plain = script.build(script.parse_args(_argv(data, base_dir, root, 1)))
    more = script.build(script.parse_args(_argv(data, base_dir, root, 1, self_replies=replies)))
    assert len(more[1]) == len(plain[1]) + 5 and more[2] == plain[2]  # held-apart texts unchanged


def test_plain_decoder_shortcut_gives_the_same_loss(script, setup):
    data, base_dir, root = setup
    args = script.parse_args(_argv(data, base_dir, root, 1))
    model, train = script.build(args)[:2]
    assert script.generate_is_identity(model)
    from rhea.training.compressor import autoencode_batch
    texts = [c.text for c in train[:2]]
    with torch.no_grad():
        lat = model.compress(texts)
        b = autoencode_batch(model, texts)
        full = model(input_ids=b["input_ids"], latent_embeds=lat, attention_mask=b["attention_mask"], labels=b["labels"])
        with model.peft_model.disable_adapter():
            plain = model(input_ids=b["input_ids"], latent_embeds=lat, attention_mask=b["attention_mask"],
                          labels=b["labels"])
        assert torch.allclose(full.loss, plain.loss, atol=1e-6)
        next(p for n, p in model.peft_model.named_parameters() if ".generate." in n and "lora_B" in n).fill_(0.1)
    assert not script.generate_is_identity(model)  # a trained generate adapter is never skipped
    # and the compress adapter is back on after the block
    with torch.no_grad():
        assert torch.equal(model.compress(texts), lat)


def test_max_steps_zero_turns_a_snapshot_into_a_loadable_directory(script, setup):
    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 2))
    shutil.rmtree(root / "out")
    before = {f.name: f.read_bytes() for f in (root / "snap").iterdir()}
    script.main(_argv(data, base_dir, root, 0))
    assert {f.name: f.read_bytes() for f in (root / "snap").iterdir()} == before  # nothing trained: left as it was
    from rhea.modeling import RheaForCausalLM
    loaded = RheaForCausalLM.from_pretrained(root / "out" / "latest", base_model=str(base_dir))
    saved = load_file(str(root / "snap" / "trainable.safetensors"))
    slots = next(v for n, v in saved.items() if "mem_slot" in n)
    assert torch.equal(loaded.mem_slot_embeds.detach().to(torch.bfloat16), slots)
    assert loaded.config.extra["training"]["optimizer_steps"] == 2


def test_the_snapshot_keeps_the_per_step_log_across_resumes(script, setup):
    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 2))
    shutil.rmtree(root / "out")  # a new machine: the snapshot (step 2, its log) is all that is left
    script.main(_argv(data, base_dir, root, 4))
    log = [json.loads(x) for x in (root / "snap" / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2, 3, 4] and all("loss" in e for e in log)
    assert [json.loads(x)["step"] for x in (root / "out" / "log.jsonl").read_text().splitlines()] == [3, 4]


def test_capacity_sweep_runs_variants_side_by_side(setup):
    data, base_dir, root = setup
    sweep = load_script(SCRIPT.parent / "compressor_sweep.py")
    common = (f"--base-model {base_dir} --max-steps 2 --batch 2 --chunk-tokens 8 --eval-every 2 --eval-n 2 "
              "--lora-alpha 4 --targets q_proj,v_proj --injection projector --device cpu")
    rc = sweep.main(["--data", str(data), "--out", str(root / "sweep"), "--common", common, "--parallel", "2",
                     "--variant", "n_mem=2,lora_r=2", "--variant", "n_mem=4,lora_r=2", "--snapshot-root",
                     str(root / "snaps")])
    assert rc == 0
    summary = json.loads((root / "sweep" / "summary.json").read_text())
    assert summary["common_step"] == 2 and summary["failed"] == []
    assert [r["variant"] for r in summary["variants"]] == ["n_mem-2_lora_r-2", "n_mem-4_lora_r-2"]
    assert all(r["at_common_step"]["step"] == 2 for r in summary["variants"])
    assert (root / "sweep" / "summary.png").stat().st_size > 0
    assert {p.name for p in (root / "snaps").iterdir()} == {"n_mem-2_lora_r-2", "n_mem-4_lora_r-2"}
    # --no-train: the same summary from the runs already there, nothing started
    stamp = (root / "sweep" / "n_mem-2_lora_r-2" / "curve.jsonl").stat().st_mtime_ns
    assert sweep.main(["--data", str(data), "--out", str(root / "sweep"), "--no-train", "--variant", "n_mem=2,lora_r=2",
                       "--variant", "n_mem=4,lora_r=2", "--summary", str(root / "again")]) == 0
    again = json.loads((root / "again.json").read_text())
    assert again["variants"] == summary["variants"]
    assert (root / "sweep" / "n_mem-2_lora_r-2" / "curve.jsonl").stat().st_mtime_ns == stamp
    with pytest.raises(sweep.SweepError, match="no curve.jsonl"):
        sweep.main(["--data", str(data), "--out", str(root / "sweep"), "--no-train", "--variant", "n_mem=8"])
    with pytest.raises(sweep.SweepError, match="--snapshot-dir in --common"):
        sweep.main(["--data", str(data), "--out", str(root / "s1"), "--common", "--snapshot-dir x", "--variant", "n_mem=4"])
    with pytest.raises(sweep.SweepError, match="both in a variant and in --common"):
        sweep.main(["--data", str(data), "--out", str(root / "s2"), "--common", "--n-mem 2", "--variant", "n_mem=4"])
    with pytest.raises(sweep.SweepError, match="twice"):
        sweep.main(["--data", str(data), "--out", str(root / "s3"), "--variant", "n_mem=4", "--variant", "n_mem=4"])
    with pytest.raises(sweep.SweepError, match="name=value"):
        sweep.parse_variant("16")


def test_deep_injection_trains_its_per_layer_term_and_reloads(script, setup):
    data, base_dir, root = setup
    script.main(["deep" if a == "projector" else a for a in _argv(data, base_dir, root, 2, lr=0.01)])
    from rhea.modeling import RheaForCausalLM
    loaded = RheaForCausalLM.from_pretrained(root / "out" / "latest", base_model=str(base_dir))
    assert loaded.config.latent_injection == "deep" and loaded.latent_injector.layer_up.abs().sum() > 0
    curve = [json.loads(line) for line in (root / "out" / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve] == [0, 2]


def test_states_injection_trains_resumes_from_its_snapshot_and_reloads(script, setup, capsys):
    """`states` latents are [n_mem, n_layers*hidden]: the fresh-start centre is fitted on their final-state
    view, the adapters reload with that width, and a run continues from its snapshot."""
    import shutil

    data, base_dir, root = setup
    script.main(["states" if a == "projector" else a for a in _argv(data, base_dir, root, 2, lr=0.01)])
    from rhea.modeling import RheaForCausalLM
    loaded = RheaForCausalLM.from_pretrained(root / "out" / "latest", base_model=str(base_dir))
    assert loaded.config.latent_injection == "states" and loaded.latent_width == 2 * loaded.hidden_size
    assert loaded.compress(["a reply"]).shape[-1] == loaded.latent_width
    assert loaded.latent_injector.center.abs().sum() > 0
    shutil.rmtree(root / "out" / "checkpoint")  # a new machine: only the snapshot is left
    script.main(["states" if a == "projector" else a for a in _argv(data, base_dir, root, 3, lr=0.01)])
    assert "resumed from snapshot" in capsys.readouterr().out
    assert json.loads((root / "snap" / "state.json").read_text())["step"] == 3


def test_fact_qa_share_mixes_the_stages_and_measures_answers_held_apart(script, setup):
    from tests.training.test_factqa import BABI

    data, base_dir, root = setup
    babi = root / "babi"
    babi.mkdir()
    # many one-question stories, so both sides of the split hold some
    (babi / "qa1_single-supporting-fact_test.txt").write_text("".join(
        f"1 the cat went to the city {i % 5}.\n2 Where is the cat? \tcity\t1\n" for i in range(40)) + BABI)
    script.main(_argv(data, base_dir, root, 2, qa_share=0.5, babi=babi, babi_tasks=1, qa_eval_n=4))
    curve = [json.loads(line) for line in (root / "out" / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve] == [0, 2]
    assert all(r["qa_n"] == 4 and 0 <= r["qa_own"] <= 1 and "gap" in r for r in curve)
    assert "qa_raw" in curve[0]
    state = json.loads((root / "snap" / "state.json").read_text())
    assert state["settings"]["qa_share"] == 0.5 and state["settings"]["babi_tasks"] == [1]
    cfg = json.loads((root / "out" / "latest" / "rhea_config.json").read_text())
    assert cfg["extra"]["training"]["qa_share"] == 0.5
    # a snapshot of the pre-training stage is not resumed as the mixed stage
    shutil.rmtree(root / "out")
    with pytest.raises(SystemExit, match="other settings.*qa_share"):
        script.main(_argv(data, base_dir, root, 4))


def test_fact_qa_arguments_are_checked_before_any_model_loads(script, setup, capsys):
    data, base_dir, root = setup
    for extra, msg in [({"qa_share": 1.5}, "must be in"), ({"qa_share": 0.1}, "rounds to no fact-QA"),
                       ({"babi": root / "nope"}, "not a directory"), ({"babi_tasks": "one"}, "integers")]:
        with pytest.raises(SystemExit):
            script.parse_args(_argv(data, base_dir, root, 1, **extra))
        assert msg in capsys.readouterr().err


def test_content_weighted_loss_weighs_tokens_by_their_control_loss(script, setup, capsys):
    data, base_dir, root = setup
    args = script.parse_args(_argv(data, base_dir, root, 1))
    model, train = script.build(args)[:2]
    from rhea.training.compressor import autoencode_batch
    texts = [c.text for c in train[:3]]
    with torch.no_grad():
        lat = model.compress(texts)
        b = autoencode_batch(model, texts)
        plain = model(input_ids=b["input_ids"], latent_embeds=lat, attention_mask=b["attention_mask"],
                      labels=b["labels"]).loss
        assert torch.allclose(script.content_weighted_loss(model, b, lat, 0.0), plain, atol=1e-5)  # share 0: plain
        # share 1 by hand: per-token own loss weighted by the loss under the next row's latents
        logits = model(input_ids=b["input_ids"], latent_embeds=lat, attention_mask=b["attention_mask"]).logits
        ctrl = model(input_ids=b["input_ids"], latent_embeds=lat.roll(1, dims=0), attention_mask=b["attention_mask"]).logits
        labels = b["labels"][:, 1:]
        keep = labels != -100
        own = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), labels.clamp(min=0), reduction="none")[keep]
        c = torch.nn.functional.cross_entropy(ctrl[:, :-1].transpose(1, 2), labels.clamp(min=0), reduction="none")[keep]
        want = (own * c).sum() / c.sum()
        assert torch.allclose(script.content_weighted_loss(model, b, lat, 1.0), want, atol=1e-5)
    # and it trains: a step runs, the setting is part of the snapshot; bad values are refused before loading
    script.main(_argv(data, base_dir, root, 2, content_weight=0.5))
    assert json.loads((root / "snap" / "state.json").read_text())["settings"]["content_weight"] == 0.5
    for extra, msg in [({"content_weight": 1.5}, "must be in [0, 1]"),
                       ({"content_weight": 0.5, "batch": 1}, "at least 2 reconstruction rows")]:
        with pytest.raises(SystemExit):
            script.parse_args(_argv(data, base_dir, root, 1, **extra))
        assert msg in capsys.readouterr().err


def test_init_from_with_another_n_mem_warm_starts_more_slots(script, setup, capsys):
    """A capacity warm start: --init-from a trained n_mem=2 directory with --n-mem 4 keeps the trained slots,
    starts the new ones as their copies, trains, and saves a directory with 4 slots; without --n-mem the
    directory's own count is kept (no silent resize to the default)."""
    import shutil

    data, base_dir, root = setup
    states = lambda argv: ["states" if a == "projector" else a for a in argv]  # noqa: E731
    script.main(states(_argv(data, base_dir, root, 2, lr=0.01)))
    from rhea.modeling import RheaForCausalLM
    first = RheaForCausalLM.from_pretrained(root / "out" / "latest", base_model=str(base_dir))
    shutil.copytree(root / "out" / "latest", root / "init")

    argv = states(_argv(data, base_dir, root / "wide", 0, init_from=root / "init"))
    argv[argv.index("--n-mem") + 1] = "4"
    script.main(argv)
    assert "resizing its read-out slots to 4" in capsys.readouterr().out
    wide = RheaForCausalLM.from_pretrained(root / "wide" / "out" / "latest", base_model=str(base_dir))
    assert wide.n_mem == 4 and wide.compress(["a reply"]).shape[1] == 4
    assert torch.equal(wide.mem_slot_embeds[:2], first.mem_slot_embeds)
    assert torch.equal(wide.mem_slot_embeds[2:], first.mem_slot_embeds)
    assert json.loads((root / "wide" / "out" / "args.json").read_text())["n_mem"] == 4

    argv = states(_argv(data, base_dir, root / "same", 0, init_from=root / "init"))
    i = argv.index("--n-mem")
    script.main(argv[:i] + argv[i + 2:])
    assert RheaForCausalLM.from_pretrained(root / "same" / "out" / "latest", base_model=str(base_dir)).n_mem == 2


def test_init_from_with_a_larger_lora_r_grows_the_compress_adapter(script, setup, capsys):
    """A capacity warm start of the compress LoRA: --init-from a rank-2 directory with --lora-r 6 grows the compress
    adapter (alpha follows the rank, the generate adapter keeps its rank), starts from the same held-apart
    reconstruction, and saves a directory that loads at rank 6; a smaller rank or a conflicting alpha is refused."""
    import shutil

    from rhea.modeling import RheaForCausalLM

    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 2, lr=0.01))
    shutil.copytree(root / "out" / "latest", root / "init")

    def without(argv, flag):
        i = argv.index(flag)
        return argv[:i] + argv[i + 2:]

    argv = without(_argv(data, base_dir, root / "wide", 0, init_from=root / "init"), "--lora-alpha")
    argv[argv.index("--lora-r") + 1] = "6"
    script.main(argv)
    out = capsys.readouterr().out
    assert "growing it to 6" in out
    wide = RheaForCausalLM.from_pretrained(root / "wide" / "out" / "latest", base_model=str(base_dir))
    assert wide.lora_rank("compress") == 6 and wide.lora_rank("generate") == 2
    assert wide.peft_model.peft_config["compress"].lora_alpha == 12
    args = json.loads((root / "wide" / "out" / "args.json").read_text())
    assert (args["lora_r"], args["lora_alpha"]) == (6, 12)
    first = [json.loads(x) for x in (root / "out" / "curve.jsonl").read_text().splitlines()][-1]
    grown = [json.loads(x) for x in (root / "wide" / "out" / "curve.jsonl").read_text().splitlines()][0]
    assert grown["own"] == pytest.approx(first["own"], abs=1e-6) and grown["control"] == pytest.approx(first["control"], abs=1e-6)

    argv = without(_argv(data, base_dir, root / "small", 0, init_from=root / "wide" / "out" / "latest"), "--lora-alpha")
    with pytest.raises(SystemExit, match="only grow"):
        script.main(argv)  # --lora-r 2 < 6
    argv = _argv(data, base_dir, root / "alpha", 0, init_from=root / "init")
    argv[argv.index("--lora-r") + 1] = "6"
    with pytest.raises(SystemExit, match="alpha follows"):
        script.main(argv)  # --lora-alpha 4 with rank 6 would change alpha/r


def test_compress_chunk_tokens_trains_on_blocks_and_records_the_chunking(script, setup, capsys):
    """--compress-chunk-tokens: texts of --chunk-tokens are compressed in pieces, the whole text is reconstructed from
    all of its blocks, the saved directory records the chunking (so the policy compresses replies the same way),
    a resume must share it, and combinations that need one block per text are refused before any model loads."""
    from rhea.modeling import RheaForCausalLM

    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 2, lr=0.01, compress_chunk_tokens=3))
    model = RheaForCausalLM.from_pretrained(root / "out" / "latest", base_model=str(base_dir))
    assert model.config.compress_chunk_tokens == 3
    rows = [x.shape[0] for x in model.compress_replies(["the cat is blue and the dog is red and"])]
    assert rows[0] > model.n_mem and rows[0] % model.n_mem == 0
    curve = [json.loads(x) for x in (root / "out" / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve] == [0, 2] and all(0.0 <= r["own"] <= 1.0 for r in curve)
    assert json.loads((root / "snap" / "state.json").read_text())["settings"]["compress_chunk_tokens"] == 3
    shutil.rmtree(root / "out" / "checkpoint")
    with pytest.raises(SystemExit, match="other settings"):
        script.main(_argv(data, base_dir, root, 4, lr=0.01))  # the snapshot was chunked, this run is not
    capsys.readouterr()
    for extra in ({"content_weight": 0.5}, {"qa_share": 0.5}, {"compress_chunk_tokens": 0}):
        with pytest.raises(SystemExit):
            script.main(_argv(data, base_dir, root / "bad", 2, **{"compress_chunk_tokens": 3, **extra}))
        assert "--compress-chunk-tokens" in capsys.readouterr().err


def test_piece_embeddings_train_an_order_signal_and_warm_start_exactly(script, setup, capsys):
    """--piece-embeddings: a fresh chunked run trains P piece offsets (saved, in the snapshot, recorded in the
    config); --init-from a directory without them starts from exactly its reconstruction (offsets zero); an old
    snapshot (no piece_embeddings key) still resumes a run without them; the flag needs --compress-chunk-tokens."""
    from rhea.modeling import RheaForCausalLM

    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 2, lr=0.01, compress_chunk_tokens=3, piece_embeddings=3))
    model = RheaForCausalLM.from_pretrained(root / "out" / "latest", base_model=str(base_dir))
    assert model.config.compress_piece_embeddings == 3 and model.mem_piece_embeds.abs().sum() > 0
    assert "mem_piece_embeds" in load_file(str(root / "snap" / "trainable.safetensors"))
    assert json.loads((root / "snap" / "state.json").read_text())["settings"]["piece_embeddings"] == 3

    script.main(_argv(data, base_dir, root / "plain", 2, lr=0.01, compress_chunk_tokens=3))
    shutil.copytree(root / "plain" / "out" / "latest", root / "init")
    state = json.loads((root / "plain" / "snap" / "state.json").read_text())
    del state["settings"]["piece_embeddings"]  # a snapshot written before the flag existed
    (root / "plain" / "snap" / "state.json").write_text(json.dumps(state))
    shutil.rmtree(root / "plain" / "out" / "checkpoint")
    script.main(_argv(data, base_dir, root / "plain", 4, lr=0.01, compress_chunk_tokens=3))
    assert "resumed from snapshot" in capsys.readouterr().out

    script.main(_argv(data, base_dir, root / "warm", 0, init_from=root / "init", compress_chunk_tokens=3,
                      piece_embeddings=4))
    assert "giving it 4" in capsys.readouterr().out
    start = [json.loads(x) for x in (root / "warm" / "out" / "curve.jsonl").read_text().splitlines()][0]
    last = [json.loads(x) for x in (root / "plain" / "out" / "curve.jsonl").read_text().splitlines()
            if json.loads(x)["step"] == 2][0]
    assert start["own"] == pytest.approx(last["own"], abs=1e-6)
    assert RheaForCausalLM.from_pretrained(root / "warm" / "out" / "latest",
                                           base_model=str(base_dir)).config.compress_piece_embeddings == 4
    with pytest.raises(SystemExit):
        script.main(_argv(data, base_dir, root / "bad", 2, piece_embeddings=2))
    assert "--compress-chunk-tokens" in capsys.readouterr().err
    # --piece-lr: the offsets' own learning rate (fresh parameters beside trained ones)
    script.main(_argv(data, base_dir, root / "fast", 2, lr=0.01, compress_chunk_tokens=3, piece_embeddings=3,
                      piece_lr=1.0))
    fast = RheaForCausalLM.from_pretrained(root / "fast" / "out" / "latest", base_model=str(base_dir))
    assert fast.mem_piece_embeds.norm() > 10 * model.mem_piece_embeds.norm()
    with pytest.raises(SystemExit):
        script.main(_argv(data, base_dir, root / "bad", 2, piece_lr=0.1))
    assert "--piece-embeddings" in capsys.readouterr().err


def test_chunk_stride_adds_overlapping_training_texts_only(script, setup, capsys):
    """--chunk-stride N < --chunk-tokens: more training texts (overlapping windows), the same held-apart ones;
    recorded in the snapshot (a resume must share it) and in the saved training record; < 1 is refused."""
    import re

    data, base_dir, root = setup

    def counts(out):
        m = re.search(r"(\d+) train chunks, (\d+) held-apart", out)
        return int(m.group(1)), int(m.group(2))

    script.main(_argv(data, base_dir, root / "a", 0))
    plain = counts(capsys.readouterr().out)
    script.main(_argv(data, base_dir, root / "b", 2, chunk_stride=3))
    strided = counts(capsys.readouterr().out)
    assert strided[0] > plain[0] and strided[1] == plain[1]
    assert json.loads((root / "b" / "snap" / "state.json").read_text())["settings"]["chunk_stride"] == 3
    cfg = json.loads((root / "b" / "out" / "latest" / "rhea_config.json").read_text())
    assert cfg["extra"]["training"]["chunk_stride"] == 3
    shutil.rmtree(root / "b" / "out" / "checkpoint")
    with pytest.raises(SystemExit, match="other settings"):
        script.main(_argv(data, base_dir, root / "b", 4))
    with pytest.raises(SystemExit):
        script.main(_argv(data, base_dir, root / "c", 2, chunk_stride=0))
    assert "--chunk-stride" in capsys.readouterr().err


def test_cooldown_lowers_the_rate_to_zero_at_max_steps_also_when_added_on_resume(script, setup):
    import argparse

    a = argparse.Namespace(warmup=2, cooldown=4, max_steps=10)
    assert [script.lr_factor(s, a) for s in (0, 1, 5, 6, 8, 10)] == [0.5, 1.0, 1.0, 1.0, 0.5, 0.0]
    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 2, warmup=1, lr=1e-3))
    state = torch.load(root / "out" / "checkpoint" / "state.pt", weights_only=False)
    assert state["opt"]["param_groups"][0]["lr"] == pytest.approx(1e-3)
    script.main(_argv(data, base_dir, root, 4, warmup=1, lr=1e-3, cooldown=2))  # resumed at step 2, cooldown new
    state = torch.load(root / "out" / "checkpoint" / "state.pt", weights_only=False)
    assert state["step"] == 4 and state["opt"]["param_groups"][0]["lr"] == pytest.approx(0.0)
    with pytest.raises(SystemExit):
        script.parse_args(_argv(data, base_dir, root, 4, cooldown=5))


def test_cooldown_counts_training_steps_after_a_snapshot_resume(script, setup):
    """A snapshot resume starts a fresh AdamW (and the scheduler's count) at the snapshot's step: the warm-up runs
    over the new optimizer's steps, the cooldown still ends at --max-steps, also through a checkpoint of that run."""
    data, base_dir, root = setup

    def final_lr():
        return torch.load(root / "out" / "checkpoint" / "state.pt", weights_only=False)["opt"]["param_groups"][0]["lr"]

    script.main(_argv(data, base_dir, root, 2, warmup=1, lr=1e-3))
    shutil.rmtree(root / "out")  # only the snapshot (step 2) is left
    script.main(_argv(data, base_dir, root, 4, warmup=1, lr=1e-3))  # resumed at 2: the optimizer's count is 2 at 4
    assert final_lr() == pytest.approx(1e-3)
    script.main(_argv(data, base_dir, root, 6, warmup=1, lr=1e-3, cooldown=4))  # the checkpoint, cooldown new
    state = torch.load(root / "out" / "checkpoint" / "state.pt", weights_only=False)
    assert state["step"] == 6 and final_lr() == pytest.approx(0.0)
    shutil.rmtree(root / "out")  # again from the snapshot (now step 6), with a longer cooldown to step 10
    script.main(_argv(data, base_dir, root, 10, warmup=1, lr=1e-3, cooldown=8))
    assert final_lr() == pytest.approx(0.0)
    log = [json.loads(x) for x in (root / "out" / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [7, 8, 9, 10]


def test_a_non_finite_step_is_skipped_logged_and_counted(script, setup, monkeypatch):
    data, base_dir, root = setup
    real = script.guarded_update
    calls = []

    def nan_at_second(loss, params, opt, max_norm=1.0):
        calls.append(1)
        return real(loss * float("nan") if len(calls) == 2 else loss, params, opt, max_norm=max_norm)

    monkeypatch.setattr(script, "guarded_update", nan_at_second)
    script.main(_argv(data, base_dir, root, 4))
    log = [json.loads(line) for line in (root / "out" / "log.jsonl").read_text().splitlines()]
    assert [r.get("skipped", False) for r in log] == [False, True, False, False]
    assert all(math.isfinite(r["grad_norm"]) for r in log if not r.get("skipped"))
    curve = [json.loads(line) for line in (root / "snap" / "curve.jsonl").read_text().splitlines()]
    assert [r["skipped_steps"] for r in curve] == [0, 1, 1]
    weights = load_file(str(root / "snap" / "trainable.safetensors"))
    assert all(torch.isfinite(w.float()).all() for w in weights.values())


def test_a_diverged_run_stops_with_a_named_error_and_finite_weights(script, setup, monkeypatch):
    from rhea.training.errors import NonFiniteTrainingError

    data, base_dir, root = setup
    real = script.guarded_update
    monkeypatch.setattr(script, "guarded_update",
                        lambda loss, params, opt, max_norm=1.0: real(loss * float("nan"), params, opt, max_norm))
    with pytest.raises(NonFiniteTrainingError, match="2 steps in a row up to step 2.*--bf16"):
        script.main(_argv(data, base_dir, root, 6, max_skipped=2))
    with pytest.raises(SystemExit):
        script.parse_args(_argv(data, base_dir, root, 6, max_skipped=-1))


def test_rebatch_continues_a_snapshot_at_another_batch_and_records_each_stretch(script, setup, capsys):
    """A snapshot written at batch 2 (a CPU run) resumes at batch 3 (a GPU run) only with --rebatch: its step and
    weights carry over, later steps take 3 items, and state.json lists both stretches. The bAbI folder is compared
    by name, so the same data staged at another path resumes too."""
    data, base_dir, root = setup
    script.main(_argv(data, base_dir, root, 2))
    shutil.rmtree(root / "out")
    with pytest.raises(SystemExit, match="other settings.*batch.*--rebatch continues it"):
        script.main(_argv(data, base_dir, root, 4, batch=3))
    capsys.readouterr()
    argv = _argv(data, base_dir, root, 4, batch=3) + ["--rebatch"]
    script.main(argv)
    out = capsys.readouterr().out
    assert "resumed from snapshot" in out and "--rebatch" in out
    state = json.loads((root / "snap" / "state.json").read_text())
    assert state["step"] == 4 and state["settings"]["batch"] == 3
    assert state["batch_history"] == [[0, 2], [2, 3]]
    steps = [json.loads(line)["step"] for line in (root / "out" / "log.jsonl").read_text().splitlines()]
    assert steps == [3, 4]
    # the lineage goes on at batch 3 from its own snapshot without the flag, and keeps its history
    shutil.rmtree(root / "out")
    script.main(_argv(data, base_dir, root, 6, batch=3))
    assert json.loads((root / "snap" / "state.json").read_text())["batch_history"] == [[0, 2], [2, 3]]


def test_babi_folder_is_compared_by_name(script):
    assert script._same_setting("babi", "/work/shared/data/babi_en_1k", ".gpu_data/babi_en_1k")
    assert not script._same_setting("babi", "/data/babi_en_1k", "/data/babi_en_10k")
    assert not script._same_setting("babi", None, "/data/babi_en_1k")
    assert not script._same_setting("batch", 4, 32)
