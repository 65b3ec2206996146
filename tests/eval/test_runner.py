"""`run_suite` / `rhea bench`: outputs, resume, bad input — on a tiny random model."""
import json

import pytest

from rhea.cli import main
from rhea.eval.runner import BenchError, run_suite
from rhea.session import ChatSession
from rhea.testing import tiny_rhea
from tests.repo_scripts import load_script

RUN = dict(n_turns=3, n_episodes=1, max_new_tokens=3, progress=False)


@pytest.fixture(scope="module")
def model():
    return tiny_rhea(scorer="latent")  # a latent scorer, so rhea rows time compress (the default scorer reads text)


def test_outputs_exist_and_parse(model, tmp_path):
    result = run_suite(model, "instruction-retention", ["vanilla", "rhea"], out=tmp_path, **RUN)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"] == result["config"]
    assert set(saved["policies"]) == {"vanilla", "rhea"}
    for policy, data in saved["policies"].items():
        assert len(data["turns"]) == 3
        assert data["aggregate"]["suite"] == "instruction-retention"
        assert "iar" in data["aggregate"]
        first, last = data["turns"][0], data["turns"][-1]
        assert first["kind"] == "instruction" and last["kind"] == "query"
        assert 0.0 <= last["iar"] <= 10.0
        # every turn carries its cost and the policy's decision trace
        for row in data["turns"]:
            assert row["context_tokens"] == row["text_tokens"] + row["latent_slots"] > 0
            assert row["latency_s"] >= row["prefill_s"] + row["decode_s"] > 0
            assert row["decisions"]["turns"] == [] or row["decisions"]["turns"][0]["turn"] == 0
    rhea_rows = saved["policies"]["rhea"]["turns"]
    assert rhea_rows[0]["decisions"]["instructions"], "the instruction turn fills the instructional memory"
    assert rhea_rows[2]["compress_s"] > 0, "rhea compresses the query and the new reply"
    assert sum(rhea_rows[2]["tiers"].values()) == 2
    assert saved["policies"]["vanilla"]["turns"][2]["compress_s"] == 0.0
    # vanilla feeds the whole history: content over full-history content is exactly 1 (template tokens excluded)
    assert saved["policies"]["vanilla"]["cost"]["context_vs_full_history"] == pytest.approx(1.0)
    # (rhea may exceed 1 here: 8 latent slots stand in for 3-token replies)
    assert all(isinstance(r["content_tokens"], int) and r["content_tokens"] > 0 for r in rhea_rows)
    summary = (tmp_path / "summary.md").read_text()
    assert "| vanilla |" in summary and "| rhea |" in summary and "IAR (0-10)" in summary
    for png in ("iar_vs_turn.png", "tokens_vs_turn.png", "latency_vs_turn.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_resume_continues_from_the_last_finished_turn(model, tmp_path, monkeypatch):
    full = run_suite(model, "state-tracking", ["rhea"], out=tmp_path / "a", n_turns=5, n_episodes=1, suite_kwargs={"n_keys": 2},
                     max_new_tokens=3, progress=False)
    # interrupt a second run after two turns: keep what a crash would leave behind
    sent = []
    original = ChatSession.send

    def crash_after_two(self, text, **kw):
        if len(sent) == 2:
            raise KeyboardInterrupt
        sent.append(text)
        return original(self, text, **kw)

    monkeypatch.setattr(ChatSession, "send", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        run_suite(model, "state-tracking", ["rhea"], out=tmp_path / "b", n_turns=5, n_episodes=1, suite_kwargs={"n_keys": 2},
                  max_new_tokens=3, progress=False)
    state = tmp_path / "b" / "state" / "rhea" / "0"
    assert len((state / "rows.jsonl").read_text().splitlines()) == 2 and not (state / "done").exists()

    resumed_sends = []

    def counting(self, text, **kw):
        resumed_sends.append(text)
        return original(self, text, **kw)

    monkeypatch.setattr(ChatSession, "send", counting)
    resumed = run_suite(model, "state-tracking", ["rhea"], out=tmp_path / "b", n_turns=5, n_episodes=1, suite_kwargs={"n_keys": 2},
                        max_new_tokens=3, progress=False)
    assert len(resumed_sends) == 3, "only the three unfinished turns run again"
    replies = lambda r: [t["reply"] for t in r["policies"]["rhea"]["turns"]]  # noqa: E731
    assert replies(resumed) == replies(full), "a resumed run gives the same replies as an uninterrupted one"
    assert (state / "done").exists()
    # a finished run resumes to the same results without generating anything
    resumed_sends.clear()
    again = run_suite(model, "state-tracking", ["rhea"], out=tmp_path / "b", n_turns=5, n_episodes=1, suite_kwargs={"n_keys": 2},
                      max_new_tokens=3, progress=False)
    assert resumed_sends == [] and replies(again) == replies(full)


def test_a_run_resumed_elsewhere_records_both_machines(model, tmp_path, monkeypatch):
    import rhea.eval.environment as machine

    original, sent = ChatSession.send, []

    def crash_after_one(self, text, **kw):
        if sent:
            raise KeyboardInterrupt
        sent.append(text)
        return original(self, text, **kw)

    monkeypatch.setattr(ChatSession, "send", crash_after_one)
    with pytest.raises(KeyboardInterrupt):
        run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    monkeypatch.setattr(ChatSession, "send", original)
    here = machine.environment(None, model.dtype)
    assert here["dtype"] == "float32"
    gpu = {**here, "device": "cuda:Some GPU", "threads": 16}
    monkeypatch.setattr(machine, "environment", lambda device=None, dtype=None: gpu)
    result = run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    assert result["policies"]["vanilla"]["environments"] == [here, gpu]
    summary = (tmp_path / "summary.md").read_text()
    assert "Turns ran on more than this invocation's machine" in summary and "cuda:Some GPU" in summary
    assert "cpu, float32, torch" in summary  # the dtype is named: two runs may differ only by it
    # a finished run read back on the same machine adds nothing
    monkeypatch.setattr(machine, "environment", lambda device=None, dtype=None: here)
    again = run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    assert again["policies"]["vanilla"]["environments"] == [here, gpu]


def test_cut_last_line_is_redone(model, tmp_path):
    run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    rows = tmp_path / "state" / "vanilla" / "0" / "rows.jsonl"
    lines = rows.read_text().splitlines()
    rows.write_text("\n".join(lines[:2]) + "\n" + lines[2][:10])  # a write cut mid-line
    (rows.parent / "done").unlink()
    result = run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    assert len(result["policies"]["vanilla"]["turns"]) == 3


def test_other_settings_refuse_to_resume(model, tmp_path):
    run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    with pytest.raises(BenchError, match="max_new_tokens"):
        run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **{**RUN, "max_new_tokens": 4})
    result = run_suite(model, "efficiency", ["vanilla"], out=tmp_path, resume=False, **{**RUN, "max_new_tokens": 4})
    assert result["config"]["max_new_tokens"] == 4
    assert json.loads((tmp_path / "config.json").read_text())["max_new_tokens"] == 4


def test_a_changed_suite_refuses_to_resume(model, tmp_path, monkeypatch):
    """Same settings, other generated turns (the suite's wording changed): the old replies must not be reused."""
    import rhea.eval.suites.efficiency as efficiency

    run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert len(saved["episodes_sha256"]) == 64
    run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)  # unchanged: resumes

    monkeypatch.setattr(efficiency, "builtin_prompts", lambda: ["Describe a different thing at length."])
    with pytest.raises(BenchError, match="other conversations"):
        run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)

    # a run checkpointed before the digest existed resumes, and gets it recorded
    digest = saved.pop("episodes_sha256")
    (tmp_path / "config.json").write_text(json.dumps(saved))
    monkeypatch.undo()
    run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    assert json.loads((tmp_path / "config.json").read_text())["episodes_sha256"] == digest


