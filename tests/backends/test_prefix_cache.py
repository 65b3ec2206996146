"""HFGenerator(prefix_cache=True): an agent's next step prefills only what its transcript adds,
and replies are the ones a full prefill gives."""
import pytest
import torch

from rhea.backends.llm import HFGenerator
from rhea.testing import tiny_llama, tiny_rhea, tiny_tokenizer

WORDS = "the cat is blue and the dog is red while paris is the capital of france".split()


def _transcript(steps: int) -> list[list[dict]]:
    """Prompts of a tool loop: each re-sends the previous one plus a reply and a tool result."""
    msgs = [{"role": "system", "content": " ".join(WORDS * 3)}, {"role": "user", "content": "what is the cat"}]
    out = [list(msgs)]
    for i in range(steps - 1):
        msgs = msgs + [{"role": "assistant", "content": " ".join(WORDS[i:i + 4])},
                       {"role": "user", "content": " ".join(WORDS[i + 2:i + 9])}]
        out.append(list(msgs))
    return out


@pytest.fixture(scope="module")
def model_and_tok():
    tok = tiny_tokenizer()
    return tiny_llama(len(tok)).eval(), tok


def test_greedy_replies_equal_a_full_prefill_and_the_prefix_is_reused(model_and_tok):
    model, tok = model_and_tok
    plain, cached = HFGenerator(model, tok), HFGenerator(model, tok, prefix_cache=True)
    for prompt in _transcript(5):
        assert cached.generate(prompt, max_new_tokens=6) == plain.generate(prompt, max_new_tokens=6)
    assert cached.prompt_tokens == plain.prompt_tokens and cached.completion_tokens == plain.completion_tokens
    # every step after the first re-read at least the whole system prompt from the cache
    assert cached.cached_prompt_tokens > 4 * len(WORDS) * 3


def test_an_unrelated_prompt_starts_over_and_a_shorter_one_crops(model_and_tok):
    model, tok = model_and_tok
    plain, cached = HFGenerator(model, tok), HFGenerator(model, tok, prefix_cache=True)
    steps = _transcript(3)
    for prompt in [steps[2], [{"role": "user", "content": "paris"}], steps[0], steps[1]]:
        assert cached.generate(prompt, max_new_tokens=5) == plain.generate(prompt, max_new_tokens=5)
    assert cached._cache is not None and cached._cache.get_seq_length() == len(cached._cache_ids)


def test_sampled_rows_share_the_prefix_and_keep_it(model_and_tok):
    model, tok = model_and_tok
    gen = HFGenerator(model, tok, prefix_cache=True, seed=3)
    steps = _transcript(2)
    gen.generate(steps[0], max_new_tokens=4)
    kept = gen._cache.get_seq_length()
    before = gen.cached_prompt_tokens
    rows = gen.generate_many(steps[1], 3, max_new_tokens=4, temperature=0.8)
    assert len(rows) == 3 and gen.cached_prompt_tokens > before
    assert gen._cache.get_seq_length() <= kept  # the kept cache is still the shared prefix, one row


def test_reset_and_errors_drop_the_cache(model_and_tok):
    model, tok = model_and_tok
    gen = HFGenerator(model, tok, prefix_cache=True)
    gen.generate(_transcript(1)[0], max_new_tokens=3)
    gen.reset_prefix_cache()
    assert gen._cache is None and gen._cache_ids == []
    gen.generate(_transcript(1)[0], max_new_tokens=3)
    with pytest.raises(Exception):
        gen.generate(_transcript(2)[1], max_new_tokens=3, stop=[123])  # a bad stop string fails inside generate
    assert gen._cache is None


def test_a_rhea_model_with_adapters_off(model_and_tok):
    model = tiny_rhea().eval()
    plain, cached = HFGenerator(model), HFGenerator(model, prefix_cache=True)
    for prompt in _transcript(3):
        assert cached.generate(prompt, max_new_tokens=4) == plain.generate(prompt, max_new_tokens=4)
    assert cached.cached_prompt_tokens > 0
