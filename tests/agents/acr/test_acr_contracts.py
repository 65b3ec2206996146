"""Router JSON contract (incl. malformed outputs) and refactorer <summary> contract with its fallbacks."""
from __future__ import annotations

import json

import pytest

from rhea.agents.acr import (ACRConfigError, HistoryTurn, RefactorerOutputError, Refactorer, Router, RouterOutputError,
                             parse_router_output, parse_summary)
from rhea.backends.llm import ScriptedGenerator

TURNS = [HistoryTurn(0, "The meeting is in room 3.", "Noted."), HistoryTurn(1, "Correction: the room is 7.", "Ok."),
         HistoryTurn(2, "Wrong.", "Room 3."), HistoryTurn(3, "Wrong again.", "Room 3."),
         HistoryTurn(4, "Still wrong.", "Room 7.")]
GOOD = {"analysis": "The room was corrected.", "drift_detected": True, "selected_operator": "fact_rectify"}


def test_router_accepts_the_contract_and_one_json_fence():
    assert parse_router_output(json.dumps(GOOD)).selected_operator == "fact_rectify"
    fenced = parse_router_output("```json\n" + json.dumps(GOOD) + "\n```")
    assert fenced.valid and fenced.analysis == GOOD["analysis"]
    none = parse_router_output('{"analysis": "fine", "drift_detected": false, "selected_operator": "none"}')
    assert none.valid and none.selected_operator == "none"


def test_router_reads_pre_27_operator_names_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="'fact_rectification' is deprecated; the paper's name is 'fact_rectify'"):
        old = parse_router_output(json.dumps({**GOOD, "selected_operator": "fact_rectification"}))
    assert old.valid and old.selected_operator == "fact_rectify"
    with pytest.warns(DeprecationWarning):
        none = parse_router_output('{"analysis": "fine", "drift_detected": false, "selected_operator": "NONE"}')
    assert none.valid and none.selected_operator == "none"


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
    (json.dumps({**GOOD, "drift_detected": False}), "must be none"),
    (json.dumps({**GOOD, "selected_operator": "none"}), "must be one of the six active operators"),
])
def test_router_malformed_outputs_fall_back_to_none_with_the_reason(raw, reason):
    decision = parse_router_output(raw)
    assert decision.selected_operator == "none" and not decision.drift_detected
    assert reason in decision.fallback_reason and decision.raw == raw
    with pytest.raises(RouterOutputError, match="breaks the JSON contract"):
        parse_router_output(raw, strict=True)


def test_router_sees_only_task_and_history_with_the_papers_prompts_and_records_its_decision():
    gen = ScriptedGenerator(["I pick fact_rectify"])
    decision = Router(gen).route(TURNS, task="Track meeting details.")
    system, user = gen.calls[0]
    assert system["content"].startswith("You are a Context Monitor for multi-turn dialogue LLMs.")
    assert "You will receive only the history context, not the current query." in system["content"]
    assert "- Be conservative: only flag drift when it is likely to impact reasoning." in system["content"]
    assert "3) fact_rectify: correct contradictions or factual errors." in system["content"]
    assert user["content"].startswith("Task description: Track meeting details.\n\nHistory context (analyze for drift): "
                                      "[turn 1] User: The meeting is in room 3.")
    assert "[turn 2] User: Correction: the room is 7." in user["content"]
    assert user["content"].endswith("Instruction: Analyze the history and output your assessment as a JSON object.")
    record = decision.to_record()
    assert record["event"] == "acr_route" and record["selected_operator"] == "none"
    assert record["fallback_reason"].startswith("not JSON") and record["raw"] == "I pick fact_rectify"


def test_router_skips_the_call_on_an_empty_history():
    gen = ScriptedGenerator([])
    decision = Router(gen).route([])
    assert decision.selected_operator == "none" and gen.calls == [] and "no history" in decision.fallback_reason


def test_summary_contract():
    assert parse_summary("<summary>\n Room 7. \n</summary> trailing") == "Room 7."
    assert parse_summary("<SUMMARY>a</SUMMARY><summary>b</summary>") == "a"
    for bad in ("Room 7.", "<summary>Room 7.", "<summary>  </summary>"):
        assert parse_summary(bad) is None
        with pytest.raises(RefactorerOutputError, match="<summary>"):
            parse_summary(bad, strict=True)
    with pytest.raises(TypeError):
        parse_summary(None)


def test_refactorer_llm_output_and_the_papers_prompt_with_its_placeholders():
    gen = ScriptedGenerator(["<summary>The meeting room is 7.</summary>"])
    result = Refactorer(gen).refactor("fact_rectify", TURNS, "Which room?", "Track meetings.", previous_context="Room 3.")
    assert (result.context, result.source, result.fallback_reason) == ("The meeting room is 7.", "refactorer", None)
    system, user = gen.calls[0]
    assert system["content"].startswith("You are a Context Refactoring Engine for multi-turn dialogue LLMs.")
    text = user["content"]
    assert text.startswith("Role: You are a precise text processing engine specialized in fact rectification.")
    assert "3) Edit only the minimal conflicting spans to match trusted signals." in text
    assert "4) Preserve all correct parts of the history unchanged." in text
    assert "Current task: Track meetings.\nPrevious refactored context: Room 3.\nInput context: [turn 1] User:" in text
    assert "Which room?" not in text  # the query is no placeholder of the paper's refactorer prompts
    assert text.endswith("Output format: Return only: <summary> ... rectified context ... </summary>")
    Refactorer(gen := ScriptedGenerator(["<summary>x</summary>"])).refactor("state_abstract", TURNS)
    assert "Previous refactored context: None\n" in gen.calls[0][1]["content"]  # "set to None if empty"


def test_refactorer_fallback_is_the_raw_output_as_the_paper_specifies():
    result = Refactorer(ScriptedGenerator(["The room is 7."])).refactor("state_abstract", TURNS, "Which room?")
    assert result.source == "fallback-raw" and result.context == "The room is 7."
    assert "no closed, non-empty <summary>" in result.fallback_reason and result.raw == "The room is 7."
    empty = Refactorer(ScriptedGenerator(["  "])).refactor("path_prune", TURNS, "Which room?")
    assert empty.source == "fallback-original" and not empty.changed and "empty" in empty.fallback_reason


def test_refactorer_runs_every_operator_through_the_model_by_default():
    gen = ScriptedGenerator(["<summary>x</summary>"] * 6)
    for op in ("state_abstract", "noise_filter", "fact_rectify", "path_prune", "cognitive_boosting", "attention_anchor"):
        assert Refactorer(gen).refactor(op, TURNS, "Which room?").source == "refactorer"
    assert len(gen.calls) == 6


def test_refactorer_deterministic_operators_make_no_llm_call_and_none_is_identity():
    gen = ScriptedGenerator([])
    r = Refactorer(gen, deterministic=True)
    assert r.refactor("path_prune", TURNS, "Which room?").source == "deterministic"
    assert r.refactor("none", TURNS, "Which room?").changed is False
    assert gen.calls == []
    with pytest.raises(ACRConfigError, match="no deterministic version"):
        r.refactor("fact_rectify", TURNS, use_llm=False)
