"""Integration: long turns on the embedded model (8,192-token window) never render a prompt over it."""
import os

import pytest

from rhea.context import render
from rhea.session import ChatSession
from rhea.session.generation import Generation

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]

PARAGRAPH = ("The harbour town kept its ledgers in a stone house by the quay, and every ship that came in "
             "left a line: its name, its cargo, the day and the tide. ")


@pytest.fixture(scope="module")
def model():
    from rhea import load_default_model

    return load_default_model()[0].eval()


@pytest.mark.parametrize("policy", ["vanilla", pytest.param("rhea", marks=pytest.mark.skipif(
    not os.environ.get("RHEA_LONG_TESTS"), reason="compresses four 3k-token replies: RHEA_LONG_TESTS=1 runs it"))])
def test_long_turns_fit_the_window_and_are_answered(model, policy):
    chat = ChatSession(model, policy=policy, max_new_tokens=4,
                       policy_kwargs={"scorer": "bm25"} if policy == "rhea" else {})
    budget = chat.token_budget
    assert budget.window == 8192 and budget.prompt_tokens == 8188
    long_text = PARAGRAPH * 120  # ~3,000 tokens
    for i in range(4):  # four turns of ~6,000 tokens each: 24k tokens of history for an 8k window
        staged = chat.begin_turn(f"Ledger page {i}: " + long_text)
        assert render(staged.plan, model.tokenizer).input_ids.shape[1] <= budget.prompt_tokens
        chat.end_turn(staged, Generation(f"Noted page {i}. " + long_text, 0, 0, 4))
    reply = chat.send("Which page did I send first?")
    record = next(r for r in chat.last_plan.decisions.records if r.get("event") == "budget")
    assert reply is not None and chat.records[-1].prompt_tokens <= budget.prompt_tokens
    assert record["rendered_tokens"] <= 8188 and (record["dropped"] or record["cut"])
