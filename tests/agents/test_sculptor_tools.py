"""SculptorToolbox: the six tools end to end, schema checks returned as tool errors."""
from __future__ import annotations

import json

import pytest

from rhea.agents.sculptor import TOOL_NAMES, AcmStore, SculptorToolbox
from rhea.backends.llm import ScriptedGenerator


def call(box, name, args):
    return json.loads(box.call(name, args))


@pytest.fixture
def box(conversation):
    return SculptorToolbox(AcmStore(conversation, seed=3), ScriptedGenerator(["key_0=value_9; key_1=value_10; key_2=value_11"]))


def test_schemas_are_openai_function_schemas_with_paper_limits(box):
    schemas = {s["function"]["name"]: s["function"]["parameters"] for s in box.schemas()}
    assert tuple(schemas) == TOOL_NAMES == ("fragment_context", "summarize_fragment", "fold_fragment",
                                            "restore_fragment", "search_context", "get_search_detail")
    frag = schemas["fragment_context"]["properties"]
    assert (frag["num_fragments"]["default"], frag["num_fragments"]["minimum"], frag["num_fragments"]["maximum"]) == (5, 1, 20)
    assert frag["role"]["default"] == "user"
    search = schemas["search_context"]["properties"]
    assert (search["max_results"]["default"], search["max_results"]["minimum"], search["max_results"]["maximum"]) == (10, 1, 50)
    assert (search["context_size"]["default"], search["context_size"]["minimum"], search["context_size"]["maximum"]) == (200, 50, 1000)
    detail = schemas["get_search_detail"]["properties"]["extended_context"]
    assert (detail["default"], detail["minimum"], detail["maximum"]) == (500, 100, 2000)
    assert schemas["summarize_fragment"]["required"] == ["fragment_id", "focus"]
    assert all(p["type"] == "object" and p["additionalProperties"] is False for p in schemas.values())


def test_fragment_fold_restore_round_trip_through_tools(box, conversation):
    out = call(box, "fragment_context", {"start_marker": "<log>", "end_marker": "</log>"})
    ids = [f["fragment_id"] for f in out["fragments"]]
    assert out["status"] == "fragmented" and out["message_index"] == 1 and len(ids) == 5  # default num_fragments
    assert out["fragments"][0]["preview"].startswith("<log>")
    folded = call(box, "fold_fragment", {"fragment_id": ids[0]})
    assert folded["status"] == "folded" and folded["context_chars"] < folded["original_chars_total"]
    assert f"[Folded fragment {ids[0]}" in box.store.render()[1]["content"]
    assert call(box, "restore_fragment", {"fragment_id": ids[0]})["status"] == "restored"
    assert box.store.render() == conversation


def test_summarize_uses_the_summarizer_with_focus_and_restores_exactly(box, conversation):
    (fid,) = [f["fragment_id"] for f in call(box, "fragment_context", {
        "start_marker": "<log>", "end_marker": "</log>", "num_fragments": 1})["fragments"]]
    out = call(box, "summarize_fragment", {"fragment_id": fid, "focus": "latest value of each key"})
    assert out["status"] == "summarized" and out["summary_chars"] < out["original_chars"]
    prompt = box.summarizer.calls[0]
    assert "Focus: latest value of each key" in prompt[-1]["content"] and "update 11: key_2 = value_11" in prompt[-1]["content"]
    assert "key_2=value_11" in box.store.render()[1]["content"]
    call(box, "restore_fragment", {"fragment_id": fid})
    assert box.store.render() == conversation


def test_search_and_detail_return_correct_positions_and_windows(box, conversation):
    out = call(box, "search_context", {"query": "VALUE_1", "max_results": 2, "context_size": 50})
    content = conversation[1]["content"]
    # value_1, value_10, value_11 start with "value_1"
    assert out["total_matches"] == 3 and out["shown"] == 2
    first = out["results"][0]
    assert first["position"] == content.index("value_1") and first["message_index"] == 1 and first["role"] == "user"
    assert "key_1 = value_1" in first["text"] and len(first["text"]) <= len("value_1") + 2 * 50 + 2
    ids = [r["search_id"] for r in out["results"]]
    assert len(set(ids)) == 2 and all(len(i) == 6 and i[0] == "s" for i in ids)  # the paper's 's1a2b3'
    # get_search_detail shows the ONE result its id names (appendix H, Figure 19), wider.
    second = out["results"][1]
    detail = call(box, "get_search_detail", {"search_id": ids[1], "extended_context": 100})
    assert detail["search_id"] == ids[1] and detail["position"] == second["position"] != first["position"]
    assert detail["text"] == box.store.snippet(box.store.search_result(ids[1])[1], 100)
    assert second["text"].strip("…") in detail["text"] and len(detail["text"]) > len(second["text"])
    whole = call(box, "get_search_detail", {"search_id": ids[0], "extended_context": 2000})
    assert whole["text"] == content and whole["position"] == first["position"]  # the window covers the message
    # A whole search's id is not a result's: the error says so and lists the results' ids.
    record_id = next(iter(box.store._searches))
    err = box.execute("get_search_detail", {"search_id": record_id}).error
    assert "is a whole search, not one result" in err and ids[1] in err


