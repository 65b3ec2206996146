"""Topic and branch transitions on a scripted branching conversation."""
from __future__ import annotations

import pytest

from rhea.agents.context_agent import ContextAgent
from rhea.backends.llm import ScriptedGenerator
from rhea.context import Conversation

from .helpers import KeywordEmbedder, drive, script_replies


@pytest.fixture
def run():
    gen = ScriptedGenerator(script_replies())
    agent = ContextAgent(gen, KeywordEmbedder())
    conv = Conversation()
    plans = drive(agent, conv)
    return agent, conv, plans, gen


def records(plan, event):
    return [r for r in plan.decisions.records if r["event"] == event]


def test_every_scripted_reply_is_consumed_once(run):
    _, _, _, gen = run
    assert gen.replies == []
    assert len(gen.calls) == 11


def test_first_message_opens_a_tree_without_an_llm_call(run):
    _, _, plans, gen = run
    assert records(plans[0], "topic")[0]["source"] == "rule"
    assert records(plans[0], "placement")[0]["tree_id"] is None
    assert "Summarize" not in gen.calls[0][0]["content"] and "one-sentence" in gen.calls[0][0]["content"]


def test_new_topic_opens_a_second_tree_and_summarises_the_first(run):
    agent, _, plans, _ = run
    assert records(plans[1], "topic")[0]["choice"] == "new"
    assert [d.tier for d in plans[1].decisions.turns] == ["drop"]
    assert "Topic t1: User plans a Rome trip in May." in plans[1].system_text


def test_return_to_an_old_topic_resumes_its_path(run):
    agent, _, plans, _ = run
    topic = records(plans[2], "topic")[0]
    assert topic["source"] == "llm" and topic["choice"] == "t1"
    branch = records(plans[2], "branch")[0]
    assert (branch["action"], branch["source"]) == ("CONTINUE", "rule") and "< branch_threshold" in branch["reason"]
    assert [d.tier for d in plans[2].decisions.turns] == ["raw", "drop"]
    assert "Topic t2: User asks for banana bread." in plans[2].system_text


def test_fork_from_an_earlier_node_creates_a_branch(run):
    agent, _, plans, _ = run
    branch = records(plans[3], "branch")[0]
    assert (branch["source"], branch["action"], branch["fork_node_id"]) == ("llm", "CREATE_BRANCH", "n1")
    # the cheap-hotel turn leaves the path; it stays as a summary line of its branch
    assert [d.tier for d in plans[3].decisions.turns] == ["raw", "drop", "drop"]
    assert "Branch b1: User wants a cheap hotel in Rome." in plans[3].system_text
    n4 = agent.forest.node("n4")
    assert (n4.parent_id, n4.branch_id) == ("n1", "b3")


def test_switch_branch_after_malformed_json_falls_back_and_says_why(run):
    agent, _, plans, _ = run
    branch = records(plans[4], "branch")[0]
    assert branch["source"] == "fallback:embedding" and branch["action"] == "SWITCH_BRANCH"
    assert branch["target_branch_id"] == "b1" and "holds no JSON object" in branch["fallback_reason"]
    # the path is now Rome trip -> cheap hotel; the luxury fork is summarised
    assert [d.tier for d in plans[4].decisions.turns] == ["raw", "drop", "raw", "drop"]
    assert "Branch b3 (from n1): User considers luxury for the Rome trip." in plans[4].system_text
    assert agent.forest.node("n5").parent_id == "n3"


def test_empty_summary_falls_back_to_marked_truncation(run):
    agent, conv, _, _ = run
    node = agent.forest.node("n5")
    assert node.summary_source == "truncation" and node.summary.startswith("User: Cheap hotel after all")
    assert all(agent.forest.node(f"n{i}").summary_source == "llm" for i in range(1, 5))


def test_summaries_sit_in_the_one_leading_system_message(run):
    _, _, plans, _ = run
    roles = [m["role"] for m in plans[4].messages]
    assert roles[0] == "system" and roles.count("system") == 1 and roles[-1] == "user"


