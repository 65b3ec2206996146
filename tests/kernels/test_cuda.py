"""The Triton kernels on a real GPU, through the public ops, vs the plain-torch references.

Skipped without CUDA (CI has no GPU); run on a GPU machine with
``pytest tests/kernels/test_cuda.py tests/session/test_cuda_session.py``. The references run
in fp32 on the same device with TF32 off, so the comparison measures the kernels, not
cuBLAS's rounding.
"""
import pytest
import torch

import rhea_kernels as rk
from rhea_kernels import reference as R
from tests.kernels.cases import ATTN_SHAPES, ATTN_TOL, DTYPES, SCORE_SHAPES, attn_inputs, attn_params, score_inputs, \
    score_params
from tests.kernels.conftest import rel_rms

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
triton = pytest.importorskip("triton")

CUDA = "cuda"

# Past one tile: many query/key blocks, the prefix ending mid-block, D=128, long sequences.
BIG_ATTN = [(2, 4, 2, 1100, 64, [600, 0], True), (1, 2, 1, 700, 32, [100], False),
            (1, 8, 8, 520, 128, [520], True), (1, 4, 1, 4096, 128, [512], True), (1, 2, 2, 2047, 64, [2047], True)]
BIG_SCORE = [(2, 300, 8, 8, 576, True), (1, 40, 3, 96, 60, False), (8, 512, 8, 8, 4096, False),
             (1, 1000, 8, 8, 1536, True)]


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _cuda(*ts):
    return [t.to(CUDA) if isinstance(t, torch.Tensor) else t for t in ts]


def test_backend_is_triton_on_cuda():
    assert rk.backend_for(torch.zeros(1, device=CUDA)) == "triton"


@pytest.mark.parametrize("B,T,nq,nk,d,with_center,dt", score_params() + score_params(shapes=BIG_SCORE))
def test_turn_scores_and_tiers(B, T, nq, nk, d, with_center, dt):
    vq, vk, mask, center = _cuda(*score_inputs(B, T, nq, nk, d, with_center, DTYPES[dt]))
    scores, tiers = rk.turn_scores_and_tiers(vq, vk, 0.05, 0.5, mask, center)
    want = R.turn_scores(vq.float(), vk.float(), mask, None if center is None else center.float())
    assert scores.device.type == CUDA and scores.dtype == torch.float32 and tiers.dtype == torch.int8
    assert torch.equal(scores.isinf(), want.isinf()) and not scores.isnan().any()
    assert torch.allclose(scores[~want.isinf()], want[~want.isinf()], atol=1e-4)
    assert torch.equal(rk.turn_scores(vq, vk, mask, center), scores)
    clear = ((want - 0.05).abs() > 1e-4) & ((want - 0.5).abs() > 1e-4)
    assert torch.equal(tiers[clear], R.score_tiers(want, 0.05, 0.5)[clear])
    assert (tiers[~mask] == 0).all()


@pytest.mark.parametrize("B,H,Hkv,N,D,prefix,causal,dt",
                         attn_params() + attn_params(dtypes=("fp32", "bf16"), shapes=BIG_ATTN))
def test_anchored_attention_autograd(B, H, Hkv, N, D, prefix, causal, dt):
    q, k, v, pl, g = _cuda(*attn_inputs(B, H, Hkv, N, D, prefix, DTYPES[dt]))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = rk.anchored_attention(*leaves, pl, 1.3, causal)
    out.backward(g)
    ref_leaves = [t.float().clone().requires_grad_() for t in (q, k, v)]
    want = R.anchored_attention(*ref_leaves, pl, 1.3, causal)
    want.backward(g.float())
    tol = ATTN_TOL[dt] if N < 1000 else 2 * ATTN_TOL[dt]
    assert out.dtype == q.dtype and rel_rms(out, want) < tol
    for name, got, ref in zip("qkv", leaves, ref_leaves):
        assert got.grad.dtype == q.dtype and rel_rms(got.grad, ref.grad, floor=0.1) < 2 * tol, f"d{name}"


