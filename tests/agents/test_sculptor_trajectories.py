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
    # search (no change) → fragment (no change) → fold (cut) → search → restore (cut) → answer
    ids = planned_fragment_ids(conversation, 0, "<log>", "</log>", 2, searches_before=1)
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


def test_instances_cut_at_view_changes_with_incremental_masks(run, conversation):
    result, replies, ids = run
    assert [s.changed_view for s in result.steps] == [False, False, True, False, True, False]
    instances = trajectory_instances(result)
    assert len(instances) == 3
    assert [assistant_contents(i) for i in instances] == [replies[0:3], replies[3:5], replies[5:6]]
    for instance in instances:
        assert len(instance.loss_mask) == len(instance.messages)
        assert instance.messages[-1]["role"] == "assistant" and instance.loss_mask[-1]
        assert all(m["role"] == "assistant" for m, on in zip(instance.messages, instance.loss_mask) if on)
    # Earlier completions reappear as context in later instances, without loss.
    later = instances[2]
    after_query = later.messages[len(conversation) + 1:]  # merged system + history + query come first
    assert [m["content"] for m in after_query if m["role"] == "assistant"] == replies
    assert sum(later.loss_mask) == 1
    # Each instance shows the history as it was when its completions were generated.
    marker = f"[Folded fragment {ids[0]}"
    assert marker not in instances[0].messages[1]["content"]  # before the fold
    assert marker in instances[1].messages[1]["content"]  # between fold and restore
    assert marker not in instances[2].messages[1]["content"]  # after the restore
    assert instances[2].messages == result.messages


def test_run_without_view_changes_is_one_instance(conversation):
    loop, _ = make_loop(conversation, [hermes("search_context", query="key"), "value_10"])
    (only,) = trajectory_instances(loop.run(conversation, QUERY))
    assert sum(only.loss_mask) == 2 and only.messages[-1]["content"] == "value_10"


def test_jsonl_lines_are_openai_messages_with_masks(run):
    result, _, _ = run
    buffer = io.StringIO()
    assert write_jsonl([result, result], buffer, rewards=[1.0, 0.0]) == 6
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert len(lines) == 6 and [line["reward"] for line in lines] == [1.0] * 3 + [0.0] * 3
    for line in lines:
        assert set(line) == {"messages", "loss_mask", "reward"}
        assert all(isinstance(m["role"], str) and isinstance(m["content"], str) for m in line["messages"])
        assert len(line["loss_mask"]) == len(line["messages"]) and all(isinstance(b, bool) for b in line["loss_mask"])
    assert "reward" not in json.loads(trajectory_instances(result)[0].to_json())
    with pytest.raises(ValueError, match="2 rewards for 1 results"):
        write_jsonl([result], io.StringIO(), rewards=[1.0, 0.0])


def test_hand_edited_result_is_refused(run):
    result, _, _ = run
    cut = result.steps[2]
    keep = cut.sources.index(0)  # drop the trail: earlier completions vanish from the prompt
    steps = list(result.steps)
    steps[2] = dataclasses.replace(cut, prompt=cut.prompt[:keep], sources=cut.sources[:keep])
    broken = LoopResult(result.answer, result.messages, result.trace, result.n_tool_calls, steps=steps)
    with pytest.raises(ValueError, match="missing from step"):
        trajectory_instances(broken)
    with pytest.raises(TypeError, match="LoopResult"):
        trajectory_instances({"messages": []})
