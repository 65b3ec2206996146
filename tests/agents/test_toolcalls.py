"""parse_tool_calls on each convention, on lenient JSON, and on garbage."""
from __future__ import annotations

import json

import pytest

from rhea.agents.toolcalls import ToolCall, loads_lenient, parse_tool_calls

ARGS = {"fragment_id": "a1b2c3"}


def test_hermes_qwen_tags_with_prose_and_several_calls():
    text = ('I will fold two fragments.\n<tool_call>\n{"name": "fold_fragment", "arguments": {"fragment_id": "a1b2c3"}}\n'
            '</tool_call>\n<tool_call>{"name": "restore_fragment", "arguments": {"fragment_id": "d4e5f6"}}</tool_call>')
    calls, errors, rest = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("fold_fragment", ARGS), ("restore_fragment", {"fragment_id": "d4e5f6"})]
    assert errors == [] and rest == "I will fold two fragments."
    assert calls[0].raw.startswith("<tool_call>")


def test_hermes_tag_cut_by_stop_string():
    calls, errors, _ = parse_tool_calls('<tool_call>{"name": "fold_fragment", "arguments": {"fragment_id": "a1b2c3"}}')
    assert calls == [ToolCall("fold_fragment", ARGS)] and errors == []


def test_llama3_bare_json_with_parameters_and_python_tag():
    calls, errors, rest = parse_tool_calls('<|python_tag|>{"name": "fold_fragment", "parameters": {"fragment_id": "a1b2c3"}}')
    assert calls == [ToolCall("fold_fragment", ARGS)] and errors == [] and rest == ""


def test_llama31_function_tag():
    calls, errors, _ = parse_tool_calls('<function=search_context>{"query": "budget"}</function>')
    assert calls == [ToolCall("search_context", {"query": "budget"})] and errors == []


def test_fenced_json_block_with_list_of_calls_and_trailing_text():
    text = ('```json\n[{"name": "search_context", "arguments": {"query": "key_1"}},\n'
            ' {"name": "fold_fragment", "arguments": {"fragment_id": "a1b2c3"}}]\n```\nThen I answer.')
    calls, errors, rest = parse_tool_calls(text)
    assert [c.name for c in calls] == ["search_context", "fold_fragment"] and errors == []
    assert rest == "Then I answer."


def test_fenced_json_that_is_not_a_call_stays_text():
    text = 'The config is:\n```json\n{"budget": 42}\n```'
    calls, errors, rest = parse_tool_calls(text)
    assert calls == [] and errors == [] and rest == text


def test_openai_structures_as_objects_and_as_text():
    tool_call = {"id": "call_1", "type": "function",
                 "function": {"name": "fold_fragment", "arguments": json.dumps(ARGS)}}
    response = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [tool_call]}}]}
    for obj in (response, response["choices"][0]["message"], [tool_call], tool_call, json.dumps(response)):
        calls, errors, _ = parse_tool_calls(obj)
        assert calls == [ToolCall("fold_fragment", ARGS)] and errors == [], obj
        assert calls[0].id == "call_1"
    no_calls = {"choices": [{"message": {"role": "assistant", "content": "Final: 42"}}]}
    assert parse_tool_calls(no_calls) == ([], [], "Final: 42")


def test_lenient_single_quotes_trailing_commas_python_literals():
    text = "<tool_call>{'name': 'search_context', 'arguments': {'query': \"it's\", 'max_results': 3,},}</tool_call>"
    calls, errors, _ = parse_tool_calls(text)
    assert calls == [ToolCall("search_context", {"query": "it's", "max_results": 3})] and errors == []
    assert loads_lenient("{'a': None, 'b': [True, False,]}") == {"a": None, "b": [True, False]}


def test_arguments_given_as_json_string_inside_hermes_block():
    text = '<tool_call>{"name": "fold_fragment", "arguments": "{\\"fragment_id\\": \\"a1b2c3\\"}"}</tool_call>'
    assert parse_tool_calls(text).calls == [ToolCall("fold_fragment", ARGS)]


@pytest.mark.parametrize("garbage", [
    "", "Just an answer: 42.", "{", "}{", "{{{{", "```json\n```", "<tool_call></tool_call>x",
    "<tool_call>{\"name\": \"fold_fragment\", \"arguments\": {\"fragment_id\": }</tool_call>",
    "{'name': 'don't'}", "\x00\xff", "[" * 5000 + "]" * 5000, '{"name": "f", "arguments": ' + "[" * 5000 + "]" * 5000 + "}", "{\"name\": \"x\", \"arguments\": [1]}", "[1, 2, {\"a\": }]",
])
def test_garbage_never_raises(garbage):
    result = parse_tool_calls(garbage)
    assert isinstance(result.calls, list) and isinstance(result.errors, list)
    assert result.calls == []


def test_malformed_calls_are_reported_not_dropped_silently():
    _, errors, _ = parse_tool_calls('<tool_call>{"name": "fold_fragment", "arguments": {"fragment_id": }</tool_call>')
    assert len(errors) == 1 and "could not parse tool call JSON" in errors[0]
    _, errors, _ = parse_tool_calls('<tool_call></tool_call>')
    assert errors == ["empty <tool_call> block"]
    _, errors, _ = parse_tool_calls('{"name": "fold_fragment", "arguments": [1]}')
    assert errors == ["tool 'fold_fragment': arguments must be a JSON object, got list"]
    _, errors, _ = parse_tool_calls('{"name": "fold_fragment", "arguments": {"fragment_id": "a"')
    assert errors and "unterminated" in errors[0]
    assert parse_tool_calls(3.5).errors == ["cannot read tool calls from a float"]


def test_prose_json_that_is_not_a_call_is_ignored():
    assert parse_tool_calls('The user record is {"name": "Bob", "age": 3}.').calls == []


def test_stray_brace_in_prose_does_not_hide_a_later_call():
    text = 'Sets look like {a, b. Now: {"name": "fold_fragment", "arguments": {"fragment_id": "a1b2c3"}}'
    calls, errors, rest = parse_tool_calls(text)
    assert calls == [ToolCall("fold_fragment", ARGS)] and errors == []
    assert rest == "Sets look like {a, b. Now:"


def test_random_json_like_noise_never_raises():
    import random

    rng = random.Random(0)
    pieces = ['{', '}', '[', ']', '"', "'", ':', ',', '\\', ' ', 'name', 'arguments', '"name":', 'x',
              '<tool_call>', '</tool_call>', '```json\n', '```', 'True', '1', '<function=f>', '</function>']
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        result = parse_tool_calls(text)
        assert all(isinstance(c, ToolCall) and isinstance(c.arguments, dict) for c in result.calls)
        assert all(isinstance(e, str) for e in result.errors) and isinstance(result.text, str)
