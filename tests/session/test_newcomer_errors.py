"""What a newcomer's first mistakes get back: each error names what was wrong for
this input and the one fix that applies, before any model loads or any output is written."""
import argparse
import re

import pytest
import torch

from rhea.cli import apply_threads, build_parser, main
from rhea.context import ContextOverflowError
from rhea.errors import CheckpointError, InvalidTextError, UnknownModelError
from rhea.session import ChatSession, MessageError
from rhea.session.repl import format_trace, repl


@pytest.fixture(scope="module")
def model():
    from rhea.testing import tiny_rhea

    return tiny_rhea()


# ---------------------------------------------------------------- messages
def test_a_surrogate_escaped_message_gets_a_named_error(model):
    chat = ChatSession(model, policy="vanilla", max_new_tokens=2)
    bad = b"caf\xe9 au lait".decode("utf-8", errors="surrogateescape")
    with pytest.raises(MessageError, match=r"unpaired surrogate '\\udce9' at character 3.*errors='replace'"):
        chat.send(bad)
    assert len(chat.conversation) == 0
    with pytest.raises(InvalidTextError, match="texts\\[1\\] holds an unpaired surrogate"):
        model.compress(["fine", bad])


def test_one_oversized_message_is_told_to_split_not_to_switch_policy(model):
    from rhea.testing import tiny_llama, tiny_tokenizer
    from rhea.modeling import RheaConfig, RheaForCausalLM

    tok = tiny_tokenizer()
    small = RheaForCausalLM.from_base(tiny_llama(len(tok), max_positions=64), tok, RheaConfig(n_mem=4, lora_r=2))
    chat = ChatSession(small, policy="rhea", max_new_tokens=8)
    with pytest.raises(ContextOverflowError) as e:
        chat.send("the cat sat on the mat " * 20)
    msg = str(e.value)
    assert "Split the message into parts of at most" in msg and "lower max_new_tokens" in msg
    assert "Use a policy" not in msg and "'rhea'" not in msg
    assert len(chat.conversation) == 0


def test_a_long_history_under_vanilla_fits_the_window_by_dropping_the_oldest_turns(model):
    """The full-history policy never overflows: past the window its oldest turns leave the prompt, each
    with the budget recorded as its reason (a conversation never becomes unanswerable)."""
    from rhea.testing import tiny_llama, tiny_tokenizer
    from rhea.modeling import RheaConfig, RheaForCausalLM

    tok = tiny_tokenizer()
    small = RheaForCausalLM.from_base(tiny_llama(len(tok), max_positions=96), tok, RheaConfig(n_mem=4, lora_r=2))
    chat = ChatSession(small, policy="vanilla", max_new_tokens=8)
    for _ in range(20):
        chat.send("the cat sat on the mat")
    assert len(chat.conversation) == 20
    dropped = [d for d in chat.last_plan.decisions.turns if d.tier == "drop"]
    assert dropped and all("budget" in d.note for d in dropped)
    assert chat.records[-1].prompt_tokens <= chat.token_budget.prompt_tokens


# ---------------------------------------------------------------- /trace
def test_trace_is_a_readable_table(model):
    out = []
    chat = ChatSession(model, policy="rhea", max_new_tokens=3)
    repl(chat, ["/trace", "From now on, always answer in French.", "what is the cat ?", "the dog ?", "/trace"],
         write=out.append)
    text = "".join(out)
    assert "(no turn yet)" in text
    trace = text[text.rindex("trace of turn"):]
    assert trace.startswith("trace of turn 2 (policy rhea)")
    assert "instruction block (1):\n    1. From now on, always answer in French." in trace
    assert re.search(r"turn  tier\s+score  reason", trace)
    rows = re.findall(r"^\s+(\d+)\s+(raw|latent|drop)\s+(-?\d\.\d{3})\s+\S", trace, flags=re.M)
    assert [int(r[0]) for r in rows] == [0, 1]
    assert re.search(r"tokens: \d+ text \+ \d+ latent slots = \d+ vs \d+ with the full history", trace)
    assert not re.search(r"\d\.\d{5,}", trace), "no full-precision floats"
    assert "PlanDecisions(" not in trace
    assert format_trace(chat) == trace.rstrip("\n")


