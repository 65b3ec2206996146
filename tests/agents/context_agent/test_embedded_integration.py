"""Integration: Context-Agent as a policy on the embedded SmolLM2-135M (decisions, summaries, reply)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]


def test_context_agent_runs_as_a_policy_on_the_embedded_model():
    from rhea import load_default_model
    from rhea.context import Conversation, Turn
    from rhea.policies import get_policy
    from rhea.backends.embedding import HashingEmbedder
    from rhea.session.generation import generate_from_plan
    from rhea.backends.llm import HFGenerator

    model, tokenizer = load_default_model()
    model.eval()
    controller = HFGenerator(model, tokenizer)
    agent = get_policy("context-agent", generator=controller, embedder=HashingEmbedder(256), tokenizer=tokenizer,
                       decision_max_new_tokens=24, summary_max_new_tokens=16)
    conv = Conversation()
    for user, reply in [("Plan a trip to Rome in May.", "Rome in May is warm; stay near Trastevere."),
                        ("How long do I bake banana bread?", "About 60 minutes at 175 degrees.")]:
        agent.build(conv, user)
        conv.append(Turn(user, reply))
        agent.observe(conv[-1])
    plan = agent.build(conv, "For the Rome trip in May, which hotel area?")
    events = [r["event"] for r in plan.decisions.records]
    # a plan records the events since the previous build: the last reply's summary, then this turn's decisions
    assert events.count("summary") == 1 and "topic" in events and events[-1] == "placement"
    topic = [r for r in plan.decisions.records if r["event"] == "topic"][-1]
    # per-path attribution: one yes/no per leaf path asked, each read or (the 135M model) fallen back, and said so
    assert topic["mode"] == "per-path" and 1 <= len(topic["asked"]) <= 2 and topic["choice"] in ("t1", "t2", "new")
    assert all(a["source"] in ("llm", "fallback:embedding") and ("fallback_reason" in a) == (a["source"] != "llm")
               for a in topic["asked"])
    assert all(agent.forest.node(n).summary for n in ("n1", "n2"))
    assert controller.prompt_tokens > 0
    reply = generate_from_plan(model, plan, max_new_tokens=8)
    assert reply.new_tokens > 0 and reply.prompt_tokens > 0
