"""HFGenerator.continuation_logprobs: one prefill, the candidates as one right-padded batch,
scores equal to scoring each ``prompt + c`` by a full forward of its own."""
import functools

import pytest
import torch

from rhea.backends.llm import HFGenerator, _common_prefix
from rhea.errors import RheaConfigError
from rhea.testing import tiny_llama, tiny_tokenizer

PROMPT = "the cat is blue and the dog is red. Rating: [["
CANDIDATES = [f"{k}]]" for k in range(1, 11)] + ["", "blue cat and red dog]]"]


@pytest.fixture(scope="module")
def gen():
    tok = tiny_tokenizer()
    return HFGenerator(tiny_llama(len(tok)).eval(), tok)


def _reference(gen, prompt, continuations):
    """log p(c | prompt) from one full forward per candidate, over the tokens after the shared prefix."""
    enc = lambda text: list(gen.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    full = [enc(prompt + c) for c in continuations]
    p = enc(prompt)
    shared = min(min(_common_prefix(p, ids) for ids in full), min(_common_prefix(full[0], ids) for ids in full))
    out = []
    for ids in full:
        with torch.no_grad():
            logp = torch.log_softmax(gen.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        out.append(float(sum(logp[t - 1, ids[t]] for t in range(shared, len(ids)))))
    return out, shared


def test_batched_scores_equal_a_full_forward_per_candidate(gen):
    scores, read = gen.continuation_logprobs(PROMPT, CANDIDATES)
    ref, shared = _reference(gen, PROMPT, CANDIDATES)
    assert scores == pytest.approx(ref, abs=1e-4)
    assert scores[CANDIDATES.index("")] == 0.0 or len(gen.tokenizer(PROMPT)["input_ids"]) > shared
    assert read >= shared + len(CANDIDATES) - 1


def test_one_by_one_on_request_or_for_a_cache_that_cannot_repeat_gives_the_same_scores(gen, monkeypatch):
    batched, _ = gen.continuation_logprobs(PROMPT, CANDIDATES)
    from transformers import DynamicCache
    owner = next(c for c in DynamicCache.__mro__ if "batch_repeat_interleave" in vars(c))
    monkeypatch.delattr(owner, "batch_repeat_interleave")
    assert not hasattr(DynamicCache(), "batch_repeat_interleave")
    assert gen.continuation_logprobs(PROMPT, CANDIDATES)[0] == pytest.approx(batched, abs=1e-4)
    monkeypatch.undo()
    assert gen.continuation_logprobs(PROMPT, CANDIDATES, batch=False)[0] == pytest.approx(batched, abs=1e-4)


def test_one_candidate_and_errors(gen):
    (one,), _ = gen.continuation_logprobs(PROMPT, ["7]]"])
    assert one == pytest.approx(_reference(gen, PROMPT, ["7]]"])[0][0], abs=1e-4)
    with pytest.raises(RheaConfigError, match="at least one continuation"):
        gen.continuation_logprobs(PROMPT, [])


def test_the_prefill_computes_the_last_position_logits_only(gen, monkeypatch):
    from rhea.backends.llm import _last_logits_only

    assert _last_logits_only(gen.model) == {"logits_to_keep": 1}
    seen = []
    forward = type(gen.model).forward

    @functools.wraps(forward)  # keeps the signature the check reads
    def spy(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        seen.append(tuple(out.logits.shape))
        return out

    monkeypatch.setattr(type(gen.model), "forward", spy)
    gen.continuation_logprobs(PROMPT, CANDIDATES)
    assert seen[0][1] == 1  # the shared prefix: one position's logits, not one per prompt token


def test_a_prefix_cached_generator_scores_the_same_and_reuses_the_transcript(gen):
    from rhea.backends.chat_template import apply_chat_template

    cached = HFGenerator(gen.model, gen.tokenizer, prefix_cache=True)
    plain = HFGenerator(gen.model, gen.tokenizer)
    messages = [{"role": "user", "content": "the cat is blue and the dog is red " * 3}]
    for step in range(3):
        prompt = apply_chat_template(gen.tokenizer, messages)
        before = cached.cached_prompt_tokens
        scores, _ = cached.continuation_logprobs(prompt + "Rating: [[", CANDIDATES)
        assert scores == pytest.approx(plain.continuation_logprobs(prompt + "Rating: [[", CANDIDATES)[0], abs=1e-4)
        if step:  # the transcript up to this turn came from the kept cache
            assert cached.cached_prompt_tokens - before > 16
        assert cached._cache.get_seq_length() == len(cached._cache_ids)
        before = cached.cached_prompt_tokens
        # the reply that follows reads the scored prompt from the cache, and equals an uncached reply
        reply = cached.generate(messages, max_new_tokens=3)
        assert reply == plain.generate(messages, max_new_tokens=3)
        assert cached.cached_prompt_tokens - before > 16
        messages = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": f"and {step}?"}]
