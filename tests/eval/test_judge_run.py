"""`rhea judge`: a long-horizon run's replies rated afterwards get the ratings an inline judge gives,
resume after an interruption, and refuse a second judge unless asked."""
import json

import pytest

from rhea.eval.judge import Judge
from rhea.eval.judge_run import JUDGE_DIR, RATINGS_FILE, judge_run, read_run
from rhea.eval.runner import BenchError, run_suite
from rhea.testing import tiny_rhea

SETTINGS = dict(n_turns=7, n_episodes=3, max_new_tokens=3, progress=False, suite_kwargs={"n_facts": 1})


class PromptRater:
    """A judge model whose rating depends only on the prompt (so order and batching cannot change it)."""

    def __init__(self, fail_after: int | None = None):
        self.calls = 0
        self.fail_after = fail_after

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt  # the judging stopped part-way
        self.calls += 1
        text = "".join(m["content"] for m in messages)
        return f"Looks fine. Rating: [[{1 + sum(map(ord, text)) % 10}]]"


@pytest.fixture(scope="module")
def model():
    return tiny_rhea().eval()


@pytest.fixture(scope="module")
def runs(model, tmp_path_factory):
    """The same episodes judged inline, and unjudged (judged afterwards by each test on a copy)."""
    root = tmp_path_factory.mktemp("runs")
    inline = run_suite(model, "long-horizon", ["vanilla", "recent-k"], out=root / "inline", batch_episodes=3,
                       **{**SETTINGS, "suite_kwargs": {**SETTINGS["suite_kwargs"], "judge": Judge(PromptRater())}})
    run_suite(model, "long-horizon", ["vanilla", "recent-k"], out=root / "plain", batch_episodes=3, **SETTINGS)
    return inline, root / "plain"


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_ratings_afterwards_equal_ratings_inline(runs, tmp_path):
    inline, plain = runs
    out = _copy(plain, tmp_path / "run")
    judged = judge_run(out, Judge(PromptRater(), batch_size=4), progress=False)
    for policy in ("vanilla", "recent-k"):
        a, b = inline["policies"][policy]["turns"], judged["policies"][policy]["turns"]
        queries = [r for r in a if r["kind"] == "query"]
        assert len(queries) == 3 * 5 and all(r["judge_rating"] is not None for r in queries)
        for key in ("judge", "judge_rating", "judge_prompt", "judge_source"):
            assert [r.get(key) for r in a] == [r.get(key) for r in b]
        assert judged["policies"][policy]["aggregate"]["judge_mean"] == inline["policies"][policy]["aggregate"]["judge_mean"]
    # the multi-turn prompt carries the first answer of the same policy's own conversation
    assert {r["judge_prompt"] for r in b if r["kind"] == "query"} >= {"single-v1-multi-turn"}
    # recorded as an inline judge records it; the files on disk say the same
    assert judged["config"] == inline["config"] | {"policies": judged["config"]["policies"]}
    assert json.loads((out / "config.json").read_text())["suite_kwargs"] == inline["config"]["suite_kwargs"]
    saved = json.loads((out / "results.json").read_text())
    assert saved["judged"]["ratings"] == 2 * 15 and saved["policies"]["vanilla"]["aggregate"]["judge"] == "ok"
    assert "judge (1-10)" in (out / "summary.md").read_text()
    lines = (out / JUDGE_DIR / RATINGS_FILE).read_text().splitlines()
    assert len(lines) == 30 and "Looks fine" in json.loads(lines[0])["judgment"]


def test_a_judged_folder_resumes_under_rhea_bench_with_that_judge(model, runs, tmp_path):
    _, plain = runs
    out = _copy(plain, tmp_path / "run")
    judge_run(out, Judge(PromptRater()), progress=False)
    ran = run_suite(model, "long-horizon", ["vanilla"], out=out, batch_episodes=3,
                    **{**SETTINGS, "suite_kwargs": {**SETTINGS["suite_kwargs"], "judge": Judge(PromptRater())}})
    # taken from results.json: every rating kept, no reply generated again
    assert all(r.get("judge_rating") is not None for r in ran["policies"]["vanilla"]["turns"] if r["kind"] == "query")


