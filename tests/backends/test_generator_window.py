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
