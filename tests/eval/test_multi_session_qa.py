"""multi-session-qa: fed histories, independent questions, session headers, loaders (synthetic data only)."""
import json

import pytest

from rhea.context import Conversation, Turn
from rhea.context.plan import TurnDecision
from rhea.eval.checkpoint import BenchError
from rhea.eval.loaders import DataFormatError, load_multi_session
from rhea.eval.runner import run_suite
from rhea.eval.suites import get_suite
from rhea.eval.suites.multi_session_qa import MultiSessionQASuite, contains_answer, token_f1
from rhea.policies import assemble_plan
from rhea.session import ChatSession


def _native(tmp_path, n=2):
    records = []
    for c in range(n):
        records.append({"id": f"c{c}", "sessions": [
            {"date": f"2023-0{c + 1}-08", "turns": [{"id": f"c{c}t{i}", "user": f"Fact {c}-{i}: the code is K{c}{i}.",
                                                       "assistant": "Noted."} for i in range(3)]},
            {"turns": [{"id": f"c{c}u{i}", "user": f"Small talk {i}.", "assistant": "Sure."} for i in range(2)]}],
            "questions": [{"question": f"What was code {c}-1?", "answer": f"K{c}1", "evidence": [f"c{c}t1"],
                           "category": "single-hop"},
                          {"question": "When did session {session} happen?", "answer": f"2023-0{c + 1}-08",
                           "evidence": [f"c{c}t0"], "category": "date"}]})
    path = tmp_path / "ms.json"
    path.write_text(json.dumps(records))
    return path


def test_session_header_only_away_from_place():
    meta = [{"session": 1, "date": "2023-05-08"}] * 3 + [{"session": 2, "date": "2023-06-01"}] * 2
    conv = Conversation([Turn(f"u{i}", f"a{i}", m) for i, m in enumerate(meta)])
    decisions = [TurnDecision(0, "raw", None, ""), TurnDecision(1, "raw", None, ""), TurnDecision(2, "drop", None, ""),
                 TurnDecision(3, "drop", None, "", recalled=True), TurnDecision(4, "raw", None, "")]
    plan = assemble_plan("test", conv, "q?", decisions)
    users = [m["content"] for m in plan.messages if m["role"] == "user"]
    # first shown, in-place continuation, after a dropped turn (and a new session), then the recalled turn
    assert users == ["[session 1, 2023-05-08] u0", "u1", "[session 2, 2023-06-01] u4",
                     "[session 2, 2023-06-01] u3", "q?"]
    plain = assemble_plan("test", Conversation([Turn("u", "a")]), "q?", [TurnDecision(0, "raw", None, "")])
    assert plain.messages[0]["content"] == "u"  # no session meta: no header, as before


def test_full_history_counts_one_header_per_session():
    conv = Conversation([Turn("u", "a", {"session": 1}), Turn("v", "b", {"session": 1}), Turn("w", "c", {"session": 2})])
    keep = [TurnDecision(i, "raw", None, "") for i in range(3)]
    plan = assemble_plan("vanilla", conv, "q", keep)
    assert plan.ledger.text_tokens == plan.ledger.full_history_tokens  # everything in place, same count


def test_ask_leaves_the_conversation_unchanged(tiny_model):
    chat = ChatSession(tiny_model, policy="vanilla", max_new_tokens=2)
    chat.send("hello there")
    before = [t.to_dict() for t in chat.conversation]
    chat.ask("what did I say?")
    chat.ask("and before that?")
    assert [t.to_dict() for t in chat.conversation] == before
    assert len(chat.records) == 3 and chat.records[-1].turn == 1


def test_native_loader_and_episode(tmp_path):
    suite = get_suite("multi-session-qa", path=str(_native(tmp_path)), n_episodes=1, min_history_turns=8)
    ep = suite.generate(seed=0)[0]
    assert len(ep.history) == 10 and ep.meta["sessions"] == 4
    assert {t["meta"]["session"] for t in ep.history} == {1, 2, 3, 4}
    dated = [t for t in ep.history if "date" in t["meta"]]
    assert len(dated) == 6
    date_q = [t for t in ep.turns if t.meta["category"] == "date"]
    assert all("{session}" not in t.user for t in ep.turns)
    for t in date_q:  # the question names the session its evidence turn was fed in
        assert ep.history[t.meta["evidence"][0]]["meta"]["session"] == t.meta["session"]
        assert f"session {t.meta['session']}" in t.user
    code_q = next(t for t in ep.turns if t.expected == "K01")
    assert ep.history[code_q.meta["evidence"][0]]["user"].startswith("Fact 0-1")


def test_loader_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "x", "sessions": [{"turns": [{"id": "t", "user": "u", "assistant": "a"}]}],
                                "questions": [{"question": "q", "answer": "a", "evidence": ["nope"]}]}]))
    with pytest.raises(DataFormatError, match="evidence"):
        load_multi_session(bad)
    with pytest.raises(Exception, match="disjoint episodes"):
        get_suite("multi-session-qa", path=str(_native(tmp_path)), n_episodes=3, min_history_turns=8).generate()
    with pytest.raises(Exception, match="more questions"):
        get_suite("multi-session-qa", path=str(_native(tmp_path)), min_history_turns=0).generate(n_turns=5)


