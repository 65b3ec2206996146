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
        weights = model._merged_cache["generate"][1]
        with model.adapter("generate"), model.merged("generate"):
            pass
        assert model._merged_cache["generate"][1] is weights  # reused, not recomputed
        lora_b = next(p for n, p in model.peft_model.named_parameters() if "lora_B.generate" in n)
        lora_b.add_(0.5)  # what an optimizer step does: in place
        with model.adapter("generate"):
            expected = model.peft_model(input_ids=ids).logits
            with model.merged("generate"):
                after = model.peft_model(input_ids=ids).logits
    assert model._merged_cache["generate"][1] is not weights
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