# ---------------------------------------------------------------- model paths
def test_a_missing_model_path_says_it_does_not_exist(tmp_path, capsys):
    from rhea.modeling.loading import load_rhea_model

    with pytest.raises(CheckpointError, match=r"model path /nonexistent/model does not exist") as e:
        load_rhea_model("/nonexistent/model")
    assert "hub" not in str(e.value).lower()
    assert main(["chat", "--model", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds neither config.json"):
        load_rhea_model(str(tmp_path / "empty"))


# ---------------------------------------------------------------- export
def test_export_takes_zoo_names_and_checks_before_loading(tmp_path):
    from rhea.modeling.export import export_model, resolve_export_source

    shipped, name = resolve_export_source("smollm2-135m")
    assert (shipped / "rhea_config.json").is_file() and name is None
    # every zoo model ships adapters; a zoo name without them (export of the plain base) is
    # tested with a patched adapters folder in tests/modeling/test_models_zoo.py
    qwen, name = resolve_export_source("qwen2.5-coder-1.5b")
    assert qwen.name == "qwen2.5-coder-1.5b" and (qwen / "rhea_config.json").is_file() and name is None
    with pytest.raises(UnknownModelError, match="did you mean 'smollm2-135m'"):
        resolve_export_source("smolm2-135m")
    with pytest.raises(CheckpointError, match="does not exist"):
        resolve_export_source(str(tmp_path / "nope"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(CheckpointError, match="not a Rhea directory"):
        resolve_export_source(tmp_path / "plain")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("taken")
    with pytest.raises(FileExistsError, match="not empty"):  # refused before the model would load
        export_model("smollm2-135m", tmp_path / "out")


# ---------------------------------------------------------------- bench thresholds
@pytest.mark.parametrize("flags, message", [
    (["--tau-low", "0.9", "--tau-high", "0.5"], "--tau-low 0.9 is above --tau-high 0.5"),
    (["--tau-low", "0.95"], "--tau-low 0.95 is above smollm2-135m's tau_high"),
    (["--tau-high", "nan"], "must be a finite number"),
])
def test_bench_thresholds_fail_before_loading_and_before_writing(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    assert main(["bench", "--suite", "efficiency", "--policies", "vanilla,rhea", *flags, "--out", str(out)]) == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_bench_thresholds_without_a_rhea_policy_are_refused(tmp_path, capsys):
    assert main(["bench", "--suite", "efficiency", "--policies", "vanilla", "--tau-low", "0.3",
                 "--out", str(tmp_path / "run")]) == 1
    assert "only apply to the rhea policies" in capsys.readouterr().err


def test_run_suite_checks_thresholds_before_writing_config(model, tmp_path):
    from rhea.eval.runner import BenchError, run_suite

    with pytest.raises(BenchError, match="policy .rhea.: tau_low=0.9 must be <= tau_high=0.2"):
        run_suite(model, "efficiency", ["rhea"], n_turns=2, n_episodes=1, max_new_tokens=2, progress=False,
                  policy_kwargs={"rhea": {"tau_low": 0.9, "tau_high": 0.2}}, out=tmp_path / "run")
    assert not (tmp_path / "run" / "config.json").exists()


# ---------------------------------------------------------------- train --set
def test_train_set_with_the_wrong_section_names_the_right_one(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data:\n  path: nowhere.jsonl\n")
    assert main(["train", "--config", str(cfg), "--set", "run.max_steps=10"]) == 1
    assert "did you mean optim.max_steps?" in capsys.readouterr().err


# ---------------------------------------------------------------- threads
def test_single_sequence_commands_default_to_one_thread(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    parser = build_parser()
    assert apply_threads(parser.parse_args(["chat"])) == 1
    assert apply_threads(parser.parse_args(["chat", "--threads", "3"])) == 3
    assert apply_threads(parser.parse_args(["bench", "--suite", "efficiency", "--out", "x"])) == 1
    assert apply_threads(parser.parse_args(["models", "list"])) is None  # not a decoding command
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert apply_threads(parser.parse_args(["chat"])) is None  # the user's setting is kept
    assert calls == [1, 3, 1]
    with pytest.raises(SystemExit):
        parser.parse_args(["chat", "--threads", "0"])


def test_tokens_plot_label_fits_the_figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rhea.eval.report import _draw, _plots

    rows = [{"turn_index": i, "context_tokens": 50 + 10 * i, "full_history_tokens": 60 + 30 * i, "latency_s": 1.0 + i}
            for i in range(4)]
    results = {"config": {"suite": "efficiency", "model": "m"}, "policies": {"rhea": {"turns": rows}}}
    for _, field, label in _plots(results["config"]):
        fig = _draw(results, field, label)
        fig.canvas.draw()
        box = fig.axes[0].yaxis.label.get_window_extent(fig.canvas.get_renderer())
        assert box.y0 >= 0 and box.y1 <= fig.bbox.height and box.x0 >= 0, (label, box)
        plt.close(fig)


# ---------------------------------------------------------------- rhea chat's policy options
def test_a_policy_option_the_policy_does_not_take_is_refused_before_loading(monkeypatch):
    from rhea.errors import RheaConfigError
    from rhea.session import repl as repl_mod

    def no_load(*a, **k):  # validation must come first: loading would be wasted work
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr("rhea.modeling.loading.load_rhea_model", no_load)
    args = build_parser().parse_args(["chat", "--policy", "vanilla", "--scorer", "bm25"])
    with pytest.raises(RheaConfigError, match=r"--scorer do\(es\) not apply to policy 'vanilla'"):
        repl_mod.run_repl(args)
    args = build_parser().parse_args(["chat", "--policy", "rhea", "--scorer", "bm25", "--max-raw", "3"])
    assert repl_mod.policy_options(args) == {"scorer": "bm25", "max_raw": 3}
    args = build_parser().parse_args(["chat", "--policy", "recent-k"])
    assert repl_mod.policy_options(args) == {}


# ---------------------------------------------------------------- counts checked before any load
@pytest.mark.parametrize("argv, flag, minimum", [
    (["bench", "--suite", "efficiency", "--turns", "0"], "--turns", 1),
    (["bench", "--suite", "efficiency", "--batch-episodes", "0"], "--batch-episodes", 1),
    (["bench", "--suite", "efficiency", "--episodes", "-2"], "--episodes", 1),
    (["bench", "--suite", "efficiency", "--max-new-tokens", "0"], "--max-new-tokens", 1),
    (["bench", "--suite", "instruction-retention", "--n-revoke", "-1"], "--n-revoke", 0),
    (["chat", "--max-raw", "-1"], "--max-raw", 0),
    (["chat", "--max-latent", "x"], "--max-latent", 0),
    (["chat", "--max-new-tokens", "0"], "--max-new-tokens", 1),
])
def test_a_count_out_of_range_is_a_usage_error_before_the_model_loads(argv, flag, minimum, tmp_path, capsys,
                                                                       monkeypatch):
    import rhea.modeling.loading as loading

    def no_load(*a, **k):  # the parser must refuse first: reaching a load is the bug
        raise AssertionError("a model was loaded for an invalid count")

    monkeypatch.setattr(loading, "load_rhea_model", no_load)
    out = tmp_path / "out"
    extra = ["--out", str(out)] if argv[0] == "bench" else []
    with pytest.raises(SystemExit) as e:
        main(argv + extra)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and f"must be an int >= {minimum}" in err
    assert not out.exists()