@pytest.mark.parametrize("policies, message", [
    ([], "empty"), (["nope"], "unknown policies"), (["vanilla", "vanilla"], "twice")])
def test_bad_policies(model, policies, message):
    with pytest.raises(BenchError, match=message):
        run_suite(model, "efficiency", policies, **RUN)


def test_cli_bench(model, tmp_path, capsys, monkeypatch):
    import rhea.modeling.loading as loading

    loaded = []
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: loaded.append((name, kw["device"])) or model)
    code = main(["bench", "--suite", "state-tracking,efficiency", "--policies", "vanilla,rhea", "--turns", "5",
                 "--episodes", "1", "--max-new-tokens", "2", "--model", "tiny",
                 "--out", str(tmp_path / "out"), "--quiet", "--tau-low", "0.2", "--tau-high", "0.9", "--n-keys", "2"])
    assert code == 0 and loaded == [("tiny", "auto")]
    printed = capsys.readouterr().out
    assert "# rhea bench: state-tracking" in printed and "# rhea bench: efficiency" in printed
    for suite in ("state-tracking", "efficiency"):
        saved = json.loads((tmp_path / "out" / suite / "results.json").read_text())
        assert saved["config"]["policy_kwargs"] == {"rhea": {"tau_low": 0.2, "tau_high": 0.9}}
        assert len(saved["policies"]["rhea"]["turns"]) == 5
        assert saved["config"]["suite_kwargs"] == ({"n_keys": 2} if suite == "state-tracking" else {})


