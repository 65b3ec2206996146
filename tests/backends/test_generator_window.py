"""An inner prompt (a summarizer's, an agent's tool loop) never runs past the model's window: `HFGenerator`
refuses one that would, with a named `ContextWindowError`, before any model work."""
from __future__ import annotations

import pytest

from rhea.backends.llm import HFGenerator
from rhea.errors import ContextWindowError
from rhea.testing import _WORDS, tiny_rhea


@pytest.fixture(scope="module")
def generator():
    return HFGenerator(tiny_rhea())


def test_the_window_and_the_room_a_prompt_has(generator):
    window = generator.window
    assert window == generator.model.max_context and window > 0
    assert generator.prompt_room(8) == window - 8
    assert generator.count_prompt_tokens([{"role": "user", "content": "hi"}]) > 1


def test_a_prompt_over_the_window_is_refused_before_any_model_work(generator, monkeypatch):
    text = " ".join(_WORDS[i % len(_WORDS)] for i in range(generator.window * 2))
    messages = [{"role": "user", "content": text}]
    n = generator.count_prompt_tokens(messages)
    assert n > generator.window
    backbone = generator._backbone()
    monkeypatch.setattr(type(backbone), "generate", lambda *a, **k: pytest.fail("the model ran"), raising=False)
    with pytest.raises(ContextWindowError, match=rf"a prompt of {n} tokens with max_new_tokens=4 exceeds the model's "
                                                 rf"window of {generator.window} tokens"):
        generator.generate(messages, max_new_tokens=4)
    with pytest.raises(ContextWindowError, match="prompt_room"):
        HFGenerator.generate_batch([generator, generator], [[{"role": "user", "content": "hi"}], messages],
                                   max_new_tokens=4)


def test_a_prompt_that_fits_is_answered(generator):
    reply = generator.generate([{"role": "user", "content": "the cat is red"}], max_new_tokens=3)
    assert isinstance(reply, str) and generator.completion_tokens <= 3


def test_the_summary_policy_fits_its_summarizer_prompt_to_the_window(generator):
    """Turns longer than the whole window are folded: the summarizer's prompt is cut to fit, never refused."""
    from rhea.context import Conversation, Turn
    from rhea.context.budget import CUT_MARKER
    from rhea.policies.summary import RollingSummary, fitted_summarizer_messages

    long = " ".join(_WORDS[i % len(_WORDS)] for i in range(generator.window))
    turns = [Turn(f"{k}: {long}", f"reply {k}: {long}") for k in range(3)]
    messages = fitted_summarizer_messages(generator, "", turns, 16)
    assert generator.count_prompt_tokens(messages) <= generator.prompt_room(16)
    assert CUT_MARKER.split("{n}")[0] in messages[-1]["content"]  # cut visibly, not silently
    assert messages[-1]["content"].count(CUT_MARKER.split("{n}")[0]) == 6  # each long text gave way, none dropped
    short = [Turn("my cat is Tom", "nice")]
    assert fitted_summarizer_messages(generator, "", short, 16) == \
        __import__("rhea.policies.summary", fromlist=["x"]).summarizer_messages("", short)  # what fits is unchanged

    calls = []
    real = generator.generate
    generator.generate = lambda messages, **kw: calls.append(generator.count_prompt_tokens(messages)) or real(messages, **kw)
    try:
        policy = RollingSummary(generator, every=2, max_summary_tokens=16)
        conversation = Conversation(turns)
        for turn in turns:
            policy.observe(turn)
        plan = policy.build(conversation, "what was said?")
    finally:
        del generator.generate
    assert calls and all(n <= generator.prompt_room(16) for n in calls)
    assert policy.summarized == 2 and plan.decisions.turns[0].tier == "drop"
