"""multi-session-qa's haystack option: filler chats between the evidence sessions up to a token count
(synthetic data only)."""
import json

import pytest

from rhea.context import Conversation, Turn
from rhea.context.plan import TurnDecision
from rhea.eval.loaders import BenchmarkFileError, DataFormatError, load_filler_chats
from rhea.eval.suites import SuiteConfigError, get_suite
from rhea.policies import assemble_plan
from rhea.policies.assemble import count_tokens
from tests.eval.test_multi_session_qa import _native  # the project-format conversations both files test on


def _chats(n=12, answer_in=None):
    """`n` UltraChat-shaped chats of 2 turns each; chat `answer_in` states the gold answer K01."""
    chats = []
    for c in range(n):
        said = "The code was K01 all along." if c == answer_in else f"Filler reply {c} about gardening and tea."
        chats.append({"prompt_id": f"h{c}", "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": f"Filler question {c} on cooking pasta at home?"},
            {"role": "assistant", "content": said},
            {"role": "user", "content": f"Filler follow-up {c}, any tips?"},
            {"role": "assistant", "content": "Salt the water well and taste often."}]})
    return chats


def _haystack(tmp_path, chats=None, name="chats.json"):
    path = tmp_path / name
    path.write_text(json.dumps(_chats() if chats is None else chats))
    return path


def _suite(tmp_path, history_tokens=200, **kwargs):
    haystack = kwargs.pop("haystack", None) or str(_haystack(tmp_path))
    return get_suite("multi-session-qa", path=str(_native(tmp_path)), n_episodes=1, min_history_turns=8,
                     haystack=haystack, history_tokens=history_tokens, **kwargs)


def test_filler_loader_shapes(tmp_path):
    (chat,) = load_filler_chats(_haystack(tmp_path, _chats(1)))
    assert chat.questions == () and chat.source == "ultrachat" and chat.id == "h0"
    assert [(t.user, t.assistant) for t in chat.sessions[0].turns] == [
        ("Filler question 0 on cooking pasta at home?", "Filler reply 0 about gardening and tea."),
        ("Filler follow-up 0, any tips?", "Salt the water well and taste often.")]  # the system message left out
    share = tmp_path / "share.jsonl"
    share.write_text("\n".join(json.dumps(r) for r in [
        {"id": "s1", "conversations": [{"from": "human", "value": "Hi"}, {"from": "human", "value": "Hello?"},
                                       {"from": "gpt", "value": "Yes?"}]},
        {"id": "s2", "conversations": [{"from": "gpt", "value": "only a reply"}]},  # no user message: left out
        {"id": "s3", "data": ["Question?", "Answer.", "Another?"]}]))
    first, third = load_filler_chats(share)
    assert first.source == "sharegpt" and [(t.user, t.assistant) for t in first.sessions[0].turns] == [
        ("Hi", ""), ("Hello?", "Yes?")]
    assert [(t.user, t.assistant) for t in third.sessions[0].turns] == [("Question?", "Answer."), ("Another?", "")]


def test_filler_loader_errors(tmp_path):
    with pytest.raises(BenchmarkFileError, match="does not exist"):
        load_filler_chats(tmp_path / "missing.json")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{"prompt": "x", "turns": ["a"]}]))
    with pytest.raises(DataFormatError, match="no 'messages', 'conversations' or 'data'"):
        load_filler_chats(wrong)
    wrong.write_text(json.dumps([{"messages": [{"role": "user"}]}]))
    with pytest.raises(DataFormatError, match="without string 'role' and 'content'"):
        load_filler_chats(wrong)
    wrong.write_text(json.dumps([{"messages": [{"role": "assistant", "content": "no user"}]}]))
    with pytest.raises(DataFormatError, match="no chat with a user message"):
        load_filler_chats(wrong)
    latin = tmp_path / "latin.json"
    latin.write_bytes('[{"messages": [{"role": "user", "content": "café"}]}]'.encode("latin-1"))
    with pytest.raises(DataFormatError, match="UTF-8"):
        load_filler_chats(latin)


