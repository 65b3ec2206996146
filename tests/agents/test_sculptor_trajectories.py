"""Algorithm 1: instances cut at view-changing calls, loss on each completion exactly once."""
from __future__ import annotations

import dataclasses
import io
import json

import pytest

from rhea.agents.sculptor import LoopResult, trajectory_instances, write_jsonl

from .sculptor_helpers import hermes, make_loop, planned_fragment_ids

QUERY = "What is the latest value of key_1?"


@pytest.fixture
def run(conversation):
    # search → fragment (T_ctx: cut) → fold (cut) → search → restore (cut) → answer
    ids = planned_fragment_ids(conversation, 0, "<log>", "</log>", 2, searches_before=[{"query": "key_1"}])
    replies = [
        hermes("search_context", query="key_1"),
        hermes("fragment_context", start_marker="<log>", end_marker="</log>", num_fragments=2),
        hermes("fold_fragment", fragment_id=ids[0]),
        hermes("search_context", query="value_10"),
        hermes("restore_fragment", fragment_id=ids[0]),
        "value_10",
    ]
    loop, _ = make_loop(conversation, replies)
    return loop.run(conversation, QUERY), replies, ids


def assistant_contents(instance):
    return [m["content"] for m, on in zip(instance.messages, instance.loss_mask) if on]


def test_instances_cut_at_context_tools_with_incremental_masks(run, conversation):
    result, replies, ids = run
    assert [s.changed_view for s in result.steps] == [False, False, True, False, True, False]
    instances = trajectory_instances(result)
    # Algorithm 1: a snapshot at every fragment/fold/summarize/restore call and at the end.
    assert len(instances) == 4
    assert [assistant_contents(i) for i in instances] == [replies[0:2], replies[2:3], replies[3:5], replies[5:6]]
    for instance, cut in zip(instances[:3], (1, 2, 4)):
        # Lines 8-10: a snapshot that is not the final one ends with its tool result T_i.
        assert instance.messages[-2] == {"role": "assistant", "content": replies[cut]} and instance.loss_mask[-2]
        assert instance.messages[-1] == result.steps[cut].results[0] and not instance.loss_mask[-1]
        assert instance.messages[-1]["role"] == "tool" and instance.messages[-1]["name"] == json.loads(
            replies[cut].split("\n")[1])["name"]
    assert json.loads(instances[1].messages[-1]["content"])["status"] == "folded"
    for instance in instances:
        assert len(instance.loss_mask) == len(instance.messages)
        assert all(m["role"] == "assistant" for m, on in zip(instance.messages, instance.loss_mask) if on)
    assert instances[-1].messages[-1]["role"] == "assistant" and instances[-1].loss_mask[-1]
    # Earlier completions reappear as context in later instances, without loss.
    later = instances[3]
    after_query = later.messages[len(conversation) + 1:]  # merged system + history + query come first
    assert [m["content"] for m in after_query if m["role"] == "assistant"] == replies
    assert sum(later.loss_mask) == 1
    # Each instance shows the history as it was when its completions were generated.
    marker = f"[Folded fragment {ids[0]}"
    assert marker not in instances[1].messages[1]["content"]  # the fold's own snapshot: before the fold
    assert marker in instances[2].messages[1]["content"]  # between fold and restore
    assert marker not in instances[3].messages[1]["content"]  # after the restore
    assert instances[3].messages == result.messages


def test_view_change_rule_cuts_only_where_the_text_changed(run):
    result, replies, _ = run
    instances = trajectory_instances(result, cut_on="view_change")
    assert [assistant_contents(i) for i in instances] == [replies[0:3], replies[3:5], replies[5:6]]
    assert instances[0].messages[-1]["role"] == "tool"
    with pytest.raises(ValueError, match="cut_on='sometimes'"):
        trajectory_instances(result, cut_on="sometimes")


def test_run_without_view_changes_is_one_instance(conversation):
    loop, _ = make_loop(conversation, [hermes("search_context", query="key"), "value_10"])
    (only,) = trajectory_instances(loop.run(conversation, QUERY))
    assert sum(only.loss_mask) == 2 and only.messages[-1]["content"] == "value_10"


def test_jsonl_lines_are_openai_messages_with_masks(run):
    result, _, _ = run
    buffer = io.StringIO()
    assert write_jsonl([result, result], buffer, rewards=[1.0, 0.0]) == 8
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert len(lines) == 8 and [line["reward"] for line in lines] == [1.0] * 4 + [0.0] * 4
    for line in lines:
        assert set(line) == {"messages", "loss_mask", "reward"}
        assert all(isinstance(m["role"], str) and isinstance(m["content"], str) for m in line["messages"])
        assert len(line["loss_mask"]) == len(line["messages"]) and all(isinstance(b, bool) for b in line["loss_mask"])
    assert "reward" not in json.loads(trajectory_instances(result)[0].to_json())
    with pytest.raises(ValueError, match="2 rewards for 1 results"):
        write_jsonl([result], io.StringIO(), rewards=[1.0, 0.0])


def test_hand_edited_result_is_refused(run):
    result, _, _ = run
    cut = result.steps[1]
    keep = cut.sources.index(0)  # drop the trail: earlier completions vanish from the prompt
    steps = list(result.steps)
    steps[1] = dataclasses.replace(cut, prompt=cut.prompt[:keep], sources=cut.sources[:keep])
    broken = LoopResult(result.answer, result.messages, result.trace, result.n_tool_calls, steps=steps)
    with pytest.raises(ValueError, match="missing from step"):
        trajectory_instances(broken)
    with pytest.raises(TypeError, match="LoopResult"):
        trajectory_instances({"messages": []})
