"""SculptorPolicy on a hand-built conversation with a scripted tool-calling generator."""
from __future__ import annotations

import json

import pytest

from rhea.agents.sculptor import SculptorPolicy, loop_answer
from rhea.agents.sculptor.policy import turn_messages
from rhea.agents.sculptor.prompts import PAPER_UNIFIED_PROMPT
from rhea.backends.llm import ScriptedGenerator
from rhea.context import Conversation, Turn
from rhea.policies import get_policy

from .sculptor_helpers import hermes, planned_fragment_ids

SYSTEM = "Answer in one line."
LOG = "\n".join(f"update {i}: key_{i % 3} = value_{i}" for i in range(12))
TURNS = [Turn(f"Here is the log.\n<log>\n{LOG}\n</log>\nRemember it.", "Noted."),
         Turn("Also: the budget is 42 EUR.", "OK, 42 EUR.")]
Q1, Q2, Q3 = "What is the latest value of key_1?", "What is the budget?", "Show key_0's history."


def tool_calls(plan):
    return [r for r in plan.decisions.records if r["event"] == "tool_call"]


@pytest.fixture
def ids():
    return planned_fragment_ids(turn_messages(TURNS), 0, "<log>", "</log>", 2)


def test_fold_persists_across_turns_and_plan_shows_the_sculpted_history(ids):
    gen = ScriptedGenerator([
        hermes("fragment_context", start_marker="<log>", end_marker="</log>", num_fragments=2),
        hermes("fold_fragment", fragment_id=ids[0]),
        "value_10",
        "42 EUR",
    ])
    policy = SculptorPolicy(gen, system_prompt=SYSTEM)
    conv = Conversation(list(TURNS))
    plan = policy.build(conv, Q1)

    folded = f"[Folded fragment {ids[0]}"
    assert plan.policy == "sculptor" and loop_answer(plan) == "value_10"
    assert [m["role"] for m in plan.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert plan.messages[0]["content"] == SYSTEM and plan.messages[-1] == {"role": "user", "content": Q1}
    assert folded in plan.messages[1]["content"] and "update 0:" not in plan.messages[1]["content"]
    assert plan.messages[3:5] == turn_messages(TURNS[1:])
    calls = tool_calls(plan)
    assert [(c["name"], c["step"], c["changed_view"], c["error"]) for c in calls] == [
        ("fragment_context", 0, False, None), ("fold_fragment", 1, True, None)]
    assert json.loads(calls[1]["result"])["status"] == "folded"
    answer = plan.decisions.records[-1]
    assert answer == {"event": "sculptor_answer", "answer": "value_10", "n_tool_calls": 2,
                      "budget_exhausted": False, "generations": 3}
    assert plan.decisions.turns[0].note == f"folded {ids[0]}" and plan.decisions.turns[1].note == "as is"
    assert plan.decisions.instructions == [SYSTEM]
    ledger = plan.ledger
    assert 0 < ledger.text_tokens < ledger.full_history_tokens and ledger.counter == "regex-approx"
    # The loop's prompt: its own instructions, then the policy's system text, then history.
    first_prompt = gen.calls[0][0]["content"]
    assert first_prompt.startswith(PAPER_UNIFIED_PROMPT) and first_prompt.endswith(SYSTEM)

    turn = Turn(Q1, loop_answer(plan))
    conv.append(turn)
    policy.observe(turn)
    plan2 = policy.build(conv, Q2)
    assert loop_answer(plan2) == "42 EUR" and tool_calls(plan2) == []
    assert folded in gen.calls[-1][1]["content"]  # the fold from turn 1 is still in place
    assert folded in plan2.messages[1]["content"] and plan2.messages[-3:-1] == turn_messages([turn])
    assert len(plan2.decisions.turns) == 3 and len(policy.store.original) == 6


def test_state_dict_round_trip_keeps_folds_and_undo(ids):
    gen = ScriptedGenerator([
        hermes("fragment_context", start_marker="<log>", end_marker="</log>", num_fragments=2),
        hermes("fold_fragment", fragment_id=ids[0]) + hermes("search_context", query="key_0"),
        "value_9",
    ])
    policy = SculptorPolicy(gen, max_tool_calls=5, force_first_tool=True, seed=0)
    conv = Conversation(list(TURNS))
    plan = policy.build(conv, Q1)
    saved = json.loads(json.dumps(policy.state_dict()))  # must survive a JSON file
    assert saved["name"] == "sculptor" and saved["config"]["max_tool_calls"] == 5

    gen2 = ScriptedGenerator([hermes("restore_fragment", fragment_id=ids[0]), "done"])
    loaded = SculptorPolicy(gen2, max_tool_calls=5)
    loaded.load_state_dict(saved)
    assert loaded.store.render() == policy.store.render() and loaded.store.op_log == policy.store.op_log
    assert [r["error"] for r in tool_calls(plan)] == [None, None, None]
    plan3 = loaded.build(conv, Q3)
    assert tool_calls(plan3)[0]["error"] is None
    assert plan3.messages[:-1] == turn_messages(TURNS)  # restored: the history shows as it was
    # The loaded id stream continues where the saved one stopped: no id is issued twice.
    assert loaded.store.search("x").id == policy.store.search("x").id
    with pytest.raises(ValueError, match="not 'sculptor'"):
        loaded.load_state_dict({"name": "vanilla", "state": {}})
    with pytest.raises(ValueError, match="lacks 'store'"):
        loaded.load_state_dict({"name": "sculptor", "state": {}})


def test_registry_budget_and_conversation_checks():
    gen = ScriptedGenerator([hermes("search_context", query="budget")] * 2 + ["42"])
    policy = get_policy("sculptor", generator=gen, max_tool_calls=2)
    assert isinstance(policy, SculptorPolicy)
    plan = policy.build(Conversation(list(TURNS)), Q2)
    assert plan.decisions.records[-1]["budget_exhausted"] and len(tool_calls(plan)) == 2
    assert plan.ledger.text_tokens == plan.ledger.full_history_tokens  # searching hides nothing
    with pytest.raises(ValueError, match="call reset"):
        policy.build(Conversation([Turn("something else", "ok")]), Q2)
    policy.reset()
    assert policy.store.original == [] and policy.last_result is None
    with pytest.raises(ValueError, match="max_tool_calls=-1"):
        SculptorPolicy(gen, max_tool_calls=-1)
    with pytest.raises(TypeError, match="generator must be a TextGenerator"):
        SculptorPolicy(object())


def test_first_turn_with_no_history_and_trajectory_from_last_result():
    from rhea.agents.sculptor import trajectory_instances

    policy = SculptorPolicy(ScriptedGenerator(["hello"]), tokenizer=None)
    plan = policy.build(Conversation([]), "hi")
    assert plan.messages == [{"role": "user", "content": "hi"}] and loop_answer(plan) == "hello"
    instances = trajectory_instances(policy.last_result)
    assert len(instances) == 1 and instances[0].loss_mask[-1] is True
