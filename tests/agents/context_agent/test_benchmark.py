"""benchmarks/context_agent.py end to end with scripted models: TopiOCQA scoring, judge, NTM verdicts."""
from __future__ import annotations

from pathlib import Path

import pytest

from rhea.agents.context_agent import ContextAgent
from rhea.backends.llm import ScriptedGenerator
from rhea.errors import RheaError
from rhea.eval.judge import Judge
from rhea.policies import get_policy
from rhea.testing import tiny_tokenizer

from .helpers import KeywordEmbedder
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "context_agent.py"


@pytest.fixture(scope="module")
def bench():
    mod = load_script(_PATH)
    return mod


EPISODE = {"id": "topiocqa-1", "source": "topiocqa", "user_turns": ["plan a rome trip", "banana bread oven", "rome hotel"],
           "gold_replies": ["rome in may", "bake it", "a cheap hotel"], "topics": ["Rome", "Bread", "Rome"]}


def test_topiocqa_episode_is_scored_per_turn_with_gold_history_and_judge(bench):
    tok = tiny_tokenizer(["rome", "trip", "banana", "bread", "oven", "hotel", "bake", "cheap", "plan", "may"])
    judge = Judge(ScriptedGenerator(["ok [[7]]", "no rating", "good [[9]]"]))
    rows = []
    for policy in (get_policy("vanilla", tokenizer=tok), ContextAgent(None, KeywordEmbedder(), tokenizer=tok)):
        answerer = ScriptedGenerator(["rome in may", "bake", "a cheap hotel please"])
        row = bench.run_episode(policy, answerer, tok, EPISODE, 8, judge if policy.name == "vanilla" else None)
        row["policy"] = policy.name
        rows.append(row)
        if policy.name == "vanilla":  # the history holds the gold replies, whatever the model said
            assert [m["content"] for m in answerer.calls[-1] if m["role"] == "assistant"] == ["rome in may", "bake it"]
    vanilla, agent = rows
    assert [round(t["f1"], 2) for t in vanilla["turns"]] == [1.0, 0.67, 0.8]
    assert [t.get("judge_rating") for t in vanilla["turns"]] == [7.0, None, 9.0]
    # context tokens leave out the query: none before the first turn
    assert vanilla["turns"][0]["context_tokens"] == 0 and vanilla["turns"][2]["context_tokens"] > 0
    assert agent["tree_per_turn"] == ["t1", "t2", "t1"]
    summary = bench.summarise(rows, {EPISODE["id"]: EPISODE}, ["vanilla", "context-agent"])
    assert summary["vanilla"]["topiocqa_judge_unparsed_turns"] == 1
    assert summary["vanilla"]["topiocqa_judge_rating"]["mean"] == 8.0
    assert summary["context-agent"]["topic_pair_agreement"]["mean"] == 1.0
    # back on Rome, the bread turn is a summary line (its header costs tokens on turns this short)
    assert agent["turns"][2]["tiers"] == ["raw", "drop"] and agent["turns"][2]["context_tokens"] > 0
    assert summary["context-agent"]["context_tokens_per_turn"]["n"] == 1


def test_ntm_verdicts_are_read_or_left_unscored(bench):
    assert bench.ntm_judge_score(ScriptedGenerator(["2/3"]), "reply", "goals?")[:2] == (2, 3)
    for bad in ("I cannot tell", "4/3", "0/0"):
        assert bench.ntm_judge_score(ScriptedGenerator([bad]), "reply", "goals?")[:2] == (None, None)


def test_the_benchmark_refuses_to_run_without_data(bench):
    with pytest.raises(RheaError, match="no data"):
        bench.main([])
    with pytest.raises(RheaError, match="--topic-only"):
        bench.main(["--generated", "1", "--topic-only"])


def test_a_run_resumes_per_conversation_and_refuses_other_settings(bench, tmp_path, monkeypatch):
    import json

    import rhea.backends.embedding as embedding
    import rhea.modeling.loading as loading
    from rhea.testing import tiny_rhea

    model = tiny_rhea().eval()
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: model)
    monkeypatch.setattr(embedding, "MiniLMEmbedder", KeywordEmbedder)
    ran = []
    real = bench.run_episode
    monkeypatch.setattr(bench, "run_episode", lambda policy, *a, **kw: ran.append((a[2]["id"], policy.name)) or real(policy, *a, **kw))
    out = tmp_path / "ca.json"
    argv = ["--max-new-tokens", "2", "--out", str(out)]
    bench.main(["--generated", "1", *argv])
    assert ran == [("generated-0", "vanilla"), ("generated-0", "context-agent")]
    first = json.loads(out.read_text())
    bench.main(["--generated", "2", *argv])  # conversation 0 is read back, only conversation 1 runs
    assert ran[2:] == [("generated-1", "vanilla"), ("generated-1", "context-agent")]
    saved = json.loads(out.read_text())
    assert saved["episodes"][:2] == first["episodes"] and len(saved["episodes"]) == 4
    agent = saved["summary"]["context-agent"]
    assert agent["conversations"] == 2 and agent["controller_llm_calls"] == sum(
        r["controller_llm_calls"] for r in saved["episodes"] if r["policy"] == "context-agent")
    paired = saved["summary"]["paired_vs_vanilla"]["context-agent"]
    assert paired["context_tokens"]["n"] == 2 and "p_value" in paired["task_completion_rate"]
    with pytest.raises(RheaError, match="--max-new-tokens 2"):
        bench.main(["--generated", "2", "--max-new-tokens", "3", "--out", str(out)])
    bench.main(["--generated", "1", "--no-resume", *argv])
    assert len(json.loads(out.read_text())["episodes"]) == 2 and len(ran) == 6
