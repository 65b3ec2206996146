"""Router JSON contract (incl. malformed outputs) and refactorer <summary> contract with its fallbacks."""
from __future__ import annotations

import json

import pytest

from rhea.agents.acr import (HistoryTurn, RefactorerOutputError, Refactorer, Router, RouterOutputError,
                             parse_router_output, parse_summary)
from rhea.backends.llm import ScriptedGenerator

TURNS = [HistoryTurn(0, "The meeting is in room 3.", "Noted."), HistoryTurn(1, "Correction: the room is 7.", "Ok."),
         HistoryTurn(2, "Wrong.", "Room 3."), HistoryTurn(3, "Wrong again.", "Room 3."),
         HistoryTurn(4, "Still wrong.", "Room 7.")]
GOOD = {"analysis": "The room was corrected.", "drift_detected": True, "selected_operator": "fact_rectification"}


def test_router_accepts_the_contract_and_one_json_fence():
    assert parse_router_output(json.dumps(GOOD)).selected_operator == "fact_rectification"
    fenced = parse_router_output("```json\n" + json.dumps(GOOD) + "\n```")
    assert fenced.valid and fenced.analysis == GOOD["analysis"]
    none = parse_router_output('{"analysis": "fine", "drift_detected": false, "selected_operator": "NONE"}')
    assert none.valid and none.selected_operator == "NONE"


@pytest.mark.parametrize("raw, reason", [
    ("", "not JSON"),
    ("Sure! " + json.dumps(GOOD), "not JSON"),
    (json.dumps(GOOD)[:-1], "not JSON"),
    ("[1, 2]", "JSON list instead of an object"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "analysis"}), "missing ['analysis']"),
    (json.dumps({**GOOD, "confidence": 0.9}), "unexpected ['confidence']"),
    (json.dumps({**GOOD, "analysis": 3}), "analysis must be a string"),
    (json.dumps({**GOOD, "drift_detected": "yes"}), "drift_detected must be true or false"),
    (json.dumps({**GOOD, "selected_operator": "summarize"}), "is not one of"),
    (json.dumps({**GOOD, "drift_detected": False}), "must be NONE"),
])
def test_router_malformed_outputs_fall_back_to_none_with_the_reason(raw, reason):
    decision = parse_router_output(raw)
    assert decision.selected_operator == "NONE" and not decision.drift_detected
    assert reason in decision.fallback_reason and decision.raw == raw
    with pytest.raises(RouterOutputError, match="breaks the JSON contract"):
        parse_router_output(raw, strict=True)


def test_router_sees_history_and_task_and_records_its_decision():
    gen = ScriptedGenerator(["I pick fact_rectification"])
    decision = Router(gen).route(TURNS, "Which room?", task="Track meeting details.")
    system, user = gen.calls[0]
    assert "selected_operator" in system["content"] and "fact_rectification" in system["content"]
    assert user["content"].startswith("Task: Track meeting details.")
    assert "[turn 2] User: Correction: the room is 7." in user["content"] and "Which room?" in user["content"]
    record = decision.to_record()
    assert record["event"] == "acr_route" and record["selected_operator"] == "NONE"
    assert record["fallback_reason"].startswith("not JSON") and record["raw"] == "I pick fact_rectification"


def test_router_skips_the_call_on_an_empty_history():
    gen = ScriptedGenerator([])
    decision = Router(gen).route([], "hi")
    assert decision.selected_operator == "NONE" and gen.calls == [] and "no history" in decision.fallback_reason


def test_summary_contract():
    assert parse_summary("<summary>\n Room 7. \n</summary> trailing") == "Room 7."
    assert parse_summary("<SUMMARY>a</SUMMARY><summary>b</summary>") == "a"
    for bad in ("Room 7.", "<summary>Room 7.", "<summary>  </summary>"):
        assert parse_summary(bad) is None
        with pytest.raises(RefactorerOutputError, match="<summary>"):
            parse_summary(bad, strict=True)
    with pytest.raises(TypeError):
        parse_summary(None)


def test_refactorer_llm_output_and_prompt():
    gen = ScriptedGenerator(["<summary>The meeting room is 7.</summary>"])
    result = Refactorer(gen).refactor("fact_rectification", TURNS, "Which room?")
    assert (result.context, result.source, result.fallback_reason) == ("The meeting room is 7.", "refactorer", None)
    assert "fact_rectification" in gen.calls[0][0]["content"]


def test_refactorer_fallback_without_deterministic_version_keeps_the_original():
    result = Refactorer(ScriptedGenerator(["The room is 7."])).refactor("state_abstraction", TURNS, "Which room?")
    assert result.source == "fallback-original" and not result.changed
    assert "no closed, non-empty <summary>" in result.fallback_reason and result.raw == "The room is 7."


def test_refactorer_fallback_uses_the_deterministic_version_where_one_exists():
    result = Refactorer(ScriptedGenerator(["<summary></summary>"])).refactor("path_prune", TURNS, "Which room?", use_llm=True)
    assert result.source == "fallback-deterministic" and result.keep == [0, 1, 2, 4]
    assert result.notes == {2: "this reply failed 2 times"} and result.fallback_reason


def test_refactorer_deterministic_operators_make_no_llm_call_and_none_is_identity():
    gen = ScriptedGenerator([])
    r = Refactorer(gen)
    assert r.refactor("path_prune", TURNS, "Which room?").source == "deterministic"
    assert r.refactor("NONE", TURNS, "Which room?").changed is False
    assert gen.calls == []
