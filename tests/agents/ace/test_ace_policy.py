"""ACE as the "ace" context policy over a conversation's own history."""
from rhea.agents.ace import AcePolicy  # noqa: F401  (registers "ace")
from rhea.backends.embedding import HashingEmbedder
from rhea.backends.llm import ScriptedGenerator
from rhea.context import Conversation, Turn
from rhea.policies import get_policy

CONV = Conversation([
    Turn("My cat is called Tom.", "Nice name!"), Turn("How do I sort a list in Python?", "Use sorted()."),
    Turn("Tom likes fish.", "Cats often do."), Turn("What is the weather like?", "I cannot check."),
])


def test_plan_keeps_retrieved_turns_and_records_the_trace():
    llm = ScriptedGenerator(["THINK", "THINK", "What is the cat's name?", "Tom."])  # round 1 retrieves unvoted
    policy = get_policy("ace", llm=llm, n_agents=2, rounds=2, passages_per_retrieval=2)
    plan = policy.build(CONV, "Which food does my cat Tom love?")
    tiers = [d.tier for d in plan.decisions.turns]
    assert plan.policy == "ace" and tiers.count("raw") == 2 and tiers[0] == "raw" and tiers[2] == "raw"
    assert "Sub-question: What is the cat's name? Answer: Tom." in plan.system_text
    (record,) = plan.decisions.records
    assert [r["action"] for r in record["rounds"]] == ["RETRIEVE", "THINK"] and record["tokens"]["total"] > 0
    assert plan.messages[-1] == {"role": "user", "content": "Which food does my cat Tom love?"}
    assert plan.ledger.text_tokens < plan.ledger.full_history_tokens


def test_dense_retriever_and_empty_history():
    policy = AcePolicy(ScriptedGenerator([]), retriever=HashingEmbedder(128), n_agents=1, rounds=1,
                       passages_per_retrieval=1)
    plan = policy.build(CONV, "Tom likes fish?")
    assert [d.tier for d in plan.decisions.turns] == ["drop", "drop", "raw", "drop"]
    empty = policy.build(Conversation(), "hello?")
    assert empty.decisions.records[0]["rounds"] == [] and empty.messages == [{"role": "user", "content": "hello?"}]
    assert policy.config()["retriever"] == "HashingEmbedder"