def test_an_interrupted_judging_resumes_where_it_stopped(runs, tmp_path):
    _, plain = runs
    out = _copy(plain, tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        judge_run(out, Judge(PromptRater(fail_after=5), batch_size=2), progress=False)
    assert len((out / JUDGE_DIR / RATINGS_FILE).read_text().splitlines()) == 4  # two whole batches kept
    assert "judge" not in json.loads((out / "config.json").read_text())["suite_kwargs"]  # not judged yet
    rater = PromptRater()
    judged = judge_run(out, Judge(rater, batch_size=2), progress=False)
    assert rater.calls == 30 - 4
    fresh = judge_run(_copy(plain, tmp_path / "fresh"), Judge(PromptRater()), progress=False)
    assert [r.get("judge_rating") for r in judged["policies"]["vanilla"]["turns"]] == \
        [r.get("judge_rating") for r in fresh["policies"]["vanilla"]["turns"]]
    again = PromptRater()
    judge_run(out, Judge(again), progress=False)  # already rated by this judge: nothing to do
    assert again.calls == 0


def test_another_judge_is_refused_unless_rejudge(runs, tmp_path):
    _, plain = runs
    out = _copy(plain, tmp_path / "run")
    judge_run(out, Judge(PromptRater()), progress=False)
    with pytest.raises(BenchError, match="another judge.*--rejudge"):
        judge_run(out, Judge(PromptRater(), max_new_tokens=64), progress=False)
    rater = PromptRater()
    judged = judge_run(out, Judge(rater, max_new_tokens=64), rejudge=True, progress=False)
    assert rater.calls == 30 and judged["config"]["suite_kwargs"]["judge"]["max_new_tokens"] == 64
    # a part-judged folder under another judge is refused as well
    part = _copy(plain, tmp_path / "part")
    with pytest.raises(KeyboardInterrupt):
        judge_run(part, Judge(PromptRater(fail_after=1), batch_size=1), progress=False)
    with pytest.raises(BenchError, match="holds ratings by another judge"):
        judge_run(part, Judge(PromptRater(), max_new_tokens=64), progress=False)


def test_folders_that_cannot_be_judged_are_named(model, runs, tmp_path):
    _, plain = runs
    with pytest.raises(BenchError, match="does not exist"):
        read_run(tmp_path / "nowhere")
    run_suite(model, "efficiency", ["vanilla"], n_turns=2, max_new_tokens=2, progress=False, out=tmp_path / "eff")
    with pytest.raises(BenchError, match="'efficiency' run; only 'long-horizon'"):
        read_run(tmp_path / "eff")
    out = _copy(plain, tmp_path / "cut")
    results = json.loads((out / "results.json").read_text())
    results["policies"]["vanilla"]["turns"] = results["policies"]["vanilla"]["turns"][:5]
    (out / "results.json").write_text(json.dumps(results))
    with pytest.raises(BenchError, match="'vanilla' has 5 of 21 turns"):
        read_run(out)
    (out / "results.json").write_text("{not json")
    with pytest.raises(BenchError, match="not valid JSON"):
        read_run(out)


def test_the_cli_checks_the_folder_and_the_judge_before_loading_a_model(runs, tmp_path, capsys, monkeypatch):
    from rhea import cli
    import rhea.modeling.loading as loading

    monkeypatch.setattr(loading, "load_rhea_model", lambda *a, **k: pytest.fail("a model was loaded"))
    assert cli.main(["judge", str(tmp_path / "nowhere")]) == 1
    assert "does not exist" in capsys.readouterr().err
    _, plain = runs
    assert cli.main(["judge", str(plain), "--judge-local", "none"]) == 1
    assert "no judge" in capsys.readouterr().err
    assert cli.main(["judge", str(plain), "--judge-local", "tiny-x", "--judge-url", "http://x"]) == 1
    assert "both name a judge" in capsys.readouterr().err


def test_the_cli_judges_a_run_directly_with_a_local_model(runs, tmp_path, capsys, monkeypatch):
    from rhea import cli
    import rhea.modeling.loading as loading

    _, plain = runs
    out = _copy(plain, tmp_path / "run")
    loaded = []
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: loaded.append(name) or tiny_rhea().eval())
    monkeypatch.setattr(loading, "check_model_path", lambda name: None)
    assert cli.main(["judge", str(out), "--judge-local", "tiny", "--judge-direct", "--quiet"]) == 0
    saved = json.loads((out / "results.json").read_text())
    assert loaded == ["tiny"] and saved["config"]["suite_kwargs"]["judge"]["explain"] is False
    rows = [r for r in saved["policies"]["vanilla"]["turns"] if r["kind"] == "query"]
    assert rows and all(r["judge_source"] == "direct" and 1 <= r["judge_rating"] <= 10 for r in rows)
    assert "judge (1-10)" in capsys.readouterr().out
    ratings = [json.loads(line) for line in (out / JUDGE_DIR / RATINGS_FILE).read_text().splitlines()]
    assert all(1 <= r["expected"] <= 10 for r in ratings)  # a direct verdict keeps its probability-weighted rating
    assert cli.main(["judge", str(out), "--judge-url", "http://x", "--judge-direct"]) == 1
    assert "--judge-direct reads the rating" in capsys.readouterr().err


