import json

import pytest
import torch

from rhea.errors import CheckpointError, CorruptedCheckpointError, LatentMismatchError, RheaConfigError
from rhea.modeling import RheaConfig, RheaForCausalLM
from rhea.modeling.checkpoint import MANIFEST_NAME
from rhea.testing import tiny_llama, tiny_rhea, tiny_tokenizer


def _lora_grads(model, adapter):
    return [p.grad for n, p in model.named_parameters() if f"lora_A.{adapter}" in n or f"lora_B.{adapter}" in n]


def test_compress_shape_and_dtype(tiny_model):
    lat = tiny_model.compress(["the cat is blue", "paris", ""])
    assert lat.shape == (3, tiny_model.n_mem, tiny_model.hidden_size)
    assert lat.dtype == torch.float32 and torch.isfinite(lat).all()


def test_compress_batched_equals_unbatched(tiny_model):
    texts = ["the capital of france is paris and the weather is blue", "a dog", "one two three"]
    with torch.no_grad():
        batched = tiny_model.compress(texts)
        single = torch.cat([tiny_model.compress([t]) for t in texts])
        chunked = tiny_model.compress(texts, batch_size=2)
    torch.testing.assert_close(batched, single, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunked, single, rtol=1e-5, atol=1e-5)


def test_compress_differs_by_content_and_adapter(tiny_model):
    with torch.no_grad():
        a, b = tiny_model.compress(["the cat is blue", "paris is a city"])
        with tiny_model.disable_adapters():
            plain = tiny_model.compress(["the cat is blue"])[0]
    assert not torch.allclose(a, b)
    assert not torch.allclose(a, plain)  # the compress adapter changes the read-out


def test_literal_mem_in_text_is_not_a_slot(tiny_model):
    # "<mem>" inside a reply is plain text to the compressor, never an extra read-out slot
    with torch.no_grad():
        lat = tiny_model.compress(["the <mem> cat"])
    assert lat.shape == (1, tiny_model.n_mem, tiny_model.hidden_size)


def test_gradients_reach_both_adapters_and_slots_in_one_graph():
    model = tiny_rhea().train()
    latents = model.compress(["the cat is blue", "paris is the capital"])
    n = model.n_mem
    tok = model.tokenizer
    ids = tok("what is the", add_special_tokens=False, return_tensors="pt").input_ids
    mem = torch.full((1, 2 * n), model.mem_token_id)
    input_ids = torch.cat([mem, ids], dim=1)
    out = model(input_ids, latent_embeds=latents, labels=input_ids)
    out.loss.backward()
    for adapter in ("compress", "generate"):
        grads = _lora_grads(model, adapter)
        assert grads and all(g is not None for g in grads), adapter
        assert sum(g.abs().sum() for g in grads) > 0, adapter
    assert model.mem_slot_embeds.grad is not None and model.mem_slot_embeds.grad.abs().sum() > 0
    # the base stays frozen
    assert all(not p.requires_grad for n_, p in model.named_parameters() if "lora_" not in n_ and n_ != "mem_slot_embeds")


def test_adapter_switch_keeps_requires_grad(tiny_model):
    before = {n: p.requires_grad for n, p in tiny_model.named_parameters()}
    with tiny_model.adapter("compress"):
        assert tiny_model.peft_model.active_adapter == "compress"
        inside = {n: p.requires_grad for n, p in tiny_model.named_parameters()}
    assert inside == before
    assert {n: p.requires_grad for n, p in tiny_model.named_parameters()} == before
    with pytest.raises(ValueError, match="not one of"):
        with tiny_model.adapter("nope"):
            pass


def test_nested_adapter_blocks_restore_what_was_active(tiny_model):
    """The active adapter is read from the LoRA layers, so an inner block of the same adapter
    leaves it active for the rest of the outer block (it used to fall back to the default)."""
    start = tiny_model.active_adapter_name
    other = "generate" if start == "compress" else "compress"
    with tiny_model.adapter(other):
        with tiny_model.adapter(other):
            pass
        assert tiny_model.active_adapter_name == other
        with tiny_model.adapter(start):
            assert tiny_model.active_adapter_name == start
        assert tiny_model.active_adapter_name == other
    assert tiny_model.active_adapter_name == start


def test_placeholder_merge_equals_manual_inputs_embeds(tiny_model):
    n, mem = tiny_model.n_mem, tiny_model.mem_token_id
    ids = torch.tensor([[7, 8] + [mem] * n + [9, 10] + [mem] * n + [11]])
    latents = torch.randn(2, n, tiny_model.hidden_size)
    emb = tiny_model.base_model.get_input_embeddings()(ids).clone()
    emb[0, 2 : 2 + n] = latents[0]
    emb[0, 4 + n : 4 + 2 * n] = latents[1]
    merged = tiny_model.embed_with_latents(ids, latents)
    torch.testing.assert_close(merged, emb)
    with torch.no_grad():
        a = tiny_model(ids, latent_embeds=latents).logits
        with tiny_model.adapter("generate"):
            b = tiny_model.peft_model(inputs_embeds=emb).logits
    torch.testing.assert_close(a, b)


