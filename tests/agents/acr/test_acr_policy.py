"""The "acr" policy: plan rewriting, audit records, composition with Rhea, adapters hot-swapped."""
from __future__ import annotations

import json

import pytest
import torch

from rhea.agents.acr import ACRConfigError, ACRPolicy
from rhea.backends.llm import ScriptedGenerator
from rhea.context import Conversation, Turn
from rhea.policies import get_policy

from .helpers import tiny_controller

CONV = Conversation([Turn("The meeting is in room 3.", "Noted."), Turn("Why do cats purr?", "Contentment."),
                     Turn("Correction: the room is actually 7.", "Thanks."), Turn("Wrong.", "Room 3.")])


def route(op: str, drift: bool = True) -> str:
    return json.dumps({"analysis": f"use {op}", "drift_detected": drift, "selected_operator": op})


def test_registered_and_llm_context_replaces_history_with_the_original_kept_for_audit():
    gen = ScriptedGenerator([route("fact_rectify"), "<summary>The meeting room is 7.</summary>"])
    policy = get_policy("acr", controller=gen, task="Track the meeting.")
    plan = policy.build(CONV, "Which room?")
    assert "Which room?" not in gen.calls[0][1]["content"]  # the router never sees the current query
    assert plan.policy == "acr" and [m["role"] for m in plan.messages] == ["system", "user"]
    assert "The meeting room is 7." in plan.system_text and "fact_rectify" in plan.system_text
    assert all(d.tier == "drop" and "replaced by the ACR fact_rectify" in d.note for d in plan.decisions.turns)
    route_rec, refactor_rec = plan.decisions.records
    assert route_rec["event"] == "acr_route" and route_rec["selected_operator"] == "fact_rectify"
    assert refactor_rec["event"] == "acr_refactor" and refactor_rec["context"] == "The meeting room is 7."
    assert [t["user"] for t in refactor_rec["original_history"]] == [t.user for t in CONV]
    assert plan.ledger.text_tokens < plan.ledger.full_history_tokens
    assert policy.operator_counts == {"fact_rectify": 1}


def test_previous_context_is_carried_between_turns_and_saved_with_the_policy():
    gen = ScriptedGenerator([route("state_abstract"), "<summary>Meeting in room 7.</summary>",
                             route("none", drift=False),
                             route("cognitive_boosting"), "<summary>Meeting in room 7.\n[Thought]: Answer 7.</summary>"])
    policy = ACRPolicy(gen, task="Track the meeting.")
    policy.build(CONV, "Which room?")
    assert "Previous refactored context: None\n" in gen.calls[1][1]["content"]
    assert policy.previous_context == "Meeting in room 7."
    conv = Conversation([*CONV, Turn("Which room?", "7.")])
    kept = policy.build(conv, "And the time?")  # none: the raw history goes forward, the buffer stays
    assert [d.tier for d in kept.decisions.turns] == ["raw"] * 5 and policy.previous_context == "Meeting in room 7."
    boosted = policy.build(conv, "And the time?")
    assert "Previous refactored context: Meeting in room 7.\n" in gen.calls[4][1]["content"]
    assert boosted.decisions.records[-1]["previous_context"] == "Meeting in room 7."
    assert policy.previous_context.endswith("[Thought]: Answer 7.")
    state = policy.state_dict()
    again = ACRPolicy(ScriptedGenerator([]))
    again.load_state_dict(state)
    assert again.previous_context == policy.previous_context
    assert again.operator_counts == {"state_abstract": 1, "none": 1, "cognitive_boosting": 1}
    policy.reset()
    assert policy.previous_context is None
    state["state"]["operator_counts"] = {"fact_rectification": 2, "NONE": 1}  # saved before the rename
    with pytest.warns(DeprecationWarning):
        again.load_state_dict(state)
    assert again.operator_counts == {"fact_rectify": 2, "none": 1}


def test_router_failure_falls_back_to_the_unchanged_history():
    plan = ACRPolicy(ScriptedGenerator(["no json here"])).build(CONV, "Which room?")
    assert [d.tier for d in plan.decisions.turns] == ["raw"] * 4 and len(plan.messages) == 9
    assert plan.decisions.records[0]["fallback_reason"].startswith("not JSON")
    assert plan.decisions.records[1]["operator"] == "none" and plan.decisions.records[1]["original_history"] == []


def test_deterministic_selection_and_anchor():
    policy = ACRPolicy(ScriptedGenerator([route("noise_filter")]), tau=0.2, deterministic=True)
    plan = policy.build(CONV, "Which meeting room?")
    assert [d.tier for d in plan.decisions.turns] == ["raw", "drop", "raw", "raw"]
    assert plan.decisions.records[1]["source"] == "deterministic"
    assert "Why do cats purr?" not in policy.previous_context and "room is actually 7" in policy.previous_context
    anchored = ACRPolicy(ScriptedGenerator([route("attention_anchor")]), system_prompt="Answer in French.",
                         deterministic=True, task="Answer questions.").build(
        Conversation([Turn("Always answer with one word.", "Ok.")]), "Which room?")
    last = anchored.messages[-1]["content"]
    assert last.startswith("[KEY INFO]:\n- Task: Answer questions.\n- Constraints: Answer in French. | "
                           "Always answer with one word.") and last.endswith("Which room?")


