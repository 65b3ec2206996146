"""Merged decoding: the generate LoRA folded into cached weights gives the adapter's outputs."""
import pytest
import torch

from rhea.testing import tiny_rhea


@pytest.fixture
def model():
    torch.manual_seed(0)
    return tiny_rhea().eval()


def _ids(model):
    return torch.tensor([[5, 9, 17, 23, 4, 11]])


def test_merged_forward_equals_the_adapter_and_leaves_the_base_untouched(model):
    ids = _ids(model)
    base_weights = {n: p.detach().clone() for n, p in model.peft_model.named_parameters() if "base_layer" in n}
    ptrs = {n: p.data_ptr() for n, p in model.peft_model.named_parameters() if "base_layer" in n}
    with torch.no_grad():
        with model.adapter("generate"):
            lora = model.peft_model(input_ids=ids).logits
            with model.merged("generate"):
                merged = model.peft_model(input_ids=ids).logits
        with model.disable_adapters():
            plain = model.peft_model(input_ids=ids).logits
    assert (lora - plain).abs().max() > 1e-3  # the adapter changes the outputs...
    torch.testing.assert_close(merged, lora, atol=1e-5, rtol=1e-5)  # ...and merging keeps that change
    for n, p in model.peft_model.named_parameters():
        if "base_layer" in n:
            assert p.data_ptr() == ptrs[n] and torch.equal(p, base_weights[n])


def test_generate_with_decode_merged_gives_the_same_tokens_and_compress_is_unaffected(model):
    ids = _ids(model)
    kw = dict(max_new_tokens=6, do_sample=False)
    latents_before = model.compress(["the cat sat on the mat"]).detach()
    plain = model.generate(ids, **kw)
    active = model.active_adapter_name
    model.decode_merged = True
    merged = model.generate(ids, **kw)
    assert torch.equal(plain, merged)
    assert model.active_adapter_name == active  # the adapter state is back as it was
    torch.testing.assert_close(model.compress(["the cat sat on the mat"]).detach(), latents_before)


def test_the_merged_copy_is_cached_and_rebuilt_when_the_adapter_changes(model):
    ids = _ids(model)
    with torch.no_grad():
        with model.adapter("generate"), model.merged("generate"):
            first = model.peft_model(input_ids=ids).logits
        weights = model.lora_adapters.merged_cache["generate"][1]
        with model.adapter("generate"), model.merged("generate"):
            pass
        assert model.lora_adapters.merged_cache["generate"][1] is weights  # reused, not recomputed
        lora_b = next(p for n, p in model.peft_model.named_parameters() if "lora_B.generate" in n)
        lora_b.add_(0.5)  # what an optimizer step does: in place
        with model.adapter("generate"):
            expected = model.peft_model(input_ids=ids).logits
            with model.merged("generate"):
                after = model.peft_model(input_ids=ids).logits
    assert model.lora_adapters.merged_cache["generate"][1] is not weights
    assert (after - first).abs().max() > 1e-4
    torch.testing.assert_close(after, expected, atol=1e-5, rtol=1e-5)


def test_an_error_inside_the_block_restores_the_weights(model):
    before = {n: p.data_ptr() for n, p in model.peft_model.named_parameters() if "base_layer" in n}
    with pytest.raises(RuntimeError, match="boom"):
        with model.merged("generate"):
            raise RuntimeError("boom")
    assert {n: p.data_ptr() for n, p in model.peft_model.named_parameters() if "base_layer" in n} == before
    with pytest.raises(ValueError, match="not one of"):
        with model.merged("nope"):
            pass


def test_the_lora_wrappers_leave_the_graph_inside_the_block_and_come_back(model):
    from peft.tuners.lora import LoraLayer

    def lora_count():
        return sum(isinstance(m, LoraLayer) for m in model.peft_model.modules())

    before = lora_count()
    assert before > 0
    with torch.no_grad(), model.adapter("generate"), model.merged("generate"):
        assert lora_count() == 0  # plain nn.Linear layers with the merged weights: no per-layer adapter code
        model.peft_model(input_ids=_ids(model))
    assert lora_count() == before
    with pytest.raises(RuntimeError), model.merged("generate"):
        raise RuntimeError("boom")
    assert lora_count() == before


def test_decode_merged_leaves_the_base_models_path_alone(model, monkeypatch):
    """Baselines generate inside `disable_adapters`: merged decoding must not fold the LoRA in there."""
    ids = _ids(model)
    kw = dict(max_new_tokens=4, do_sample=False)
    calls = []
    real = model.merged
    monkeypatch.setattr(model, "merged", lambda name="generate": calls.append(name) or real(name))
    model.decode_merged = True
    with model.disable_adapters():
        plain = model.generate(ids, **kw)
    assert calls == []  # the base model decoded, not a merged copy
    model.decode_merged = False
    with model.disable_adapters():
        assert torch.equal(model.generate(ids, **kw), plain)
    model.decode_merged = True
    model.generate(ids, **kw)
    assert calls == ["generate"]  # outside the block the merged copy serves


def test_decode_merged_defaults_to_cuda_only(model):
    assert model.decode_merged is None and not model.decodes_merged  # a CPU model
    model.decode_merged = True
    assert model.decodes_merged


def test_default_merges_on_cuda_only_where_the_copy_fits(model, monkeypatch):
    """decode_merged None on a GPU: merged while the copy takes at most half the free memory, else
    the LoRA branches, warned once; True forces it."""
    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("cuda")))
    need = sum(m.get_base_layer().weight.numel() * m.get_base_layer().weight.element_size()
               for m in model.lora_adapters.lora_layers("generate"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (4 * need, 8 * need))
    assert model.decodes_merged
    model.lora_adapters.fit_verdict = None
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (need, 8 * need))
    with pytest.warns(RuntimeWarning, match="merged decoding off"):
        assert not model.decodes_merged
    assert not model.decodes_merged  # decided once
    model.decode_merged = True
    assert model.decodes_merged


def test_default_never_raises_for_adapters_that_cannot_be_folded(model, monkeypatch):
    """On CUDA the default (None) decodes unmerged where the LoRA cannot be folded (DoRA, quantised bases)."""
    from rhea.errors import RheaConfigError

    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("cuda")))

    def refuse(name):
        raise RheaConfigError("not foldable")

    monkeypatch.setattr(model.lora_adapters, "lora_layers", refuse)
    assert not model.decodes_merged