def test_batch_left_padding_matches_single_rows(tiny_model):
    n, mem, pad = tiny_model.n_mem, tiny_model.mem_token_id, tiny_model.tokenizer.pad_token_id
    lat = torch.randn(2, n, tiny_model.hidden_size)
    row0 = [7] + [mem] * n + [9, 10, 11]
    row1 = [8] + [mem] * n
    width = len(row0)
    ids = torch.tensor([row0, [pad] * (width - len(row1)) + row1])
    mask = (ids != pad).long()
    with torch.no_grad():
        batch = tiny_model(ids, latent_embeds=lat, attention_mask=mask).logits
        one = tiny_model(torch.tensor([row0]), latent_embeds=lat[:1]).logits
        two = tiny_model(torch.tensor([row1]), latent_embeds=lat[1:]).logits
        gen_batch = tiny_model.generate(ids, latent_embeds=lat, attention_mask=mask, max_new_tokens=4, do_sample=False)
        gen_two = tiny_model.generate(torch.tensor([row1]), latent_embeds=lat[1:], max_new_tokens=4, do_sample=False)
    torch.testing.assert_close(batch[0], one[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(batch[1, -len(row1):], two[0], rtol=1e-4, atol=1e-4)
    assert gen_batch[1, -4:].tolist() == gen_two[0, -4:].tolist()


def test_latent_count_mismatch_raises(tiny_model):
    n, mem = tiny_model.n_mem, tiny_model.mem_token_id
    ids = torch.tensor([[7] + [mem] * n])
    with pytest.raises(LatentMismatchError, match=f"{n} <mem> placeholders but latent_embeds has {n + 1} rows"):
        tiny_model(ids, latent_embeds=torch.randn(n + 1, tiny_model.hidden_size))
    with pytest.raises(LatentMismatchError, match="no latent_embeds were given"):
        tiny_model(ids)
    with pytest.raises(LatentMismatchError, match="width"):
        tiny_model(ids, latent_embeds=torch.randn(n, tiny_model.hidden_size + 1))


def test_generate_uses_latents_and_never_emits_mem(tiny_model):
    n, mem = tiny_model.n_mem, tiny_model.mem_token_id
    ids = torch.tensor([[7] + [mem] * n + [9]])
    a = tiny_model.generate(ids, latent_embeds=torch.randn(n, tiny_model.hidden_size), max_new_tokens=12, do_sample=False)
    assert a.shape == (1, ids.shape[1] + 12) and torch.equal(a[:, : ids.shape[1]], ids)
    assert (a[:, ids.shape[1]:] != mem).all()
    # the mem row is biased to be emitted; suppression must still hold
    with torch.no_grad():
        tiny_model.base_model.get_output_embeddings().weight[mem] *= 1000
    b = tiny_model.generate(ids, latent_embeds=torch.randn(n, tiny_model.hidden_size), max_new_tokens=6, do_sample=False)
    assert (b[:, ids.shape[1]:] != mem).all()


def test_mem_rows_initialised_to_vocab_mean_deterministically():
    m1, m2 = tiny_rhea(), tiny_rhea()
    base = tiny_llama(len(tiny_tokenizer()))
    mean = base.get_input_embeddings().weight.mean(0)
    torch.testing.assert_close(m1.base_model.get_input_embeddings().weight[m1.mem_token_id], mean)
    torch.testing.assert_close(m1.mem_slot_embeds.detach(), mean.expand(m1.n_mem, -1))
    assert torch.equal(m1.mem_slot_embeds, m2.mem_slot_embeds)


def test_save_load_round_trip_bit_exact(tmp_path):
    model = tiny_rhea()
    with torch.no_grad():
        model.mem_slot_embeds.add_(torch.randn_like(model.mem_slot_embeds))
    model.save_pretrained(tmp_path / "m")
    files = {p.name for p in (tmp_path / "m").iterdir()}
    assert {"rhea_config.json", "mem_tokens.safetensors", "compress", "generate", "tokenizer"} <= files
    loaded = RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=tiny_llama(len(tiny_tokenizer())))
    n, mem = model.n_mem, model.mem_token_id
    with torch.no_grad():
        la = model.compress(["the cat is blue"])
        lb = loaded.compress(["the cat is blue"])
        ids = torch.tensor([[7] + [mem] * n + [9, 10]])
        a = model(ids, latent_embeds=la).logits
        b = loaded(ids, latent_embeds=lb).logits
    assert torch.equal(la, lb) and torch.equal(a, b)
    assert loaded.config.to_dict() == model.config.to_dict()
    assert loaded.mem_token_id == mem


def test_load_onto_wrong_base_raises(tmp_path):
    tiny_rhea().save_pretrained(tmp_path / "m")
    vocab = len(tiny_tokenizer())
    with pytest.raises(CheckpointError, match="hidden size 48"):
        RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=tiny_llama(vocab, hidden_size=48))
    with pytest.raises(CheckpointError, match="embedding rows"):
        RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=tiny_llama(vocab + 7))


