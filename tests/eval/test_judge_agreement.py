"""benchmarks/judge_agreement.py on a scripted judge and tiny MT-Bench files the test writes."""
import json
from pathlib import Path

import pytest

from rhea.backends.llm import ScriptedGenerator
from tests.repo_scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "judge_agreement.py"


def _load():
    module = load_script(SCRIPT)
    return module


def _write_mt_bench(tmp_path):
    data = tmp_path / "mt_bench"
    data.mkdir()
    questions = [{"question_id": 100 + i, "category": "math", "turns": [f"What is {i}+{i}?", "And doubled?"]}
                 for i in range(4)]
    (data / "question.jsonl").write_text("\n".join(json.dumps(q) for q in questions))
    (data / "reference_answer_gpt-4.jsonl").write_text("\n".join(json.dumps(
        {"question_id": 100 + i, "choices": [{"index": 0, "turns": [str(2 * i), str(4 * i)]}]}) for i in range(4)))
    return data


def test_agreement_counts_reference_above_mismatch(tmp_path, monkeypatch):
    data = _write_mt_bench(tmp_path)
    # (reference, mismatched) per question: agree, tie, disagree, unparsed
    replies = ["[[9]]", "[[2]]", "[[5]]", "[[5]]", "[[3]]", "[[7]]", "no rating", "[[1]]"]
    import rhea.backends.llm as llm

    monkeypatch.setattr(llm, "OpenAICompatibleGenerator", lambda url, model: ScriptedGenerator(replies))
    module = _load()
    assert module.main(["--data", str(data), "--judge-url", "http://judge", "--out", str(tmp_path / "agree")]) == 0
    summary = json.loads((tmp_path / "agree.json").read_text())["summary"]
    assert summary["questions"] == 4 and summary["agreement"]["mean"] == 0.25
    assert summary["ties"] == 1 and summary["unparsed_ratings"] == 1
    assert "agreement" in (tmp_path / "agree.md").read_text()
    with pytest.raises(SystemExit):
        module.main(["--data", str(data), "--out", str(tmp_path / "x")])  # no judge named


def test_bench_judges_long_horizon_with_a_local_model(tmp_path, monkeypatch, capsys):
    import rhea.modeling.loading as loading
    from rhea.cli import main
    from rhea.testing import tiny_rhea

    model, loaded = tiny_rhea(), []
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: loaded.append(name) or model)
    code = main(["bench", "--suite", "long-horizon", "--policies", "vanilla", "--turns", "5", "--episodes", "2",
                 "--batch-episodes", "2", "--max-new-tokens", "2", "--model", "tiny", "--judge-local", "tiny",
                 "--judge-max-new-tokens", "16", "--out", str(tmp_path), "--quiet"])
    assert code == 0 and loaded == ["tiny"]  # the benched model is reused as the judge
    saved = json.loads((tmp_path / "results.json").read_text())
    judge = saved["config"]["suite_kwargs"]["judge"]  # what decides the ratings, so a resume must match it
    assert judge["max_new_tokens"] == 16 and judge["complete_rating"] is True and judge["judge"]
    rows = [r for r in saved["policies"]["vanilla"]["turns"] if r["kind"] == "query"]
    assert rows and all(r.get("judge") in ("ok", "error") for r in rows)  # asked, not skipped
    assert main(["bench", "--suite", "long-horizon", "--model", "tiny", "--judge-local", "tiny",
                 "--judge-url", "http://x", "--out", str(tmp_path / "b")]) == 1
    assert "pass one" in capsys.readouterr().err


def test_a_killed_run_resumes_from_its_rows(tmp_path, monkeypatch):
    data = _write_mt_bench(tmp_path)
    import rhea.backends.llm as llm

    calls = []

    def judge_replies(replies):
        def make(url, model):
            gen = ScriptedGenerator(replies)
            calls.append(gen)
            return gen
        return make

    module = _load()
    # the first run dies after two questions (its judge runs out of replies on the third)
    monkeypatch.setattr(llm, "OpenAICompatibleGenerator", judge_replies(["[[9]]", "[[2]]", "[[5]]", "[[5]]"]))
    with pytest.raises(RuntimeError, match="ran out of replies"):
        module.main(["--data", str(data), "--judge-url", "http://judge", "--batch", "1", "--out", str(tmp_path / "agree")])
    assert len((tmp_path / "agree.rows.jsonl").read_text().splitlines()) == 3  # settings + 2 rows
    # (the rerun judges its two questions as one batch of 4 ratings: batching is not a setting of the rows)
    # the rerun asks only for the last two questions and reports all four
    monkeypatch.setattr(llm, "OpenAICompatibleGenerator", judge_replies(["[[3]]", "[[7]]", "no rating", "[[1]]"]))
    assert module.main(["--data", str(data), "--judge-url", "http://judge", "--out", str(tmp_path / "agree")]) == 0
    assert len(calls[-1].calls) == 4
    summary = json.loads((tmp_path / "agree.json").read_text())["summary"]
    assert summary["questions"] == 4 and summary["agreement"]["mean"] == 0.25 and summary["ties"] == 1
    # a smaller --n reports the first questions from the rows, asking the judge nothing
    monkeypatch.setattr(llm, "OpenAICompatibleGenerator", judge_replies([]))
    assert module.main(["--data", str(data), "--judge-url", "http://judge", "--n", "2",
                        "--out", str(tmp_path / "agree")]) == 0
    assert json.loads((tmp_path / "agree.json").read_text())["summary"]["questions"] == 2
    assert len(calls) == 2  # everything was rated before: no judge is built
    # other settings are refused rather than mixed into the same rows
    with pytest.raises(SystemExit):
        module.main(["--data", str(data), "--judge-url", "http://judge", "--max-new-tokens", "8",
                     "--out", str(tmp_path / "agree")])


def test_local_judge_defaults_to_the_capable_model_when_installed():
    from rhea.eval.cli import DEFAULT_LOCAL_JUDGE, resolve_local_judge

    yes, no = (lambda name: True), (lambda name: False)
    assert resolve_local_judge("auto", judge_url=None, installed=yes) == DEFAULT_LOCAL_JUDGE
    assert resolve_local_judge("auto", judge_url=None, installed=no) is None  # a fresh machine: ratings skipped
    assert resolve_local_judge("auto", judge_url="http://judge/v1", installed=yes) is None  # the endpoint judges
    assert resolve_local_judge("none", judge_url=None, installed=yes) is None
    assert resolve_local_judge("tiny", judge_url=None, installed=no) == "tiny"


def test_a_direct_judge_rates_from_its_probabilities(tmp_path, monkeypatch):
    import rhea.modeling.loading as loading
    from rhea.testing import tiny_rhea

    data = _write_mt_bench(tmp_path)
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: tiny_rhea().eval())
    module = _load()
    assert module.main(["--data", str(data), "--judge-local", "tiny", "--direct", "--out", str(tmp_path / "d")]) == 0
    saved = json.loads((tmp_path / "d.json").read_text())
    assert saved["summary"]["direct"] is True and saved["summary"]["judge_max_new_tokens"] is None
    assert saved["summary"]["unparsed_ratings"] == 0 and "agreement_expected_rating" in saved["summary"]
    assert all(r["reference_source"] == "direct" and 1 <= r["reference_expected"] <= 10 for r in saved["rows"])
    assert "without an explanation" in (tmp_path / "d.md").read_text()
    with pytest.raises(SystemExit):  # an endpoint gives no probabilities to read
        module.main(["--data", str(data), "--judge-url", "http://x", "--direct", "--out", str(tmp_path / "e")])