def test_malformed_topic_reply_falls_back_to_embedding_and_records_it():
    gen = ScriptedGenerator(["S1", "not json at all", "S2"])
    agent = ContextAgent(gen, KeywordEmbedder(), topic_threshold=0.45)
    conv = Conversation()
    plans = drive(agent, conv, [("Plan a Rome trip", []), ("Rome hotel please", [])])
    topic = records(plans[1], "topic")[0]
    assert topic["source"] == "fallback:embedding" and topic["choice"] == "t1"
    assert "holds no JSON object" in topic["fallback_reason"] and topic["raw_reply"] == "not json at all"


@pytest.mark.parametrize("reply, problem", [
    ('{"topic": 7}', "must be an int in 0..2"),
    ('{"topic": "first"}', "must be an int"),
    ('{"topic": 1', "unterminated"),
])
def test_out_of_range_or_broken_topic_json_is_rejected(reply, problem):
    gen = ScriptedGenerator(["S1", '{"topic": 0}', "S2", reply, "S3"])
    agent = ContextAgent(gen, KeywordEmbedder())
    plans = drive(agent, Conversation(), [("Plan a Rome trip", []), ("banana bread", []), ("oven heat?", [])])
    assert problem in records(plans[2], "topic")[0]["fallback_reason"]


def test_branch_reply_naming_an_unknown_node_falls_back():
    script = [("Plan a Rome trip", []), ("Rome cheap hotel", []), ("Rome trip again", [])]
    gen = ScriptedGenerator(["S1", '{"topic": 1}', "S2", '{"topic": 1}',
                             '{"action": "CREATE_BRANCH", "fork_node_id": "n99"}', "S3"])
    agent = ContextAgent(gen, KeywordEmbedder(), branch_fallback="continue")
    plans = drive(agent, Conversation(), script)
    branch = records(plans[2], "branch")[0]
    assert branch["source"] == "fallback:continue" and branch["action"] == "CONTINUE"
    assert "fork_node_id='n99' is not a node" in branch["fallback_reason"]


def test_without_a_generator_decisions_use_embeddings_only():
    agent = ContextAgent(None, KeywordEmbedder())
    plans = drive(agent, Conversation(), [("Plan a Rome trip", []), ("banana bread", []), ("Rome trip hotel", [])])
    assert records(plans[2], "topic")[0]["source"] == "embedding"
    assert agent.forest.node("n1").summary_source == "truncation"


def test_build_catches_up_on_turns_it_was_not_shown_and_repeats_no_decision():
    from rhea.context import Turn

    gen = ScriptedGenerator(["S1", '{"topic": 0}', "S2", '{"topic": 0}'])
    agent = ContextAgent(gen, KeywordEmbedder())
    conv = Conversation([Turn("Plan a Rome trip", "ok"), Turn("banana bread", "ok")])
    first = agent.build(conv, "oven heat?")
    again = agent.build(conv, "oven heat?")
    assert len(agent.forest) == 2 and gen.replies == []
    assert [d.tier for d in again.decisions.turns] == [d.tier for d in first.decisions.turns] == ["drop", "drop"]


def test_a_different_conversation_needs_reset():
    from rhea.agents.context_agent import ForestStateError
    from rhea.context import Turn

    agent = ContextAgent(None, KeywordEmbedder())
    agent.build(Conversation([Turn("Plan a Rome trip", "ok")]), "next")
    with pytest.raises(ForestStateError, match="call reset"):
        agent.build(Conversation([Turn("banana bread", "ok")]), "next")


def test_bad_settings_name_the_value():
    with pytest.raises(ValueError, match="branch_fallback='maybe'"):
        ContextAgent(None, KeywordEmbedder(), branch_fallback="maybe")
    with pytest.raises(ValueError, match="keep_raw_last=2"):
        ContextAgent(None, KeywordEmbedder(), keep_raw_last=2)
    with pytest.raises(ValueError, match="topic_threshold=2"):
        ContextAgent(None, KeywordEmbedder(), topic_threshold=2)