@pytest.mark.parametrize("flags, suite", [(["--n-keys", "3"], "state-tracking"),
                                          (["--n-instructions", "2", "--n-revoke", "1"], "instruction-retention")])
def test_cli_suite_option_without_its_suite_fails_before_loading_a_model(tmp_path, capsys, flags, suite):
    code = main(["bench", "--suite", "efficiency", *flags, "--out", str(tmp_path), "--model", str(tmp_path / "missing")])
    assert code == 1
    err = capsys.readouterr().err
    assert f"only applies to the {suite} suite" in err and flags[0] in err


def test_cli_bad_suite_fails_before_loading_a_model(tmp_path, capsys):
    code = main(["bench", "--suite", "nope", "--out", str(tmp_path), "--model", str(tmp_path / "missing")])
    assert code == 1
    assert "unknown suite" in capsys.readouterr().err


def test_cli_policy_option_reaches_the_policy_and_a_new_policy_may_bring_its_own(model, tmp_path, monkeypatch, capsys):
    import rhea.modeling.loading as loading

    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: model)
    out = tmp_path / "out"
    common = ["bench", "--suite", "efficiency", "--turns", "3", "--max-new-tokens", "2", "--model", "tiny",
              "--out", str(out), "--quiet"]
    assert main([*common, "--policies", "vanilla,rhea", "--policy-option", "rhea.max_raw=1"]) == 0
    # a policy added later with its own options joins the folder; the earlier policies' rows are kept
    assert main([*common, "--policies", "vanilla,rhea,rhea-no-im", "--policy-option", "rhea.max_raw=1",
                 "--policy-option", "rhea-no-im.recent_raw=0"]) == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["policy_kwargs"] == {"rhea": {"max_raw": 1}, "rhea-no-im": {"recent_raw": 0}}
    assert json.loads((out / "config.json").read_text())["policy_kwargs"] == saved["config"]["policy_kwargs"]
    def mode(policy):
        records = saved["policies"][policy]["turns"][-1]["decisions"]["records"]
        return next(r["retrieval"] for r in records if "retrieval" in r)

    assert mode("rhea")["max_raw"] == 1 and mode("rhea-no-im")["recent_raw"] == 0  # the options reached the policies
    # a policy that already has turns may not change its options
    assert main([*common, "--policies", "rhea", "--policy-option", "rhea.max_raw=2"]) == 1
    assert "holds turns of 'rhea' run with options {'max_raw': 1}, not {'max_raw': 2}" in capsys.readouterr().err


@pytest.mark.parametrize("option, message", [("rhea.nope=1", "takes no option 'nope'"),
                                             ("vanilla.x=1", "which this run does not include"),
                                             ("rhea=1", "write POLICY.NAME=VALUE")])
def test_cli_bad_policy_option_fails_before_loading_a_model(tmp_path, capsys, option, message):
    code = main(["bench", "--suite", "efficiency", "--policies", "rhea", "--policy-option", option,
                 "--out", str(tmp_path), "--model", str(tmp_path / "missing")])
    assert code == 1
    assert message in capsys.readouterr().err


def test_cli_bad_policy_fails_before_loading_a_model(tmp_path, capsys):
    code = main(["bench", "--suite", "efficiency", "--policies", "vanilla,list", "--out", str(tmp_path),
                 "--model", str(tmp_path / "missing")])
    assert code == 1
    err = capsys.readouterr().err
    assert "unknown policies ['list']" in err and "'default' or 'all'" in err


