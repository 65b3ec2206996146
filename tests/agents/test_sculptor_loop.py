"""SculptorLoop with scripted generators: tool sequences, budget, errors, native tools."""
from __future__ import annotations

import json

import pytest

from rhea.agents.sculptor import AcmStore, ConversationMismatchError, SculptorLoop, SculptorToolbox
from rhea.agents.sculptor.loop import MALFORMED
from rhea.agents.sculptor.prompts import BUDGET_EXHAUSTED_PROMPT, FORCE_TOOL_PROMPT, PAPER_UNIFIED_PROMPT
from rhea.backends.llm import ScriptedGenerator

from .sculptor_helpers import hermes, make_loop, planned_fragment_ids

QUERY = "What is the latest value of key_1?"


def test_known_tool_sequence_then_answer(conversation):
    ids = planned_fragment_ids(conversation, 0, "<log>", "</log>", 3,
                               searches_before=[{"query": "key_1", "max_results": 50}])
    replies = [
        "Let me look first.\n" + hermes("search_context", query="key_1", max_results=50),
        hermes("fragment_context", start_marker="<log>", end_marker="</log>", num_fragments=3),
        hermes("fold_fragment", fragment_id=ids[0]) + hermes("fold_fragment", fragment_id=ids[1]),
        "The latest value of key_1 is value_10.",
    ]
    loop, gen = make_loop(conversation, replies)
    result = loop.run(conversation, QUERY)

    assert result.answer == "The latest value of key_1 is value_10."
    assert result.n_tool_calls == 4 and not result.budget_exhausted
    assert [t.name for t in result.trace] == ["search_context", "fragment_context", "fold_fragment", "fold_fragment"]
    assert [t.step for t in result.trace] == [0, 1, 2, 2]
    assert all(t.error is None for t in result.trace)
    assert [t.changed_view for t in result.trace] == [False, False, True, True]
    assert json.loads(result.trace[0].result)["total_matches"] == 4
    assert [s.kind for s in result.steps] == ["tool_call", "tool_call", "tool_call", "final"]

    first = gen.calls[0]
    assert first[0]["role"] == "system" and first[0]["content"].startswith(PAPER_UNIFIED_PROMPT)
    assert "<tools>" in first[0]["content"] and first[0]["content"].endswith(conversation[0]["content"])
    assert first[1:-1] == conversation[1:] and first[-1] == {"role": "user", "content": QUERY}
    # Each tool result follows the call as a tool message; folds show in the next prompt.
    last = gen.calls[-1]
    assert [m["role"] for m in last[-7:]] == ["assistant", "tool", "assistant", "tool", "assistant", "tool", "tool"]
    assert all(f"[Folded fragment {i}" in last[1]["content"] for i in ids[:2])
    assert result.messages == [*last, {"role": "assistant", "content": replies[-1]}]


def test_budget_exhaustion_asks_for_an_answer_without_tools(conversation):
    replies = [hermes("search_context", query="key_0"), hermes("search_context", query="key_1"), "value_10"]
    loop, gen = make_loop(conversation, replies, max_tool_calls=2)
    result = loop.run(conversation, QUERY)
    assert result.budget_exhausted and result.n_tool_calls == 2
    assert result.answer == "value_10" and len(gen.calls) == 3
    final_prompt = gen.calls[-1]
    assert final_prompt[-1] == {"role": "user", "content": BUDGET_EXHAUSTED_PROMPT.format(max_tool_calls=2)}
    assert result.steps[-1].kind == "budget_final"


def test_calls_beyond_budget_in_one_reply_are_not_run(conversation):
    replies = [hermes("search_context", query="a") + hermes("search_context", query="b")
               + hermes("search_context", query="c"), "answer"]
    loop, _ = make_loop(conversation, replies, max_tool_calls=2)
    result = loop.run(conversation, QUERY)
    assert result.n_tool_calls == 2 and result.budget_exhausted and result.answer == "answer"
    assert "budget of 2 calls is spent" in result.trace[2].error
    assert len(loop.toolbox.store.op_log) == 2  # the third search never ran


def test_final_reply_that_still_calls_a_tool_keeps_only_its_prose(conversation):
    loop, _ = make_loop(conversation, [hermes("search_context", query="a"),
                                       "It is value_10. " + hermes("search_context", query="b")], max_tool_calls=1)
    result = loop.run(conversation, QUERY)
    assert result.answer == "It is value_10." and result.n_tool_calls == 1