def test_paper_tables_put_the_judged_rating_beside_the_papers_long_mt_bench_column(runs, tmp_path):
    """Rhea Table 1's Acc column gets ours from a judged long-horizon run kept in its own folder
    (``--results`` twice); an unjudged run says so instead of a number."""
    from pathlib import Path

    from tests.repo_scripts import load_script

    paper_tables = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "paper_tables.py")
    _, plain = runs
    unjudged = _copy(plain, tmp_path / "unjudged" / "long-horizon")
    assert paper_tables.main(["--results", str(unjudged.parent), "--out", str(tmp_path / "t0")]) == 0
    text = (tmp_path / "t0.md").read_text()
    assert "| Vanilla | 8.54 (best) | 7.77 | 6.32 | 27.29 | vanilla | not judged | not run |" in text
    assert "; no judge" in text

    judged = judge_run(_copy(plain, tmp_path / "judged" / "long-horizon"), Judge(PromptRater()), progress=False)
    stats = judged["statistics"]["policies"]
    (tmp_path / "elsewhere").mkdir()  # a second root without runs adds nothing
    assert paper_tables.main(["--results", str(tmp_path / "judged"), "--results", str(tmp_path / "elsewhere"),
                              "--out", str(tmp_path / "t1")]) == 0
    lines = (tmp_path / "t1.md").read_text().splitlines()
    vanilla = next(line for line in lines if line.startswith("| Vanilla |"))
    mean = stats["vanilla"]["intervals"]["judge_mean"]
    assert f"| vanilla | {mean['mean']:.2f} [{mean['low']:.2f}, {mean['high']:.2f}] (n=3) |" in vanilla
    recent = next(line for line in lines if line.startswith("| Recent-k |"))
    diff = stats["recent-k"]["vs_baseline"]["judge_mean"]
    assert f"; vs vanilla {diff['diff']:+.2f} [{diff['low']:+.2f}, {diff['high']:+.2f}] p=" in recent
    assert "long-horizon replies rated with MT-Bench's prompts by" in "\n".join(lines)


def test_a_local_judge_names_its_dtype_and_older_records_without_one_still_match(runs, tmp_path, monkeypatch):
    import torch

    from rhea import cli
    from rhea.backends.llm import HFGenerator
    from rhea.eval.judge import same_judge
    import rhea.modeling.loading as loading

    described = Judge(HFGenerator(tiny_rhea().eval()), explain=False).describe()
    assert described["dtype"] == "float32"
    assert same_judge({k: v for k, v in described.items() if k != "dtype"}, described)  # a description without the dtype
    assert not same_judge({**described, "dtype": "bfloat16"}, described)

    _, plain = runs
    out = _copy(plain, tmp_path / "run")
    asked = []
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: asked.append(kw["dtype"]) or tiny_rhea().eval())
    monkeypatch.setattr(loading, "check_model_path", lambda name: None)
    assert cli.main(["judge", str(out), "--judge-local", "tiny", "--judge-direct", "--quiet", "--dtype",
                     "float32"]) == 0
    assert asked == [torch.float32]
    settings = json.loads((out / JUDGE_DIR / "config.json").read_text())
    assert settings["judge"]["dtype"] == "float32"
    # ratings recorded in bfloat16 are another judge's
    (out / JUDGE_DIR / "config.json").write_text(json.dumps({**settings, "judge": {**settings["judge"],
                                                                                  "dtype": "bfloat16"}}))
    results = json.loads((out / "results.json").read_text())
    results["config"]["suite_kwargs"].pop("judge")
    (out / "results.json").write_text(json.dumps(results))
    with pytest.raises(BenchError, match="another judge"):
        judge_run(out, Judge(HFGenerator(tiny_rhea().eval()), explain=False), progress=False)


