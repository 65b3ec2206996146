"""Integration: the Sculptor policy's tool loop on the embedded SmolLM2-135M ends within its budget."""
from __future__ import annotations

import pytest

from rhea.agents.sculptor import SculptorPolicy, loop_answer, tool_generator, trajectory_instances
from rhea.agents.sculptor.generators import TOOL_CALL_PREFILL, TextToolGenerator
from rhea.agents.sculptor.loop import MALFORMED
from rhea.agents.sculptor.schemas import TOOL_NAMES
from rhea.context import Conversation, Turn

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]


def test_embedded_model_runs_the_loop_within_budget():
    from rhea.modeling import load_default_model

    model, tok = load_default_model()
    generator = tool_generator(model.eval(), tok)
    assert isinstance(generator, TextToolGenerator)  # SmolLM2's template has no tools: text-described tools
    conv = Conversation([Turn("Track this. <updates>\nfruit: mango\nfruit: kiwi\n</updates>", "Noted.")])
    policy = SculptorPolicy(generator, max_tool_calls=1, max_new_tokens=16, tokenizer=tok, force_first_tool=True,
                            loop_prompt="You may use the tools below on the conversation history.")
    plan = policy.build(conv, "What is the current fruit?")

    result = policy.last_result
    # tool_choice="required": the first reply is forced to open a call, so a call is spent.
    assert result.steps[0].completion.startswith(TOOL_CALL_PREFILL) and result.steps[0].kind == "tool_call"
    assert result.n_tool_calls == 1 and len(result.steps) == 2  # the call, then the budget-final answer
    assert isinstance(loop_answer(plan), str) and result.steps[-1].kind in ("final", "budget_final")
    assert all(t.name in TOOL_NAMES + (MALFORMED,) or t.error for t in result.trace)
    assert plan.ledger.counter == "tokenizer" and plan.ledger.text_tokens <= plan.ledger.full_history_tokens
    assert generator.prompt_tokens > 1000  # the six tool schemas were in the prompt
    assert trajectory_instances(result)[-1].loss_mask[-1] is True
