"""long-mt-bench-plus: MT-Bench+ conversations concatenated, replies generated, retrospective questions asked
on their own and judged (synthetic MT-Bench+ data only)."""
import json

import pytest

from rhea.eval.judge import Judge
from rhea.eval.judge_run import judge_run
from rhea.eval.loaders import DataFormatError, load_mt_bench_plus
from rhea.eval.runner import run_suite
from rhea.eval.suites import SuiteConfigError, get_suite


class PromptRater:
    """A judge whose rating depends only on the prompt."""

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        text = "".join(m["content"] for m in messages)
        return f"Fine. Rating: [[{1 + sum(map(ord, text)) % 10}]]"


def _mtbp(tmp_path, n=4):
    data = []
    for c in range(n):
        msgs = []
        for info, text in [(f"writing-{c}0-0", f"Write a haiku about river {c}."),
                           (f"writing-{c}0-1", "Now make it rhyme."),
                           (f"math-{c}1-0", f"What is {c} plus 2?"),
                           (f"writing-{c}0-Q", "What was the haiku I asked for about?")]:
            msgs += [{"from": "human", "value": text, "turn-info": info}, {"from": "chatbot", "value": ""}]
        data.append({"id": f"mtbp-{c}", "type": "retrospection", "conversations": msgs})
    path = tmp_path / "mtbenchplus.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_loader_and_episodes(tmp_path):
    (conv, *_) = load_mt_bench_plus(_mtbp(tmp_path))
    assert len(conv.turns) == 3 and conv.question == ("What was the haiku I asked for about?", "writing-00-Q")
    suite = get_suite("long-mt-bench-plus", path=_mtbp(tmp_path), n_episodes=2, conversations_per_episode=2)
    eps = suite.generate(seed=0)
    assert not set(eps[0].meta["conversations"]) & set(eps[1].meta["conversations"])
    ep = eps[0]
    assert [t.kind for t in ep.turns] == ["query"] * 6 + ["question"] * 2
    q = ep.turns[6]
    # the retrospective question refers to the two turns of its conversation's writing question
    assert [ep.turns[i].meta["turn_info"].rsplit("-", 1)[0] for i in q.meta["evidence_turns"]] == [
        q.meta["turn_info"].rsplit("-", 1)[0]] * 2
    follow = ep.turns[1]
    assert follow.meta["turn_number"] == 2 and follow.meta["first_question"] == ep.turns[0].user
    with pytest.raises(SuiteConfigError, match="need 6 conversations"):
        get_suite("long-mt-bench-plus", path=_mtbp(tmp_path), n_episodes=3, conversations_per_episode=2)
    with pytest.raises(SuiteConfigError, match="drop --turns"):
        suite.generate(n_turns=5)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": 1, "conversations": [{"from": "robot", "value": "x"}]}]))
    with pytest.raises(DataFormatError, match="human"):
        load_mt_bench_plus(bad)


def test_judge_request_shows_the_referred_exchange(tmp_path):
    suite = get_suite("long-mt-bench-plus", path=_mtbp(tmp_path), n_episodes=1, conversations_per_episode=1)
    ep = suite.generate(seed=0)[0]
    history = [(t.user, f"reply {i}") for i, t in enumerate(ep.turns) if t.kind == "query"]
    request = suite.judge_request(ep.turns[-1], "It was about a river.", history)
    prompt = request.messages[-1]["content"]
    assert "User: Write a haiku" in prompt and "Assistant: reply 0" in prompt and "Assistant: reply 1" in prompt
    assert "reply 2" not in prompt and request.prompt_name == "single-v1"


def test_run_judged_inline_and_afterwards(tiny_model, tmp_path):
    data = _mtbp(tmp_path)
    settings = dict(data=data, max_new_tokens=3, progress=False, n_episodes=2)
    kwargs = {"conversations_per_episode": 2}
    inline = run_suite(tiny_model, "long-mt-bench-plus", ["vanilla", "recent-k"], out=tmp_path / "inline",
                       suite_kwargs={**kwargs, "judge": Judge(PromptRater())}, **settings)
    plain = run_suite(tiny_model, "long-mt-bench-plus", ["vanilla", "recent-k"], out=tmp_path / "plain",
                      suite_kwargs=kwargs, **settings)
    assert plain["policies"]["vanilla"]["aggregate"]["judge"] == "skipped"
    agg = inline["policies"]["vanilla"]["aggregate"]
    assert agg["judge"] == "ok" and 1 <= agg["retrospective_judge_mean"] <= 10 and agg["retrospective_questions"] == 4
    assert agg["evidence_in_context"] == 1.0  # vanilla keeps the full history
    rows = inline["policies"]["recent-k"]["turns"]
    assert all(r["judge_rating"] is not None for r in rows)
    # the questions were asked on their own: each sees the 6 answered turns, not the earlier question
    assert [len(r["decisions"]["turns"]) for r in rows if r["kind"] == "question"] == [6, 6, 6, 6]
    judged = judge_run(tmp_path / "plain", Judge(PromptRater(), batch_size=4), progress=False)
    for policy in ("vanilla", "recent-k"):
        a = [r["judge_rating"] for r in inline["policies"][policy]["turns"]]
        b = [r["judge_rating"] for r in judged["policies"][policy]["turns"]]
        assert a == b