def test_bad_arguments_and_malformed_calls_come_back_as_tool_errors(conversation):
    replies = [hermes("fold_fragment", fragment_id="zzzzzz"),
               '<tool_call>{"name": "fold_fragment", "arguments": {"fragment_id": }</tool_call>',
               hermes("no_such_tool"), "value_10"]
    loop, gen = make_loop(conversation, replies)
    result = loop.run(conversation, QUERY)
    assert result.answer == "value_10" and result.n_tool_calls == 3
    assert "unknown fragment_id 'zzzzzz'" in result.trace[0].error
    assert result.trace[1].name == MALFORMED and "could not read your tool call" in result.trace[1].error
    assert "unknown tool 'no_such_tool'" in result.trace[2].error
    assert json.loads(gen.calls[1][-1]["content"])["error"].startswith("unknown fragment_id")


def test_force_first_tool_nudges_once(conversation):
    loop, gen = make_loop(conversation, ["value_10", hermes("search_context", query="key_1"), "value_10 indeed"],
                          force_first_tool=True)
    result = loop.run(conversation, QUERY)
    assert result.answer == "value_10 indeed" and result.n_tool_calls == 1
    assert gen.calls[1][-1] == {"role": "user", "content": FORCE_TOOL_PROMPT}
    assert [s.kind for s in result.steps] == ["nudged", "tool_call", "final"]
    loop, _ = make_loop(conversation, ["no", "still no"], force_first_tool=True)
    assert loop.run(conversation, QUERY).answer == "still no"  # only one nudge


class NativeToolGenerator:
    """Records the `tools` it is given, as a generator with native tool calling would use them."""

    supports_tools = True

    def __init__(self, replies):
        self.replies, self.tools = list(replies), []

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None, tools=None):
        self.tools.append(tools)
        return self.replies.pop(0)


def test_native_tool_generator_gets_schemas_and_a_plain_system_prompt(conversation):
    call = {"choices": [{"message": {"tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "search_context", "arguments": json.dumps({"query": "key_1"})}}]}}]}
    gen = NativeToolGenerator([json.dumps(call), "value_10"])
    loop = SculptorLoop(gen, SculptorToolbox(AcmStore(conversation), ScriptedGenerator([])), max_tool_calls=1)
    result = loop.run(conversation, QUERY)
    assert "<tools>" not in loop.system_prompt
    assert [t["function"]["name"] for t in gen.tools[0]][0] == "fragment_context"
    assert gen.tools[1] is None  # the budget-final ask goes without tools
    assert result.trace[0].name == "search_context" and result.answer == "value_10"


def test_folds_persist_across_turns_and_mismatch_is_refused(conversation):
    ids = planned_fragment_ids(conversation, 0, "<log>", "</log>", 1)
    loop, gen = make_loop(conversation, [
        hermes("fragment_context", start_marker="<log>", end_marker="</log>", num_fragments=1),
        hermes("fold_fragment", fragment_id=ids[0]), "value_10", "42 EUR"])
    loop.run(conversation, QUERY)
    grown = conversation + [{"role": "user", "content": QUERY}, {"role": "assistant", "content": "value_10"}]
    loop.run(grown, "What is the budget?")
    second = gen.calls[-1]
    assert f"[Folded fragment {ids[0]}" in second[1]["content"] and second[-3:-1] == grown[-2:]
    with pytest.raises(ConversationMismatchError, match="first difference at index 1"):
        loop.run([conversation[0], {"role": "user", "content": "other"}], QUERY)


def test_constructor_and_run_validate_their_inputs(conversation):
    box = SculptorToolbox(AcmStore(conversation), ScriptedGenerator([]))
    with pytest.raises(TypeError, match="TextGenerator"):
        SculptorLoop(object(), box)
    with pytest.raises(TypeError, match="SculptorToolbox"):
        SculptorLoop(ScriptedGenerator([]), object())
    with pytest.raises(ValueError, match="max_tool_calls=-1"):
        SculptorLoop(ScriptedGenerator([]), box, max_tool_calls=-1)
    with pytest.raises(ValueError, match="query"):
        SculptorLoop(ScriptedGenerator([]), box).run(conversation, "  ")


def test_prompts_are_the_papers_appendix_d_word_for_word():
    from rhea.agents.sculptor.prompts import NEEDLEBENCH_PROMPT, PI_LLM_PROMPT

    assert PAPER_UNIFIED_PROMPT == (
        "You are a helpful assistant. You can autonomously manage your own context: fold irrelevant information, "
        "focus on useful details, summarize long texts to keep your context concise, and use search tools to find "
        "key information in large documents.")
    assert PI_LLM_PROMPT.startswith("You are an intelligent assistant specialized for PI-LLM (Proactive "
                                    "Interference) testing.")
    assert ("divide the entire update stream into multiple fragments (e.g., ten fragments), then keep only the last "
            "two or three fragments while folding the rest." in PI_LLM_PROMPT)
    assert NEEDLEBENCH_PROMPT.endswith("confirm they truly have no higher-level ancestors before concluding your "
                                       "reasoning.")