def test_missing_and_corrupted_files_raise(tmp_path):
    tiny_rhea().save_pretrained(tmp_path / "m")
    base = lambda: tiny_llama(len(tiny_tokenizer()))  # noqa: E731
    with pytest.raises(CheckpointError, match="not a directory"):
        RheaForCausalLM.from_pretrained(tmp_path / "nope", base_model=base())
    (tmp_path / "m" / "mem_tokens.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CorruptedCheckpointError, match="mem_tokens.safetensors has 8 bytes"):
        RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=base())
    (tmp_path / "m" / MANIFEST_NAME).unlink()  # a save without digests: each file's own check still names it
    with pytest.raises(CheckpointError, match="corrupted"):
        RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=base())
    (tmp_path / "m" / "mem_tokens.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing"):
        RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=base())
    (tmp_path / "m" / "rhea_config.json").write_text("{not json")
    with pytest.raises(RheaConfigError, match="not valid JSON"):
        RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=base())


def test_corrupted_adapter_raises(tmp_path):
    """Without a manifest (which would name the file first), a broken adapter file is named by its adapter."""
    tiny_rhea().save_pretrained(tmp_path / "m")
    (tmp_path / "m" / MANIFEST_NAME).unlink()
    (tmp_path / "m" / "generate" / "adapter_model.safetensors").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="the 'generate' LoRA adapter in .*generate could not be loaded"):
        RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=tiny_llama(len(tiny_tokenizer())))
    tiny_rhea().save_pretrained(tmp_path / "c")
    (tmp_path / "c" / MANIFEST_NAME).unlink()
    (tmp_path / "c" / "compress" / "adapter_model.safetensors").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="the 'compress' LoRA adapter"):
        RheaForCausalLM.from_pretrained(tmp_path / "c", base_model=tiny_llama(len(tiny_tokenizer())))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_mem": 0}, "n_mem=0"),
        ({"tau_low": 0.9, "tau_high": 0.8}, "tau_low=0.9 must be <= tau_high=0.8"),
        ({"tau_high": 1.5}, "tau_high=1.5"),
        ({"lora_r": 0}, "lora_r=0"),
        ({"lora_dropout": 1.0}, "lora_dropout=1.0"),
        ({"anchor_bias": -1.0}, "anchor_bias=-1.0"),
        ({"target_modules": []}, "target_modules"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(RheaConfigError, match=match):
        RheaConfig(**kwargs)


def test_config_unknown_field(tmp_path):
    with pytest.raises(RheaConfigError, match="unknown RheaConfig field"):
        RheaConfig.from_dict({"n_mem": 8, "tau_lo": 0.3})
    RheaConfig(n_mem=3).save(tmp_path)
    assert json.loads((tmp_path / "rhea_config.json").read_text())["n_mem"] == 3


def test_compress_bad_input(tiny_model):
    with pytest.raises(TypeError, match="list of strings"):
        tiny_model.compress("a single string")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        tiny_model.compress(["ok", 3])
    too_long = " ".join(["cat"] * 600)  # tiny model context is 512
    with pytest.raises(ValueError, match="exceeds the model's context"):
        tiny_model.compress([too_long])


def test_fast_adapter_switch_runs_what_pefts_set_adapter_runs(tiny_model):
    """`adapter()` sets the LoRA layers' active adapter directly (PEFT's set_adapter walks every
    parameter); the forward pass must be the one PEFT's own switch gives, for each adapter."""
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    start = tiny_model.active_adapter_name
    before = {n: p.requires_grad for n, p in tiny_model.named_parameters()}
    for name in ("generate", "compress"):
        with torch.no_grad(), tiny_model.adapter(name):
            assert tiny_model.active_adapter_name == name
            assert all(layer.active_adapters == [name] for layer in tiny_model.lora_adapters.tuner_layers())
            fast = tiny_model.peft_model(input_ids=ids).logits
        tiny_model.peft_model.base_model.set_adapter(name)
        with torch.no_grad():
            slow = tiny_model.peft_model(input_ids=ids).logits
        tiny_model.peft_model.base_model.set_adapter(start)
        for n, p in tiny_model.named_parameters():
            p.requires_grad_(before[n])
        assert torch.equal(fast, slow), name
    assert tiny_model.active_adapter_name == start
    assert {n: p.requires_grad for n, p in tiny_model.named_parameters()} == before


def test_a_cached_step_with_the_full_mask_equals_the_full_forward():
    """forward(cache=..., attention_mask=<past + new>) without position_ids: the new tokens take the mask's last
    positions (left padding ignored), as a full forward gives them."""
    model = tiny_rhea().eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (2, 14), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # a left-padded row
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask).logits
        first = model(input_ids=ids[:, :9], attention_mask=mask[:, :9], use_cache=True)
        past = first.cache if getattr(first, "cache", None) is not None else first.past_key_values
        keyword = "cache" if getattr(first, "cache", None) is not None else "past_key_values"
        step = model(input_ids=ids[:, 9:], attention_mask=mask, use_cache=True, **{keyword: past}).logits
    torch.testing.assert_close(step, full[:, 9:], atol=1e-5, rtol=1e-5)
