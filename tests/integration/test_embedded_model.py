"""Integration: the embedded SmolLM2-135M-Instruct (converted once into the rhea cache)."""
import pytest
import torch

from rhea.context import ContextPlan, Latent, render
from rhea.session.generation import generate_from_plan

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]


@pytest.fixture(scope="module")
def default_model():
    from rhea import load_default_model

    model, tok = load_default_model()
    return model.eval(), tok


def test_load_compress_generate_with_latents_round_trip(default_model, tmp_path):
    from rhea import RheaForCausalLM

    model, tok = default_model
    n = model.n_mem  # the shipped adapters' slot count (rhea_config.json)
    assert model.hidden_size == 576 and n >= 8
    assert tok.convert_tokens_to_ids("<mem>") == model.mem_token_id
    reply = "Pack light layers, a rain jacket and comfortable walking shoes for the hills."
    with torch.no_grad():
        latents = model.compress([reply, "Sintra and Cascais are easy day trips."])
    assert latents.shape == (2, n, model.latent_width) and torch.isfinite(latents).all()

    plan = ContextPlan([
        {"role": "user", "content": "What should I pack for Lisbon?"},
        {"role": "assistant", "content": [Latent(latents[0], 0)]},
        {"role": "user", "content": "Which shoes did you suggest?"},
    ])
    rendered = render(plan, tok)
    assert int((rendered.input_ids == model.mem_token_id).sum()) == n
    gen = generate_from_plan(model, plan, max_new_tokens=8)
    assert gen.new_tokens >= 1 and gen.latent_slots == n and isinstance(gen.text, str)

    model.save_pretrained(tmp_path / "rhea")
    loaded = RheaForCausalLM.from_pretrained(tmp_path / "rhea")  # base resolved from the zoo name
    assert loaded.config.base_model == "smollm2-135m"
    with torch.no_grad():
        a = model(rendered.input_ids, latent_embeds=rendered.latent_embeds).logits
        b = loaded(rendered.input_ids, latent_embeds=loaded.compress([reply])).logits
    assert torch.equal(a, b)