def test_evidence_ids_remapped_among_the_filler(tmp_path):
    ep = _suite(tmp_path, history_tokens=200).generate(seed=0)[0]
    history, filler = ep.history, set(ep.meta["filler_turns"])
    assert filler and len(history) == 10 + len(filler) and ep.meta["history_turns"] == len(history)
    assert all(history[i]["user"].startswith("Filler") for i in filler)
    assert not any(t["user"].startswith("Filler") for i, t in enumerate(history) if i not in filler)
    evidence_sessions = [s for s in range(1, ep.meta["sessions"] + 1) if s not in ep.meta["filler_sessions"]]
    assert len(evidence_sessions) == 4 and ep.meta["filler_sessions"]
    for turn in ep.turns:
        (index,) = turn.meta["evidence"]
        assert index not in filler  # the filler never holds the evidence
        if turn.expected.startswith("K"):
            c = turn.expected[1]
            assert history[index]["user"] == f"Fact {c}-1: the code is K{c}1."
        else:  # the date question names the session its evidence turn sits in, after the filler moved it
            assert history[index]["user"].startswith("Fact ") and history[index]["user"].split(":")[0].endswith("-0")
            assert history[index]["meta"]["session"] == turn.meta["session"]
            assert f"session {turn.meta['session']} happen" in turn.user
            assert history[index]["meta"]["date"] == turn.expected
    # sessions numbered 1.. in the order fed, each turn's meta naming its session
    assert [t["meta"]["session"] for t in history] == sorted(t["meta"]["session"] for t in history)


def test_target_reached_and_counted_as_the_ledger_counts(tmp_path):
    ep = _suite(tmp_path, history_tokens=200).generate(seed=0)[0]
    conv = Conversation([Turn.from_dict(t) for t in ep.history])
    plan = assemble_plan("vanilla", conv, "q", [TurnDecision(i, "raw", None, "") for i in range(len(conv))])
    assert plan.ledger.full_history_tokens == ep.meta["history_tokens"] + count_tokens("q")
    assert ep.meta["history_tokens"] >= 200 == ep.meta["history_tokens_target"]
    chats = ep.meta["filler_chats"]
    assert len(chats) == len(set(chats)) and len(ep.meta["filler_turns"]) == 2 * len(chats)  # each chat once
    # filling stops once the target is reached: the last chat added (its turns and header) took it past 200
    largest = max(sum(count_tokens(t.user) + count_tokens(t.assistant) for t in c.sessions[0].turns)
                  for c in load_filler_chats(_haystack(tmp_path))) + count_tokens("[session 99, 2023-02-08] ")
    assert ep.meta["history_tokens"] < 200 + largest
    # with the model's tokenizer the count is the tokenizer's
    from rhea.testing import tiny_rhea

    tokenizer = tiny_rhea().tokenizer
    ep = _suite(tmp_path, history_tokens=200, tokenizer=tokenizer).generate(seed=0)[0]
    conv = Conversation([Turn.from_dict(t) for t in ep.history])
    plan = assemble_plan("vanilla", conv, "q", [TurnDecision(i, "raw", None, "") for i in range(len(conv))],
                         tokenizer=tokenizer)
    assert plan.ledger.full_history_tokens == ep.meta["history_tokens"] + count_tokens("q", tokenizer) >= 200


def test_deterministic_from_the_seed(tmp_path):
    suite = _suite(tmp_path, history_tokens=250)
    first, again = suite.generate(seed=0)[0], suite.generate(seed=0)[0]
    assert first.to_dict() == again.to_dict()
    other = [suite.generate(seed=s)[0] for s in (1, 2, 3)]
    assert any(o.meta["filler_chats"] != first.meta["filler_chats"] or
               o.meta["filler_turns"] != first.meta["filler_turns"] for o in other)
    # without the haystack the same seed asks the same questions
    plain = get_suite("multi-session-qa", path=str(_native(tmp_path)), n_episodes=1,
                      min_history_turns=8).generate(seed=0)[0]
    assert [t.expected for t in plain.turns] == [t.expected for t in first.turns]
    assert "filler_turns" not in plain.meta