def test_kernels_match_the_cpu_path():
    """The same inputs give the same answer on the GPU (Triton) and on the CPU (C++ or reference)."""
    q, k, v, pl, _ = attn_inputs(2, 8, 2, 300, 64, [40, 0], torch.float32)
    cpu = rk.anchored_attention(q, k, v, pl, 0.7)
    gpu = rk.anchored_attention(*_cuda(q, k, v, pl), 0.7)
    assert rel_rms(gpu.cpu(), cpu) < 1e-5
    vq, vk, mask, center = score_inputs(*SCORE_SHAPES[1][:6], torch.float32)
    assert torch.allclose(rk.turn_scores(*_cuda(vq, vk, mask, center)).cpu(), rk.turn_scores(vq, vk, mask, center),
                          atol=1e-5)


def test_opcheck_on_cuda():
    vq, vk, mask, center = _cuda(*score_inputs(2, 7, 3, 5, 60, True, torch.float32))
    torch.library.opcheck(torch.ops.rhea_kernels.turn_scores.default, (vq, vk, mask, center))
    torch.library.opcheck(torch.ops.rhea_kernels.turn_scores_and_tiers.default, (vq, vk, None, None, 0.1, 0.4))
    q, k, v, pl, g = _cuda(*attn_inputs(2, 4, 2, 33, 32, [3, 33], torch.float32))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.library.opcheck(torch.ops.rhea_kernels.anchored_attention_fwd.default, (q, k, v, pl, 1.0, True, 0.25))


def test_inductor_fullgraph_forward_and_backward():
    """torch.compile with the default (Inductor) backend keeps the Triton ops as opaque calls."""
    torch._dynamo.reset()
    q, k, v, pl, g = _cuda(*attn_inputs(2, 4, 2, 97, 64, [4, 0], torch.bfloat16))

    @torch.compile(fullgraph=True)
    def step(q, k, v):
        return (rk.anchored_attention(q, k, v, pl, 1.5) * 2).sum(-1)

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    step(*leaves).backward(g[..., 0])
    ref = [t.float().clone().requires_grad_() for t in (q, k, v)]
    (R.anchored_attention(*ref, pl, 1.5) * 2).sum(-1).backward(g[..., 0].float())
    for got, want in zip(leaves, ref):
        assert rel_rms(got.grad, want.grad, floor=0.1) < 2 * ATTN_TOL["bf16"]


def test_hf_hook_on_cuda_matches_sdpa_and_decodes_with_cache():
    transformers = pytest.importorskip("transformers")
    from rhea_kernels.hf import register_anchored_attention

    register_anchored_attention()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(cfg).to(CUDA, torch.bfloat16).eval()
    ids = torch.randint(0, 97, (2, 150), device=CUDA)
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        sdpa = model(ids).logits.float()
        model.set_attn_implementation("rhea_anchored")
        plain = model(ids, rhea_prefix_len=torch.tensor([0, 1], device=CUDA), rhea_anchor_bias=0.0).logits.float()
        kw = dict(rhea_prefix_len=torch.tensor([20, 33], device=CUDA), rhea_anchor_bias=1.0)
        full = model(ids, **kw).logits.float()
        first = model(ids[:, :-1], use_cache=True, **kw)
        step = model(ids[:, -1:], past_key_values=first.past_key_values, use_cache=True, **kw).logits.float()
    assert rel_rms(plain, sdpa) < 2e-2
    assert (full - sdpa).abs().max() > 1e-2
    assert rel_rms(step[:, -1], full[:, -1]) < 2e-2


@pytest.mark.parametrize("B,H,Hkv,N,D,prefix,causal,dt", attn_params(dtypes=("bf16",), shapes=ATTN_SHAPES[:1]))
def test_non_contiguous_inputs(B, H, Hkv, N, D, prefix, causal, dt):
    """Transposed views (what a [B, N, H, D] projection gives) are accepted and give the same answer."""
    q, k, v, pl, _ = _cuda(*attn_inputs(B, H, Hkv, N, D, prefix, DTYPES[dt]))
    views = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]
    assert not views[0].is_contiguous()
    assert rel_rms(rk.anchored_attention(*views, pl, 1.3, causal), rk.anchored_attention(q, k, v, pl, 1.3, causal)) < 1e-6
