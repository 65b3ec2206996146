"""HFGenerator.generate_batch / generate_rows: several generators' greedy replies decoded as one
left-padded batch equal their one-by-one replies, and each generator is charged its own tokens."""
import pytest

from rhea.backends.llm import HFGenerator, ScriptedGenerator, generate_rows
from rhea.errors import RheaConfigError
from rhea.testing import tiny_llama, tiny_rhea, tiny_tokenizer

PROMPTS = [
    [{"role": "user", "content": "the cat is blue"}],
    [{"role": "system", "content": "be brief and kind to every user who writes"},
     {"role": "user", "content": "what is the capital of france and why is it there"}],
    [{"role": "user", "content": "red"}],
]


@pytest.fixture(scope="module")
def model_and_tok():
    tok = tiny_tokenizer()
    return tiny_llama(len(tok)).eval(), tok


def test_a_batch_equals_one_by_one_and_charges_each_generator(model_and_tok):
    model, tok = model_and_tok
    alone = [HFGenerator(model, tok) for _ in PROMPTS]
    together = [HFGenerator(model, tok) for _ in PROMPTS]
    expected = [g.generate(p, max_new_tokens=7) for g, p in zip(alone, PROMPTS)]
    got = HFGenerator.generate_batch(together, PROMPTS, max_new_tokens=7)
    assert got == expected
    assert [g.prompt_tokens for g in together] == [g.prompt_tokens for g in alone]  # padding is not billed
    assert [g.completion_tokens for g in together] == [g.completion_tokens for g in alone]
    assert len({g.prompt_tokens for g in together}) == 3  # the rows really differ in length


def test_a_rhea_model_batches_with_its_adapters_off_as_generate_does():
    model = tiny_rhea().eval()
    gens = [HFGenerator(model) for _ in PROMPTS]
    assert HFGenerator.generate_batch(gens, PROMPTS, max_new_tokens=5) == \
        [HFGenerator(model).generate(p, max_new_tokens=5) for p in PROMPTS]


def test_generators_that_cannot_share_a_batch_are_refused_or_grouped(model_and_tok):
    model, tok = model_and_tok
    other = tiny_llama(len(tok)).eval()
    a, b = HFGenerator(model, tok), HFGenerator(other, tok)
    with pytest.raises(RheaConfigError, match="share one model"):
        HFGenerator.generate_batch([a, b], PROMPTS[:2])
    with pytest.raises(RheaConfigError, match="one generator per conversation"):
        HFGenerator.generate_batch([a], PROMPTS[:2])
    # generate_rows groups by model, and a generator of another kind answers on its own, in order
    scripted = ScriptedGenerator(["scripted"])
    rows = generate_rows([a, scripted, b, HFGenerator(model, tok)], [PROMPTS[0], PROMPTS[1], PROMPTS[1], PROMPTS[2]],
                         max_new_tokens=4)
    assert rows[1] == "scripted" and scripted.calls == [PROMPTS[1]]
    assert rows[0] == HFGenerator(model, tok).generate(PROMPTS[0], max_new_tokens=4)
    assert rows[2] == HFGenerator(other, tok).generate(PROMPTS[1], max_new_tokens=4)
    assert rows[3] == HFGenerator(model, tok).generate(PROMPTS[2], max_new_tokens=4)
