"""RheaConfig.latent_injection: how latents enter the generate pass, saved and reloaded with the adapters."""
import json

import pytest
import torch

from rhea.errors import CheckpointError, RheaConfigError
from rhea.modeling import RheaConfig, RheaForCausalLM
from rhea.modeling.rhea_model import INJECTOR_WEIGHTS_NAME, LatentInjector
from rhea.testing import tiny_llama, tiny_rhea, tiny_tokenizer


def _ids(model, prefix=(5, 6)):
    return torch.tensor([list(prefix) + [model.mem_token_id] * model.n_mem + [7]])


def test_default_is_raw_and_injects_hidden_states_unchanged():
    model = tiny_rhea()
    assert model.config.latent_injection == "raw" and model.latent_injector is None
    lat = torch.randn(1, model.n_mem, model.hidden_size) * 50
    emb = model.embed_with_latents(_ids(model), lat)
    torch.testing.assert_close(emb[0, 2:2 + model.n_mem], lat[0])


@pytest.mark.parametrize("mode", ["norm", "projector"])
def test_norm_modes_centre_and_rescale_to_embedding_norm(mode):
    model = tiny_rhea(latent_injection=mode)
    inj = model.latent_injector
    vocab = model.base_model.get_input_embeddings().weight[: model.config.base_vocab_size]
    assert float(inj.target_norm) == pytest.approx(float(vocab.norm(dim=-1).mean()), rel=1e-5)
    common = torch.randn(model.hidden_size) * 40
    lat = common + torch.randn(1, model.n_mem, model.hidden_size)
    inj.fit_center(lat)
    torch.testing.assert_close(inj.center.detach(), lat.reshape(-1, model.hidden_size).mean(0))
    with torch.no_grad():
        rows = model.embed_with_latents(_ids(model), lat)[0, 2:2 + model.n_mem]
    expected = (lat[0] - inj.center.detach())
    expected = expected / expected.norm(dim=-1, keepdim=True) * inj.target_norm
    torch.testing.assert_close(rows, expected, rtol=1e-4, atol=1e-5)  # projector starts at the identity
    # the common component is gone: slots are no longer one direction
    cos = torch.nn.functional.cosine_similarity(rows[0], rows[1], dim=0)
    assert abs(float(cos)) < 0.9


def test_injector_is_trained_by_the_generate_loss():
    model = tiny_rhea(latent_injection="projector")
    lat = model.compress(["the cat is blue"])
    out = model(input_ids=_ids(model), latent_embeds=lat, labels=_ids(model))
    out.loss.backward()
    assert model.latent_injector.center.grad is not None and model.latent_injector.proj.weight.grad.abs().sum() > 0
    assert model.mem_slot_embeds.grad is not None
    assert any(p is model.latent_injector.proj.weight for p in model.trainable_parameters())


@pytest.mark.parametrize("mode", ["norm", "projector"])
def test_save_and_reload_keep_the_injector(tmp_path, mode):
    model = tiny_rhea(latent_injection=mode)
    with torch.no_grad():
        model.latent_injector.center.normal_()
        if model.latent_injector.proj is not None:
            model.latent_injector.proj.weight.add_(torch.randn_like(model.latent_injector.proj.weight) * 0.1)
    model.config.fidelity = {"reconstruction_token_acc": 0.5, "control_gap": 0.1, "measured_on": "x", "n": 3}
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "rhea_config.json").read_text())
    assert saved["latent_injection"] == mode and saved["fidelity"]["n"] == 3
    assert (tmp_path / INJECTOR_WEIGHTS_NAME).is_file()
    tok = tiny_tokenizer()
    again = RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))
    assert again.config.latent_injection == mode and again.config.fidelity["control_gap"] == 0.1
    lat = torch.randn(1, model.n_mem, model.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(again.embed_with_latents(_ids(again), lat), model.embed_with_latents(_ids(model), lat))


def test_old_directories_without_the_option_load_as_raw(tmp_path):
    model = tiny_rhea()
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "rhea_config.json").read_text())
    del cfg["latent_injection"], cfg["fidelity"]  # as written before the options existed
    (tmp_path / "rhea_config.json").write_text(json.dumps(cfg))
    tok = tiny_tokenizer()
    again = RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))
    assert again.latent_injector is None and again.config.fidelity is None
    assert not (tmp_path / INJECTOR_WEIGHTS_NAME).exists()


def test_missing_or_mismatched_injector_file_is_a_checkpoint_error(tmp_path):
    model = tiny_rhea(latent_injection="projector")
    model.save_pretrained(tmp_path)
    tok = tiny_tokenizer()
    (tmp_path / INJECTOR_WEIGHTS_NAME).unlink()
    with pytest.raises(CheckpointError, match="latent_injector.safetensors is missing"):
        RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))
    # a "norm" file where the config says "projector"
    tiny_rhea(latent_injection="norm").save_pretrained(tmp_path / "n")
    import shutil

    shutil.copy(tmp_path / "n" / INJECTOR_WEIGHTS_NAME, tmp_path / INJECTOR_WEIGHTS_NAME)
    with pytest.raises(CheckpointError, match="do not match"):
        RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))


def test_config_validation():
    with pytest.raises(RheaConfigError, match="latent_injection"):
        RheaConfig(latent_injection="mlp")
    with pytest.raises(RheaConfigError, match="fidelity"):
        RheaConfig(fidelity={"reconstruction_token_acc": "high"})
    with pytest.raises(RheaConfigError, match="mode"):
        LatentInjector(4, "raw", 1.0)
