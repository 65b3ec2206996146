"""transformers hook on a tiny random Llama: sdpa parity, beta effect, left padding, KV cache."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

from rhea.backends.llm import cache_keyword  # noqa: E402
from rhea_kernels.hf import anchored_keys, register_anchored_attention  # noqa: E402


@pytest.fixture(scope="module")
def model():
    register_anchored_attention()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()


def logits(model, impl, ids, **kw):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(ids, **kw).logits


def test_registered_in_both_interfaces(model):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    assert "rhea_anchored" in AttentionInterface._global_mapping
    assert "rhea_anchored" in AttentionMaskInterface._global_mapping


def test_beta_zero_matches_sdpa_and_beta_changes_logits(model):
    ids = torch.randint(0, 97, (2, 13), generator=torch.Generator().manual_seed(1))
    sdpa = logits(model, "sdpa", ids)
    assert torch.allclose(logits(model, "rhea_anchored", ids), sdpa, atol=1e-5)  # no kwargs: plain causal
    # A prefix of 0 or 1 token is what causal attention already sees: beta=0 is exactly sdpa.
    assert torch.allclose(logits(model, "rhea_anchored", ids, rhea_prefix_len=torch.tensor([0, 1]),
                                 rhea_anchor_bias=0.0), sdpa, atol=1e-5)
    anchored = logits(model, "rhea_anchored", ids, rhea_prefix_len=torch.tensor([4, 6]), rhea_anchor_bias=2.0)
    assert (anchored - sdpa).abs().max() > 1e-2


def test_left_padding_matches_unpadded_rows(model):
    g = torch.Generator().manual_seed(2)
    short, long = torch.randint(1, 97, (1, 8), generator=g), torch.randint(1, 97, (1, 11), generator=g)
    kw = dict(rhea_anchor_bias=1.5)
    want_short = logits(model, "rhea_anchored", short, rhea_prefix_len=torch.tensor([3]), **kw)
    want_long = logits(model, "rhea_anchored", long, rhea_prefix_len=torch.tensor([5]), **kw)
    ids = torch.cat([torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1), long])
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    model.set_attn_implementation("rhea_anchored")
    with torch.no_grad():
        got = model(ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0),
                    rhea_prefix_len=torch.tensor([3, 5]), **kw).logits
    assert torch.allclose(got[0, 3:], want_short[0], atol=1e-4)
    assert torch.allclose(got[1], want_long[0], atol=1e-4)


def test_kv_cache_decode_step_matches_full_forward(model):
    ids = torch.randint(0, 97, (1, 10), generator=torch.Generator().manual_seed(3))
    kw = dict(rhea_prefix_len=torch.tensor([4]), rhea_anchor_bias=1.0)
    full = logits(model, "rhea_anchored", ids, **kw)
    with torch.no_grad():
        first = model(ids[:, :9], use_cache=True, **kw)
        keyword = cache_keyword(model)  # `cache` in transformers 5 (`past_key_values` is deprecated there)
        step = model(ids[:, 9:], use_cache=True, **{keyword: first.get(keyword)}, **kw).logits
    assert torch.allclose(step[0, -1], full[0, -1], atol=1e-4)


def test_anchored_keys_skip_padding():
    visible = torch.zeros(1, 1, 1, 6, dtype=torch.bool)
    visible[..., 2:] = True  # two left-pad keys
    assert anchored_keys(visible, torch.tensor([3]))[0].tolist() == [False, False, True, True, True, False]