def test_topiocqa_and_convlab_loaders(tmp_path):
    text = ("You will be shown a 4-line Task Conversation.\n```\nTask Conversation:\n"
            "(line 1) user: who wrote hamlet\n(line 2) bot: William Shakespeare.\n"
            "(line 3) user: was he married?\n(line 4) bot: Yes.\n```\nTask Result:")
    rows = [{"question_id": 7, "text": text, "type": "writing_topiocqa",
             "answer": json.dumps([{"topic": "Hamlet", "start": 1, "end": 2}, {"topic": "Shakespeare", "start": 3, "end": 4}])},
            {"question_id": 8, "text": "Query Sentence: ...", "answer": "1#2", "type": "retrieval_topiocqa"}]
    path = tmp_path / "topiocqa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    (conv,) = load_multi_session(path)
    assert [t.user for t in conv.sessions[0].turns] == ["who wrote hamlet", "was he married?"]
    (q,) = conv.questions  # the yes/no answer makes no question
    assert q.answer == "William Shakespeare." and "about Hamlet" in q.question and q.evidence == ("topiocqa-7:1",)

    def state(city):
        return {"restaurant": {"city": city, "food": "", "parking": "yes"}}
    dialogue = {"dialogue_id": "d-1", "dataset": "sgd", "turns": [
        {"speaker": "user", "utterance": "Find food in San Jose.", "state": state("San Jose")},
        {"speaker": "system", "utterance": "Any cuisine?"},
        {"speaker": "user", "utterance": "Actually, make it Palo Alto.", "state": state("Palo Alto")},
        {"speaker": "system", "utterance": "Done."},
        {"speaker": "user", "utterance": "Thanks.", "state": state("Palo Alto")}]}
    path = tmp_path / "dst.json"
    path.write_text(json.dumps([dialogue]))
    (conv,) = load_multi_session(path)
    assert [t.assistant for t in conv.sessions[0].turns] == ["Any cuisine?", "Done.", ""]
    (q,) = conv.questions  # parking=yes makes no question
    assert q.answer == "Palo Alto" and q.evidence == ("d-1:1",) and "city" in q.question


def test_scores():
    assert token_f1("Mariah Carey", "Mariah Carey.") == 1.0 and token_f1("nothing", "Mariah Carey") == 0.0
    assert contains_answer("I think it was K01, yes", "K01") and not contains_answer("K011", "K01")


def test_run_suite_smoke_and_resume(tiny_model, tmp_path):
    data = str(_native(tmp_path))
    kwargs = {"min_history_turns": 8}
    out = tmp_path / "run"
    result = run_suite(tiny_model, "multi-session-qa", ["vanilla", "recent-k", "rhea"], data=data, suite_kwargs=kwargs,
                       max_new_tokens=3, progress=False, out=out)
    for policy, entry in result["policies"].items():
        agg = entry["aggregate"]
        assert agg["questions"] == 4 and 0.0 <= agg["f1"] <= 1.0
        assert agg["evidence_in_context"] is not None
        assert set(agg["by_category"]) == {"single-hop", "date"}
    assert result["policies"]["vanilla"]["aggregate"]["evidence_in_context"] == 1.0
    rows = result["policies"]["rhea"]["turns"]
    assert "history_s" in rows[0] and all("history_s" not in r for r in rows[1:])
    # each question answered from the same 10-turn history: the plans cover exactly those turns
    assert all(len(r["decisions"]["turns"]) == 10 for r in rows)
    summary = (out / "summary.md").read_text()
    assert "multi-session-qa" in summary and "| F1 | contains answer | evidence in context |" in summary
    assert "token F1" in summary  # the per-episode table names the suite's metrics
    again = run_suite(tiny_model, "multi-session-qa", ["vanilla", "recent-k", "rhea"], data=data, suite_kwargs=kwargs,
                      max_new_tokens=3, progress=False, out=out)
    assert [r["reply"] for r in again["policies"]["rhea"]["turns"]] == [r["reply"] for r in rows]
    with pytest.raises(BenchError, match="batch_episodes=1"):
        run_suite(tiny_model, "multi-session-qa", ["vanilla"], data=data, suite_kwargs=kwargs, n_episodes=1,
                  max_new_tokens=2, progress=False, batch_episodes=2)


def test_builtin_data_runs_without_a_file():
    ep = MultiSessionQASuite().generate(seed=1)[0]
    assert ep.meta["history_turns"] == 6 and len(ep.turns) == 4


def test_evidence_row_places_scripted_turns():
    from types import SimpleNamespace

    from rhea.eval.episodes import evidence_row
    from rhea.eval.suites import SuiteTurn

    plan = SimpleNamespace(decisions=SimpleNamespace(turns=[
        TurnDecision(0, "raw", None, ""), TurnDecision(1, "drop", None, ""), TurnDecision(2, "latent", None, "")]))
    fed = SuiteTurn("q", "question", meta={"evidence": [0, 1]})
    assert evidence_row(fed, plan) == {"evidence_in_context": 0.5, "evidence_raw": 0.5}
    # scripted turns 3 and 5 sit at conversation turns 1 and 2; turn 4 failed and is in no conversation
    asked = SuiteTurn("q", "question", meta={"evidence_turns": [3, 4, 5]})
    row = evidence_row(asked, plan, {3: 1, 5: 2})
    assert row == {"evidence_in_context": 1 / 3, "evidence_raw": 0.0}
    assert evidence_row(SuiteTurn("q", "query"), plan) == {}


def test_cli_runs_the_suite_with_its_option(tiny_model, tmp_path, monkeypatch, capsys):
    import rhea.modeling.loading as loading
    from rhea.cli import main

    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: tiny_model)
    out = tmp_path / "out"
    common = ["--data", str(_native(tmp_path)), "--policies", "vanilla", "--max-new-tokens", "2",
              "--model", "tiny", "--out", str(out), "--quiet"]
    assert main(["bench", "--suite", "multi-session-qa", "--min-history-turns", "8", *common]) == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["suite_kwargs"] == {"min_history_turns": 8}
    assert len(saved["episodes"][0]["history"]) == 10
    code = main(["bench", "--suite", "efficiency", "--min-history-turns", "8", *common])
    assert code != 0 and "only applies to the multi-session-qa suite" in capsys.readouterr().err