@pytest.mark.parametrize(
    "name,args,needle",
    [
        ("fragment_context", {"start_marker": "<log>"}, "missing required argument 'end_marker'"),
        ("fragment_context", {"start_marker": "<log>", "end_marker": "</log>", "num_fragments": 21}, "num_fragments=21 is out of range [1, 20]"),
        ("fragment_context", {"start_marker": "<log>", "end_marker": "</log>", "num_fragments": "3"}, "num_fragments must be an integer, got str '3'"),
        ("fragment_context", {"start_marker": "<log>", "end_marker": "</log>", "role": "robot"}, "role='robot' is not one of"),
        ("fragment_context", {"start_marker": "<x>", "end_marker": "</log>"}, "start_marker '<x>' not found"),
        ("search_context", {"query": "a", "max_results": 0}, "max_results=0 is out of range [1, 50]"),
        ("search_context", {"query": "a", "context_size": 49}, "context_size=49 is out of range [50, 1000]"),
        ("search_context", {"query": ""}, "query must not be empty"),
        ("search_context", {"query": "a", "colour": "red"}, "unknown argument 'colour'"),
        ("get_search_detail", {"search_id": "abc123", "extended_context": 99}, "extended_context=99 is out of range [100, 2000]"),
        ("get_search_detail", {"search_id": "abc123"}, "unknown search result id 'abc123'"),
        ("fold_fragment", {"fragment_id": 7}, "fragment_id must be a string, got int 7"),
        ("fold_fragment", {"fragment_id": "abc123"}, "unknown fragment_id 'abc123'"),
        ("restore_fragment", {}, "missing required argument 'fragment_id'"),
        ("summarize_fragment", {"fragment_id": "abc123", "focus": True}, "focus must be a string, got bool True"),
        ("delete_everything", {}, "unknown tool 'delete_everything'; available tools: fragment_context"),
        ("fold_fragment", "{not json", "arguments of fold_fragment are not valid JSON"),
        ("fold_fragment", "[1, 2]", "arguments must be a JSON object, got list"),
    ],
)
def test_bad_calls_come_back_as_tool_errors(box, conversation, name, args, needle):
    outcome = box.execute(name, args)
    assert set(json.loads(outcome.content)) == {"error"}
    assert needle in outcome.error
    assert not outcome.changed_view and box.store.render() == conversation


def test_several_problems_are_reported_together(box):
    error = call(box, "search_context", {"max_results": 99, "extra": 1})["error"]
    assert "missing required argument 'query'" in error and "unknown argument 'extra'" in error and "max_results=99" in error


def test_arguments_as_json_string_and_integral_float(box):
    out = call(box, "fragment_context", "{'start_marker': '<log>', 'end_marker': '</log>', 'num_fragments': 2.0,}")
    assert len(out["fragments"]) == 2


def test_execute_reports_view_changes(box):
    frag = box.execute("fragment_context", {"start_marker": "<log>", "end_marker": "</log>", "num_fragments": 2})
    fid = json.loads(frag.content)["fragments"][0]["fragment_id"]
    assert not frag.changed_view  # fragmenting alone leaves the text as it was
    assert not box.execute("search_context", {"query": "key"}).changed_view
    assert box.execute("fold_fragment", {"fragment_id": fid}).changed_view


def test_constructor_rejects_wrong_types(conversation):
    with pytest.raises(TypeError, match="AcmStore"):
        SculptorToolbox(conversation, ScriptedGenerator([]))
    with pytest.raises(TypeError, match="TextGenerator"):
        SculptorToolbox(AcmStore(conversation), object())