def test_filler_stating_a_gold_answer_is_left_out(tmp_path):
    path = _haystack(tmp_path, _chats(12, answer_in=3), "stated.json")
    for seed in range(4):
        ep = _suite(tmp_path, history_tokens=400, haystack=str(path)).generate(seed=seed)[0]
        assert "h3" not in ep.meta["filler_chats"] and len(ep.meta["filler_chats"]) >= 5
        assert not any("K01" in ep.history[i]["assistant"] for i in ep.meta["filler_turns"])


@pytest.mark.parametrize("undated_first", [False, True])
def test_filler_dates_follow_the_evidence(tmp_path, undated_first):
    data = _native(tmp_path)
    if undated_first:  # each conversation's undated session first: filler before the first dated one takes its date
        records = json.loads(data.read_text())
        for r in records:
            r["sessions"].reverse()
        data.write_text(json.dumps(records))
    suite = get_suite("multi-session-qa", path=str(data), n_episodes=1, min_history_turns=8,
                      haystack=str(_haystack(tmp_path)), history_tokens=400)
    for seed in range(3):
        ep = suite.generate(seed=seed)[0]
        by_session = {t["meta"]["session"]: t["meta"].get("date") for t in ep.history}
        evidence = [s for s in sorted(by_session) if s not in ep.meta["filler_sessions"]]
        assert ep.meta["filler_sessions"] and (by_session[evidence[0]] is None) == undated_first
        for s in ep.meta["filler_sessions"]:
            before = [by_session[e] for e in evidence if e < s and by_session[e]]
            after = [by_session[e] for e in evidence if e > s and by_session[e]]
            assert by_session[s] == (before[-1] if before else after[0])


def test_haystack_errors(tmp_path):
    with pytest.raises(SuiteConfigError, match="haystack needs history_tokens"):
        get_suite("multi-session-qa", path=str(_native(tmp_path)), haystack=str(_haystack(tmp_path)))
    with pytest.raises(SuiteConfigError, match="history_tokens needs haystack"):
        get_suite("multi-session-qa", path=str(_native(tmp_path)), history_tokens=100)
    with pytest.raises(SuiteConfigError, match="history_tokens"):
        _suite(tmp_path, history_tokens=0)
    with pytest.raises(BenchmarkFileError):
        _suite(tmp_path, haystack=str(tmp_path / "nope.json"))
    short = _suite(tmp_path, history_tokens=100_000)
    with pytest.raises(SuiteConfigError, match=r"12 usable chats \(of 12.*brings? its history to \d+ tokens"):
        short.generate(seed=0)


def test_cli_haystack(tiny_model, tmp_path, monkeypatch, capsys):
    import rhea.modeling.loading as loading
    from rhea.cli import main

    loaded = []
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: loaded.append(name) or tiny_model)
    common = ["--data", str(_native(tmp_path)), "--policies", "recent-k", "--max-new-tokens", "2",
              "--model", "tiny", "--quiet"]
    haystack = str(_haystack(tmp_path))
    flags = ["--haystack", haystack, "--history-tokens", "200"]
    out = tmp_path / "out"
    assert main(["bench", "--suite", "multi-session-qa", "--min-history-turns", "8", *flags, *common,
                 "--out", str(out)]) == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["suite_kwargs"]["haystack"] == haystack
    (episode,) = saved["episodes"]
    assert episode["meta"]["history_tokens"] >= 200 and episode["meta"]["filler_turns"]
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe not text")
    loaded.clear()
    code = main(["bench", "--suite", "multi-session-qa", "--haystack", str(bad), "--history-tokens", "200",
                 *common, "--out", str(tmp_path / "out2")])
    assert code != 0 and "UTF-8" in capsys.readouterr().err and not loaded  # refused before any model load
    code = main(["bench", "--suite", "efficiency", *flags, *common, "--out", str(tmp_path / "out3")])
    err = capsys.readouterr().err
    assert code != 0 and "--haystack, --history-tokens only applies to the multi-session-qa suite" in err