def test_paper_tables_render_our_runs(model, tmp_path):
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "paper_tables.py"
    paper_tables = load_script(script)
    run_suite(model, "instruction-retention", ["rhea", "rhea-no-im"], out=tmp_path / "runs" / "ir", **RUN)
    assert paper_tables.main(["--results", str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 0
    text = (tmp_path / "tables.md").read_text()
    assert "Different model and setting" in text
    # the paper's cells come from the transcription, each table named; ours sit beside them
    no_im = next(line for line in text.splitlines() if line.startswith("| + EM + HCR (no IM) |"))
    assert "| 1.95 | rhea-no-im |" in no_im and "(n=1)" in no_im
    assert "| + EM only | 7.37 | no counterpart |" in text
    assert "## Rhea Table 2" in text and "## Rhea Table 5" in text and "## ACR Table 1" in text
    assert "| Vanilla | 8.54 (best) | 7.77 | 6.32 | 27.29 | vanilla | not run |" in text
    assert (tmp_path / "tables.png").read_bytes()[:4] == b"\x89PNG"

    # a second set of runs (e.g. calibrated thresholds) becomes labelled rows under its policy
    run_suite(model, "instruction-retention", ["rhea"], out=tmp_path / "cal" / "ir", **RUN)
    assert paper_tables.main(["--results", str(tmp_path / "runs"), "--out", str(tmp_path / "tables"),
                              "--variant", f"calibrated={tmp_path / 'cal'}"]) == 0
    lines = (tmp_path / "tables.md").read_text().splitlines()
    variant_rows = [i for i, line in enumerate(lines) if "| rhea (calibrated) |" in line]
    assert len(variant_rows) == 3  # Rhea tables 1, 3 and 4
    assert all("| rhea |" in lines[i - 1] for i in variant_rows)
    assert not any("rhea-no-im (calibrated)" in line for line in lines)
    assert any(line.startswith("Rows marked **(calibrated)**") for line in lines)
    with pytest.raises(SystemExit):
        paper_tables.main(["--results", str(tmp_path / "runs"), "--out", str(tmp_path / "t"), "--variant", "nolabel"])

    # our runs of the other papers' methods sit under their tables (the JSON their scripts write)
    sculptor = {"meta": {"backend": "m", "device": "cpu", "settings": {"n_keys": 46, "episodes": 2}},
                "paper_table1": {"updates_per_key": [4, 8], "claude-4-sonnet": {"baseline": [99.13, 95.65],
                                                                               "acm": [90.43, 91.74]}},
                "table": [{"method": "sculptor", "updates_per_key": 4, "accuracy": 0.25, "jga": 0.0,
                           "accuracy_episode_ci95": [0.1, 0.4], "prompt_tokens_spent": 900.0, "tool_calls": 1.0,
                           "accuracy_vs_plain": {"diff": -0.05, "ci95": [-0.2, 0.1], "p": 0.5, "episodes": 2}}]}
    ace = {"meta": {"model": "m", "data": ["/x/qa2.txt"], "n_questions": 3, "agents": 5, "max_rounds": 3},
           "table": [{"method": "ace N=3", "n": 3, "accuracy": 2 / 3, "accuracy_95ci": [0.2, 0.94], "avg_tokens": 10.0,
                      "think_share": 0.5, "accuracy_minus_rag": {"diff": 0.33, "low": 0.0, "high": 0.67,
                                                                  "p_value": 0.5}}]}
    acr = {"model": "m", "device": "cpu", "tasks": "babi", "babi": ["/x/qa2_two.txt"], "n_test": 4, "temperature": 0.0,
           "settings": {"none": {"n": 4, "em": 0.25, "em_ci95": [0.05, 0.7], "value_accuracy": 0.5,
                                 "value_accuracy_ci95": [0.15, 0.85], "context_tokens": 100.0, "controller_tokens": 0.0},
                        "prompt-only": {"n": 4, "em": 0.5, "em_ci95": [0.15, 0.85], "value_accuracy": 0.75,
                                        "value_accuracy_ci95": [0.3, 0.95], "context_tokens": 60.0,
                                        "controller_tokens": 700.0}},
           "vs_none": {"prompt-only": {"value": {"diff": 0.25, "low": 0.0, "high": 0.5, "p_value": 1.0}}}}
    (tmp_path / "s.json").write_text(json.dumps(sculptor))
    (tmp_path / "a.json").write_text(json.dumps(ace))
    (tmp_path / "r.json").write_text(json.dumps(acr))
    ca = {"model": "m", "summary": {
        "vanilla": {"conversations": 3, "topiocqa_f1": {"mean": 0.2, "low": 0.1, "high": 0.3},
                    "context_tokens_per_turn": {"mean": 100.0, "low": 90.0, "high": 110.0}},
        "context-agent": {"conversations": 3, "topiocqa_f1": {"mean": 0.15, "low": 0.1, "high": 0.2},
                          "context_tokens_per_turn": {"mean": 120.0, "low": 100.0, "high": 140.0},
                          "topic_pair_agreement": {"mean": 0.7, "low": 0.6, "high": 0.8}},
        "paired_vs_vanilla": {"context-agent": {"f1": {"diff": -0.05, "low": -0.1, "high": 0.0, "p_value": 0.25,
                                                       "n": 3}}}}}
    (tmp_path / "c.json").write_text(json.dumps(ca))
    assert paper_tables.main(["--results", str(tmp_path / "runs"), "--out", str(tmp_path / "tables"),
                              "--ours", f"sculptor={tmp_path / 's.json'}", "--ours", f"ace={tmp_path / 'a.json'}",
                              "--ours", f"acr={tmp_path / 'r.json'}", "--ours", f"context-agent={tmp_path / 'c.json'}"]) == 0
    text = (tmp_path / "tables.md").read_text()
    assert "| sculptor | 4 | 0.250 [0.10, 0.40] | -0.050 [-0.20, 0.10], p = 0.5 | 0.00 | 900 | 1.0 | 99.13 | 90.43 |" in text
    assert text.index("| sculptor | 4 |") < text.index("## Sculptor Table 2")  # under Table 1, once
    assert "| ace N=3 | 3 | 0.667 [0.20, 0.94] | +0.330 [0.00, 0.67], p = 0.5 | 10 | 50.0 |" in text
    assert "| none | 4 | 0.250 [0.05, 0.70] | 0.500 [0.15, 0.85] |  | 100 | 0 |" in text
    assert "| prompt-only | 4 | 0.500 [0.15, 0.85] | 0.750 [0.30, 0.95] | +0.250 [0.00, 0.50], p = 1 | 60 | 700 |" in text
    assert text.index("## ACR Table 1") < text.index("| prompt-only | 4 |") < text.index("## ACE Table 1")
    assert "| vanilla | 3 | 0.200 [0.100, 0.300] |  | 100 [90, 110] |  |" in text
    assert ("| context-agent | 3 | 0.150 [0.100, 0.200] | -0.050 [-0.100, 0.000], p = 0.25 (3 conversations) | "
            "120 [100, 140] | 0.700 [0.600, 0.800] |") in text
    for bad in ("oracle=x.json", f"acr={tmp_path / 'missing.json'}"):
        with pytest.raises(SystemExit):
            paper_tables.main(["--results", str(tmp_path / "runs"), "--out", str(tmp_path / "t"), "--ours", bad])


def test_adding_a_policy_reuses_the_finished_ones(model, tmp_path, monkeypatch):
    first = run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    sent = []
    original = ChatSession.send
    monkeypatch.setattr(ChatSession, "send", lambda self, text, **kw: sent.append(self.policy.name) or original(self, text, **kw))
    both = run_suite(model, "efficiency", ["vanilla", "recent-k"], out=tmp_path, **RUN)
    assert sent == ["recent-k"] * 3
    assert both["policies"]["vanilla"]["turns"] == first["policies"]["vanilla"]["turns"]
    assert json.loads((tmp_path / "config.json").read_text())["policies"] == ["vanilla", "recent-k"]


def test_each_finished_policy_is_written_before_the_next_runs(model, tmp_path, monkeypatch):
    """A long run stopped during its second policy leaves results.json with the first one."""
    original = ChatSession.send

    def stop_in_recent_k(self, text, **kw):
        if self.policy.name == "recent-k":
            raise KeyboardInterrupt
        return original(self, text, **kw)

    monkeypatch.setattr(ChatSession, "send", stop_in_recent_k)
    with pytest.raises(KeyboardInterrupt):
        run_suite(model, "efficiency", ["vanilla", "recent-k"], out=tmp_path, **RUN)
    written = json.loads((tmp_path / "results.json").read_text())
    assert list(written["policies"]) == ["vanilla"] and len(written["policies"]["vanilla"]["turns"]) == 3
    assert (tmp_path / "summary.md").is_file()


def test_a_run_resumes_only_in_the_dtype_it_began_in(model, tmp_path):
    """Replies decoded in bfloat16 differ from float32 ones: a folder holds one dtype (a run
    resumed on a machine with native bf16 would otherwise switch part-way, silently)."""
    run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    path = tmp_path / "config.json"
    saved = json.loads(path.read_text())
    assert saved["dtype"] == "float32"
    path.write_text(json.dumps({**saved, "dtype": "bfloat16"}))
    with pytest.raises(BenchError, match=r"ran in the run: bfloat16.*loads the model in float32.*--dtype bfloat16"):
        run_suite(model, "efficiency", ["vanilla", "recent-k"], out=tmp_path, **RUN)

    # a config recorded before the dtype was: the recorded environments say what the turns ran in
    legacy = {k: v for k, v in saved.items() if k != "dtype"}
    path.write_text(json.dumps(legacy))
    envs = tmp_path / "state" / "vanilla" / "0" / "environments.jsonl"
    recorded = json.loads(envs.read_text().splitlines()[-1])
    envs.write_text(json.dumps({**recorded, "dtype": "bfloat16"}) + "\n")
    with pytest.raises(BenchError, match=r"vanilla/0: bfloat16.*--dtype bfloat16"):
        run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    envs.write_text(json.dumps(recorded) + "\n")
    run_suite(model, "efficiency", ["vanilla"], out=tmp_path, **RUN)
    assert json.loads(path.read_text())["dtype"] == "float32", "the legacy config gets its dtype recorded"

    # a finished policy kept only in results.json (no state/) counts too
    import shutil

    shutil.rmtree(tmp_path / "state")
    results = json.loads((tmp_path / "results.json").read_text())
    results["policies"]["vanilla"]["environments"] = [{**recorded, "dtype": "bfloat16"}]
    (tmp_path / "results.json").write_text(json.dumps(results))
    path.write_text(json.dumps(legacy))
    with pytest.raises(BenchError, match=r"vanilla: bfloat16"):
        run_suite(model, "efficiency", ["vanilla", "recent-k"], out=tmp_path, **RUN)


def test_bench_dtype_flag_is_checked_before_loading(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--suite", "efficiency", "--out", "x", "--dtype", "float8"])
    assert "--dtype" in capsys.readouterr().err


def test_cli_anchor_bias_switches_the_attention_and_is_recorded(tmp_path, monkeypatch):
    import rhea.modeling.loading as loading
    from rhea.testing import tiny_rhea

    own = tiny_rhea()  # its attention is switched: not the module's shared model
    before = own.base_model.config._attn_implementation
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: own)
    out = tmp_path / "out"
    assert main(["bench", "--suite", "instruction-retention", "--policies", "vanilla,rhea", "--turns", "4",
                 "--episodes", "1", "--max-new-tokens", "2", "--model", "tiny", "--out", str(out), "--quiet",
                 "--anchor-bias", "1.5"]) == 0
    assert own.config.anchor_bias == 1.5 and own.base_model.config._attn_implementation == "rhea_anchored"
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["anchor_bias"] == 1.5
    rows = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    assert rows and all(r["options"].get("anchor_bias") == 1.5 for r in rows)
    own.set_anchor_bias(0.0)  # back to the backbone's own attention
    assert own.base_model.config._attn_implementation == before and not own.anchor_attention_registered


@pytest.mark.parametrize("value", ["-1", "nan", "1e9"])
def test_cli_bad_anchor_bias_fails_before_loading_a_model(tmp_path, capsys, value):
    code = main(["bench", "--suite", "efficiency", "--anchor-bias", value, "--out", str(tmp_path / "o"),
                 "--model", str(tmp_path / "missing")])
    assert code == 1 and "--anchor-bias" in capsys.readouterr().err and not (tmp_path / "o").exists()