def test_refactorer_contract_failure_uses_the_raw_output_and_records_the_reason():
    gen = ScriptedGenerator([route("state_abstract"), "The room is 7."])
    plan = ACRPolicy(gen).build(CONV, "Which room?")
    assert [d.tier for d in plan.decisions.turns] == ["drop"] * 4 and "The room is 7." in plan.system_text
    rec = plan.decisions.records[1]
    assert rec["source"] == "fallback-raw" and "no closed, non-empty <summary>" in rec["fallback_reason"]
    empty = ACRPolicy(ScriptedGenerator([route("state_abstract"), ""])).build(CONV, "Which room?")
    assert [d.tier for d in empty.decisions.turns] == ["raw"] * 4
    assert empty.decisions.records[1]["source"] == "fallback-original"


def test_runs_on_top_of_the_rhea_plan():
    from rhea.policies.rhea_policy import RheaPolicy
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    base = RheaPolicy(model, tau_low=-2.0, tau_high=2.0, recognizer=None, use_im=False,  # every reply latent
                      scorer="latent", tier_mode="threshold", latent_tier="on", recent_raw=0)
    conv = Conversation([Turn("the city is paris", "yes paris"), Turn("the color is blue", "blue it is")])
    gen = ScriptedGenerator([route("noise_filter")])
    policy = ACRPolicy(gen, base_policy=base, tau=0.9, deterministic=True)
    for turn in conv:
        policy.observe(turn)
    plan = policy.build(conv, "what is the city")
    assert "(reply held as compressed memory)" in gen.calls[0][1]["content"]
    assert [d.tier for d in plan.decisions.turns] == ["latent", "latent"]  # keep_last keeps turn 1, BM25 turn 0
    assert len(plan.latents()) == 2
    state = policy.state_dict()
    assert state["name"] == "acr" and state["state"]["base"]["name"] == "rhea"
    with pytest.raises(ACRConfigError, match="system_prompt to the base policy"):
        ACRPolicy(gen, base_policy=base, system_prompt="x")


def test_controller_adapters_are_hot_swapped_on_one_base():
    ctrl = tiny_controller()
    base_weight = ctrl.peft_model.get_base_model().model.embed_tokens.weight
    with torch.no_grad():
        for p in ctrl.adapter_parameters("router"):
            p.normal_(0, 0.5)
    policy = ACRPolicy(ctrl, router_max_new_tokens=4, refactor_max_new_tokens=4)
    assert policy.router.generator.adapter == "router" and policy.refactorer.generator.adapter == "refactorer"
    prompt_only = ACRPolicy(ctrl, prompt_only=True)
    assert prompt_only.router.generator.adapter is None
    msgs = [{"role": "user", "content": "the city is paris"}]
    with ctrl.adapter("router"):
        routed = ctrl.peft_model(**ctrl.tokenizer("the city is", return_tensors="pt")).logits
    with ctrl.disable_adapters():
        plain = ctrl.peft_model(**ctrl.tokenizer("the city is", return_tensors="pt")).logits
    assert not torch.allclose(routed, plain)  # the adapter changes the output ...
    plan = policy.build(CONV, "Which room?")  # ... and the policy runs on the same weights
    assert ctrl.peft_model.get_base_model().model.embed_tokens.weight is base_weight
    assert plan.decisions.records[0]["event"] == "acr_route"
    assert ctrl.generator(None).generate(msgs, max_new_tokens=2) == prompt_only.router.generator.generate(msgs, max_new_tokens=2)


def test_bad_arguments_raise_named_errors():
    with pytest.raises(ACRConfigError, match="needs a router"):
        ACRPolicy(None)
    with pytest.raises(TypeError, match="ACRController or a TextGenerator"):
        ACRPolicy(42)
    with pytest.raises(ACRConfigError, match="tau="):
        ACRPolicy(ScriptedGenerator([]), tau=2.0)
    with pytest.raises(ACRConfigError, match="scorer="):
        ACRPolicy(ScriptedGenerator([]), scorer="dense")
    with pytest.raises(ACRConfigError, match="temperature="):
        ACRPolicy(ScriptedGenerator([]), temperature=-1)


def test_chat_session_gives_acr_the_session_model_as_controller(tmp_path):
    from rhea.backends.llm import HFGenerator
    from rhea.session import ChatSession
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    chat = ChatSession(model, policy="acr", max_new_tokens=3,
                       policy_kwargs={"router_max_new_tokens": 4, "refactor_max_new_tokens": 4})
    assert isinstance(chat.policy.router.generator, HFGenerator) and chat.policy.router.generator.adapter is None
    chat.send("the city is paris")
    chat.send("what is the city")
    route = chat.last_plan.decisions.records[0]
    assert route["event"] == "acr_route" and route["raw"] and route["selected_operator"] == "none"
    chat.save(tmp_path / "s")
    again = ChatSession.load(tmp_path / "s", model)
    assert again.policy.config() == chat.policy.config() and len(again.conversation) == 2
