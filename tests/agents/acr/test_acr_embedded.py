"""Integration: ChatSession with policy="acr" runs 3 turns on the embedded SmolLM2-135M."""
from __future__ import annotations

import pytest

from rhea.agents.acr.operators import OPERATORS
from rhea.session import ChatSession

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]


def test_acr_chat_session_three_turns_on_the_embedded_model(tmp_path):
    from rhea.modeling import load_default_model

    model, _ = load_default_model()
    chat = ChatSession(model, policy="acr", max_new_tokens=12,
                       policy_kwargs={"router_max_new_tokens": 40, "refactor_max_new_tokens": 40,
                                      "task": "Remember the user's facts."})
    for text in ("Please remember: the city is Oslo.", "Correction: the city is actually Lima.", "What is the city?"):
        assert chat.send(text) == chat.conversation[-1].assistant
    assert len(chat.conversation) == 3 and [r.policy for r in chat.records] == ["acr"] * 3
    records = chat.last_plan.decisions.records
    route = next(r for r in records if r["event"] == "acr_route")
    refactor = next(r for r in records if r["event"] == "acr_refactor")
    assert route["selected_operator"] in OPERATORS and refactor["operator"] == route["selected_operator"]
    # whatever the small model wrote: a valid decision, or none with the reason recorded
    assert route["fallback_reason"] is None or route["selected_operator"] == "none"
    assert route["raw"]  # the router was really asked (two earlier turns)
    assert chat.last_plan.ledger.counter == "tokenizer"
    chat.save(tmp_path / "s")
    again = ChatSession.load(tmp_path / "s", model)
    assert again.policy.name == "acr" and len(again.conversation) == 3
