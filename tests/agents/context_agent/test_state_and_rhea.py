"""Serialisation round trips, the policy registry, and the Rhea combination."""
from __future__ import annotations

import json

import pytest
import torch

from rhea.agents.context_agent import ContextAgent, Forest, ForestStateError
from rhea.backends.llm import ScriptedGenerator
from rhea.context import Conversation, Turn, render
from rhea.policies import get_policy

from .helpers import KeywordEmbedder, drive, script_replies


def test_forest_round_trip_is_exact_through_json():
    agent = ContextAgent(ScriptedGenerator(script_replies()), KeywordEmbedder())
    drive(agent, Conversation())
    data = agent.forest.to_dict()
    again = Forest.from_dict(json.loads(json.dumps(data)))
    assert again.to_dict() == data
    assert again.trace() == agent.forest.trace()
    assert (again.active_tree_id, again.active_branch_id, again.current_node.id) == ("t1", "b1", "n6")


def test_policy_state_dict_resumes_the_same_plan():
    conv = Conversation()
    agent = ContextAgent(ScriptedGenerator(script_replies()), KeywordEmbedder())
    drive(agent, conv)
    state = json.loads(json.dumps(agent.state_dict()))
    other = get_policy("context-agent", embedder=KeywordEmbedder())
    other.load_state_dict(state)
    agent.navigator.generator = None  # the next decision from embeddings on both sides
    a, b = agent.build(conv, "Cheap hotel near the station"), other.build(conv, "Cheap hotel near the station")
    assert a.messages == b.messages and a.decisions.turns == b.decisions.turns


def test_broken_forest_dict_names_the_fix():
    with pytest.raises(ForestStateError, match="Forest.to_dict"):
        Forest.from_dict({"trees": []})
    with pytest.raises(ForestStateError, match="tree 't9' does not exist"):
        Forest.from_dict({"trees": [], "active_tree_id": "t9", "counters": {"t": 0, "b": 0, "n": 0}})


def test_rhea_compress_turns_older_path_replies_into_latents(tiny_model):
    model = tiny_model.eval()
    agent = ContextAgent(None, KeywordEmbedder(), compress_fn=model.compress, keep_raw_last=1, tokenizer=model.tokenizer,
                         branch_threshold=0.99)
    conv = Conversation()
    for user, reply in [("rome trip", "hello world"), ("rome hotel", "the cat"), ("banana bread", "yes"), ("rome trip cheap", "ok")]:
        agent.build(conv, user)
        conv.append(Turn(user, reply))
        agent.observe(conv[-1])
    plan = agent.build(conv, "rome trip luxury")
    tiers = [d.tier for d in plan.decisions.turns]
    assert tiers == ["latent", "latent", "drop", "raw"]
    latents = plan.latents()
    assert [l.source_turn for l in latents] == [0, 1] and all(l.n_slots == model.n_mem for l in latents)
    with torch.no_grad():
        expected = model.compress(["hello world"])[0]
    assert torch.allclose(latents[0].vectors, expected)
    rendered = render(plan, model.tokenizer)
    assert rendered.latent_embeds.shape[0] == 2 * model.n_mem
    assert plan.ledger.latent_slots == 2 * model.n_mem
    # cached: a second build compresses nothing new
    calls = []
    agent.compress_fn = lambda texts: calls.append(texts) or model.compress(texts)
    agent.build(conv, "rome trip luxury")
    assert calls == []
