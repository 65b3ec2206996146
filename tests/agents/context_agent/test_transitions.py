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
    assert len(gen.calls) == 15


def test_first_message_opens_a_tree_without_an_llm_call(run):
    _, _, plans, gen = run
    assert records(plans[0], "topic")[0]["source"] == "rule"
    assert records(plans[0], "placement")[0]["tree_id"] is None
    assert "one-sentence" in gen.calls[0][0]["content"]


def test_new_topic_opens_a_second_tree_and_summarises_the_first(run):
    agent, _, plans, _ = run
    topic = records(plans[1], "topic")[0]
    assert topic["choice"] == "new" and topic["mode"] == "per-path" and [a["same_topic"] for a in topic["asked"]] == [False]
    assert [d.tier for d in plans[1].decisions.turns] == ["drop"]
    assert "Topic t1: User plans a Rome trip in May." in plans[1].system_text


def test_topic_paths_are_asked_one_by_one_active_tree_first(run):
    _, _, plans, gen = run
    topic = records(plans[2], "topic")[0]
    assert [a["leaf_id"] for a in topic["asked"]] == ["n2", "n1"] and topic["choice"] == "t1" and topic["source"] == "llm"
    # the question is one yes/no over the path's summaries
    asked = gen.calls[3]
    assert "yes or no" in asked[0]["content"] and asked[1]["content"].startswith("Topic summary: User asks for banana bread.")


def test_return_to_an_old_topic_resumes_its_path_without_a_branch_call(run):
    _, _, plans, _ = run
    branch = records(plans[2], "branch")[0]
    assert (branch["action"], branch["source"]) == ("CONTINUE", "rule") and "<= branch_threshold=0.6" in branch["reason"]
    assert [d.tier for d in plans[2].decisions.turns] == ["raw", "drop"]
    assert "Topic t2: User asks for banana bread." in plans[2].system_text


def test_most_similar_node_being_the_current_one_needs_no_call(run):
    _, _, plans, _ = run
    branch = records(plans[3], "branch")[0]
    assert branch["similar"][0]["node_id"] == "n3" and branch["similar"][0]["similarity"] > 0.6
    assert (branch["action"], branch["source"]) == ("CONTINUE", "rule") and "gate" not in branch


def test_fork_from_an_ancestor_uses_the_retrieved_node_not_the_llm_id(run):
    agent, _, plans, _ = run
    branch = records(plans[4], "branch")[0]
    assert "ancestor of the current node n4, not its parent" in branch["gate"]
    assert (branch["source"], branch["action"]) == ("llm", "CREATE_BRANCH")
    assert (branch["fork_node_id"], branch["llm_fork_node_id"]) == ("n1", "n3")  # the reference's override
    assert [d.tier for d in plans[4].decisions.turns] == ["raw", "drop", "drop", "drop"]
    assert "Branch b1: User wants a cheap hotel in Rome." in plans[4].system_text
    n5 = agent.forest.node("n5")
    assert (n5.parent_id, n5.branch_id) == ("n1", "b3")


def test_switch_to_the_retrieved_nodes_branch(run):
    agent, _, plans, _ = run
    topic = records(plans[5], "topic")[0]
    first, second = topic["asked"]
    assert first["leaf_id"] == "n5" and first["source"] == "fallback:embedding" and not first["same_topic"]
    assert "neither yes nor no" in first["fallback_reason"] and second["source"] == "llm" and second["same_topic"]
    branch = records(plans[5], "branch")[0]
    assert "on another branch (b1) than the current node n5" in branch["gate"]
    assert (branch["action"], branch["target_branch_id"], branch["llm_target_branch_id"]) == ("SWITCH_BRANCH", "b1", "b9")
    assert [d.tier for d in plans[5].decisions.turns] == ["raw", "drop", "raw", "raw", "drop"]
    assert "Branch b3 (from n1): User considers luxury for the Rome trip." in plans[5].system_text
    assert agent.forest.node("n6").parent_id == "n4"