class LabelRater:
    """A correctness judge model whose label depends only on the prompt (so order and batching cannot change it)."""

    def __init__(self):
        self.prompts = []

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        (message,) = messages
        self.prompts.append(message["content"])
        return '{"label": "%s"}' % ("CORRECT" if sum(map(ord, message["content"])) % 2 else "WRONG")


def test_a_multi_session_qa_run_is_judged_for_correctness_afterwards_as_inline(model, tmp_path):
    """LoCoMo's correctness judge: each question's reply judged with the question and gold answer only; the share
    judged correct is the run's `judge_correct`, with intervals; a run without a judge has none."""
    from tests.eval.test_multi_session_qa import _native

    common = dict(data=str(_native(tmp_path)), max_new_tokens=3, progress=False)
    rater = LabelRater()
    inline = run_suite(model, "multi-session-qa", ["vanilla", "recent-k"], out=tmp_path / "inline",
                       suite_kwargs={"min_history_turns": 8, "judge": Judge(rater)}, **common)
    plain = run_suite(model, "multi-session-qa", ["vanilla", "recent-k"], out=tmp_path / "plain",
                      suite_kwargs={"min_history_turns": 8}, **common)
    assert "judge_correct" not in plain["policies"]["vanilla"]["aggregate"]
    assert "judged correct" not in (tmp_path / "plain" / "summary.md").read_text()
    judged = judge_run(tmp_path / "plain", Judge(LabelRater(), batch_size=3), progress=False)
    questions = [r for r in inline["policies"]["vanilla"]["turns"] if r["kind"] == "question"]
    assert len(rater.prompts) == 2 * len(questions) and all(
        "Gold answer: " in p and "Generated answer: " in p for p in rater.prompts)
    assert not any("Fact 0-" in p for p in rater.prompts)  # the history is not shown to the judge
    for policy in ("vanilla", "recent-k"):
        a, b = inline["policies"][policy], judged["policies"][policy]
        assert [r["judge_rating"] for r in a["turns"]] == [r["judge_rating"] for r in b["turns"]]
        assert all(r["judge_prompt"] == "locomo-correctness" for r in b["turns"])
        share = sum(r["judge_rating"] for r in b["turns"]) / len(b["turns"])
        assert b["aggregate"]["judge_correct"] == a["aggregate"]["judge_correct"] == share
        assert "judge_correct" in judged["statistics"]["policies"][policy]["intervals"]
    summary = (tmp_path / "plain" / "summary.md").read_text()
    assert "judged correct" in summary and "Judge check" in summary
    check = judged["policies"]["vanilla"]["aggregate"]["judge_check"]
    rows = judged["policies"]["vanilla"]["turns"]
    assert check["exact"] == sum(r["f1"] == 1.0 for r in rows) and check["disjoint"] == sum(r["f1"] == 0.0 for r in rows)


def test_bench_judges_multi_session_qa_only_with_a_named_judge(model, tmp_path, monkeypatch):
    """`rhea bench` does not load the offline default judge for multi-session-qa (scored by rule); a named one judges."""
    import rhea.eval.cli as eval_cli
    import rhea.modeling.loading as loading
    from rhea.cli import main
    from tests.eval.test_multi_session_qa import _native

    loaded = []
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: loaded.append(name) or model)
    monkeypatch.setattr(eval_cli, "resolve_local_judge", lambda value, **kw: None if value == "none" else "tiny")
    common = ["bench", "--suite", "multi-session-qa", "--data", str(_native(tmp_path)), "--min-history-turns", "8",
              "--policies", "vanilla", "--max-new-tokens", "2", "--model", "bench-model", "--quiet"]
    assert main([*common, "--out", str(tmp_path / "auto")]) == 0
    saved = json.loads((tmp_path / "auto" / "results.json").read_text())
    assert loaded == ["bench-model"] and "judge" not in saved["config"]["suite_kwargs"]
    assert main([*common, "--judge-local", "tiny", "--judge-direct", "--out", str(tmp_path / "named")]) == 0
    saved = json.loads((tmp_path / "named" / "results.json").read_text())
    assert loaded == ["bench-model", "bench-model", "tiny"] and saved["config"]["suite_kwargs"]["judge"]
    rows = saved["policies"]["vanilla"]["turns"]
    assert rows and all(r["judge_source"] == "direct" and r["judge_rating"] in (0.0, 1.0) for r in rows)