def test_empty_summary_falls_back_to_marked_truncation(run):
    agent, conv, _, _ = run
    node = agent.forest.node("n6")
    assert node.summary_source == "truncation" and node.summary.startswith("User: Cheap hotel after all")
    assert all(agent.forest.node(f"n{i}").summary_source == "llm" for i in range(1, 6))


def test_summaries_sit_in_the_one_leading_system_message(run):
    _, _, plans, _ = run
    roles = [m["role"] for m in plans[5].messages]
    assert roles[0] == "system" and roles.count("system") == 1 and roles[-1] == "user"


BRANCHY = [("Plan a Rome trip", []), ("Rome cheap hotel", []), ("Cheap hotel near the station", []),
           ("Rome trip again", [])]


@pytest.mark.parametrize("fallback, action", [("continue", "CONTINUE"), ("embedding", "CREATE_BRANCH")])
def test_unreadable_branch_reply_falls_back_and_says_why(fallback, action):
    gen = ScriptedGenerator(["S1", "yes", "S2", "yes", "S3", "yes", "no json here", "S4"])
    agent = ContextAgent(gen, KeywordEmbedder(), branch_fallback=fallback)
    plans = drive(agent, Conversation(), BRANCHY)
    branch = records(plans[3], "branch")[0]
    assert branch["source"] == f"fallback:{fallback}" and branch["action"] == action
    assert "holds no JSON object" in branch["fallback_reason"] and gen.replies == []
    if action == "CREATE_BRANCH":
        assert branch["fork_node_id"] == "n1"


def test_parent_is_never_a_fork_point():
    # "Rome trip" after one cheap-hotel turn: n1 is most similar but it is the current node's parent
    gen = ScriptedGenerator(["S1", "yes", "S2", "yes", "S3"])
    agent = ContextAgent(gen, KeywordEmbedder())
    plans = drive(agent, Conversation(), [("Plan a Rome trip", []), ("Cheap hotel", []), ("Rome trip again", [])])
    branch = records(plans[2], "branch")[0]
    assert branch["similar"][0]["node_id"] == "n1" and (branch["action"], branch["source"]) == ("CONTINUE", "rule")


def test_batched_topic_mode_asks_once_and_falls_back_to_embedding():
    gen = ScriptedGenerator(["S1", "not json at all", "S2"])
    agent = ContextAgent(gen, KeywordEmbedder(), topic_threshold=0.45, topic_mode="batched")
    plans = drive(agent, Conversation(), [("Plan a Rome trip", []), ("Rome hotel please", [])])
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
    agent = ContextAgent(gen, KeywordEmbedder(), topic_mode="batched")
    plans = drive(agent, Conversation(), [("Plan a Rome trip", []), ("banana bread", []), ("oven heat?", [])])
    assert problem in records(plans[2], "topic")[0]["fallback_reason"]


def test_topic_candidates_can_be_capped():
    gen = ScriptedGenerator(["S1", "no", "S2", "no", "S3"])
    agent = ContextAgent(gen, KeywordEmbedder(), max_topic_candidates=1)
    plans = drive(agent, Conversation(), [("Plan a Rome trip", []), ("banana bread", []), ("oven heat?", [])])
    assert len(records(plans[2], "topic")[0]["asked"]) == 1 and gen.replies == []


def test_without_a_generator_decisions_use_embeddings_only():
    agent = ContextAgent(None, KeywordEmbedder())
    plans = drive(agent, Conversation(), [("Plan a Rome trip", []), ("banana bread", []), ("Rome trip hotel", [])])
    assert records(plans[2], "topic")[0]["source"] == "embedding"
    assert agent.forest.node("n1").summary_source == "truncation"


def test_build_catches_up_on_turns_it_was_not_shown_and_repeats_no_decision():
    from rhea.context import Turn

    gen = ScriptedGenerator(["S1", "no", "S2", "no", "no"])
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
    with pytest.raises(ValueError, match="topic_mode='joint'"):
        ContextAgent(None, KeywordEmbedder(), topic_mode="joint")
    with pytest.raises(ValueError, match="max_topic_candidates=0"):
        ContextAgent(None, KeywordEmbedder(), max_topic_candidates=0)
