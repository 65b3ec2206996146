"""The Triton kernels on a real GPU, through the ops' CUDA dispatch key, vs the plain-torch references.

Skipped without CUDA (CI has no GPU); run on a GPU machine with
``pytest tests/kernels/test_cuda.py tests/session/test_cuda_session.py``. The references run
in fp32 on the same device with TF32 off, so the comparison measures the kernels, not
cuBLAS's rounding. Every op runs the shared harness (tests/kernels/harness.py) exactly as
test_backends.py runs it on CPU, plus bigger shapes.
"""
import pytest
import torch

import rhea_kernels as rk
from rhea_kernels import reference as R
from tests.kernels.harness import ATTN_SHAPES, ATTN_TOL, DTYPES, SCORE_SHAPES, attn_inputs, op_params, rel_rms, \
    run_and_compare, score_inputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
triton = pytest.importorskip("triton")

CUDA = "cuda"


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _cuda(*ts):
    return [t.to(CUDA) if isinstance(t, torch.Tensor) else t for t in ts]


def test_backend_is_triton_on_cuda():
    for name in rk.OPS:
        assert rk.backend_for(torch.zeros(1, device=CUDA), name) == "triton"


@pytest.mark.parametrize("spec,shape,dt", op_params() + op_params("cuda_big_shapes", dtypes=("fp32", "bf16")))
def test_op_on_cuda(spec, shape, dt):
    """Each op (turn_scores, turn_scores_and_tiers, anchored_attention_fwd/_bwd) on odd shapes and
    past one tile (to B=8 T=512 d=4096 and N=4096 D=128), fp32/fp16/bf16."""
    run_and_compare(spec, shape, dt, CUDA)


def test_fused_scores_equal_plain_scores():
    vq, vk, mask, center = _cuda(*score_inputs(2, 300, 8, 8, 576, True, torch.bfloat16))
    scores, tiers = rk.turn_scores_and_tiers(vq, vk, 0.05, 0.5, mask, center)
    assert torch.equal(rk.turn_scores(vq, vk, mask, center), scores)
    assert torch.equal(tiers, rk.score_tiers(scores, 0.05, 0.5))


@pytest.mark.parametrize("B,H,Hkv,N,D,prefix,causal", ATTN_SHAPES[:3])
@pytest.mark.parametrize("dt", ["fp32", "bf16"])
def test_anchored_attention_autograd(B, H, Hkv, N, D, prefix, causal, dt):
    """The public function: forward op, autograd, backward op, all on the GPU."""
    q, k, v, pl, g = _cuda(*attn_inputs(B, H, Hkv, N, D, prefix, DTYPES[dt]))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = rk.anchored_attention(*leaves, pl, 1.3, causal)
    out.backward(g)
    ref_leaves = [t.float().clone().requires_grad_() for t in (q, k, v)]
    want = R.anchored_attention(*ref_leaves, pl, 1.3, causal)
    want.backward(g.float())
    tol = ATTN_TOL[dt]
    assert out.dtype == q.dtype and rel_rms(out, want) < tol
    for name, got, ref in zip("qkv", leaves, ref_leaves):
        assert got.grad.dtype == q.dtype and rel_rms(got.grad, ref.grad, floor=0.1) < 2 * tol, f"d{name}"


def test_kernels_match_the_cpu_path():
    """The same inputs give the same answer on the GPU (Triton) and on the CPU (C++ or reference)."""
    q, k, v, pl, _ = attn_inputs(2, 8, 2, 300, 64, [40, 0], torch.float32)
    cpu = rk.anchored_attention(q, k, v, pl, 0.7)
    gpu = rk.anchored_attention(*_cuda(q, k, v, pl), 0.7)
    assert rel_rms(gpu.cpu(), cpu) < 1e-5
    vq, vk, mask, center = score_inputs(*SCORE_SHAPES[1], torch.float32)
    assert torch.allclose(rk.turn_scores(*_cuda(vq, vk, mask, center)).cpu(), rk.turn_scores(vq, vk, mask, center),
                          atol=1e-5)


def test_opcheck_on_cuda():
    vq, vk, mask, center = _cuda(*score_inputs(2, 7, 3, 5, 60, True, torch.float32))
    torch.library.opcheck(torch.ops.rhea_kernels.turn_scores.default, (vq, vk, mask, center))
    torch.library.opcheck(torch.ops.rhea_kernels.turn_scores_and_tiers.default, (vq, vk, None, None, 0.1, 0.4))
    q, k, v, pl, g = _cuda(*attn_inputs(2, 4, 2, 33, 32, [3, 33], torch.float32))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.library.opcheck(torch.ops.rhea_kernels.anchored_attention_fwd.default, (q, k, v, pl, 1.0, True, 0.25))
    out, lse = torch.ops.rhea_kernels.anchored_attention_fwd(q, k, v, pl, 1.0, True, 0.25)
    torch.library.opcheck(torch.ops.rhea_kernels.anchored_attention_bwd.default,
                          (g, q.detach(), k.detach(), v.detach(), out.detach(), lse, pl, 1.0, True, 0.25))


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


@pytest.mark.parametrize("B,H,Hkv,N,D,prefix,causal", ATTN_SHAPES[:1])
def test_non_contiguous_inputs(B, H, Hkv, N, D, prefix, causal, dt="bf16"):
    """Transposed views (what a [B, N, H, D] projection gives) are accepted and give the same answer."""
    q, k, v, pl, _ = _cuda(*attn_inputs(B, H, Hkv, N, D, prefix, DTYPES[dt]))
    views = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]
    assert not views[0].is_contiguous()
    assert rel_rms(rk.anchored_attention(*views, pl, 1.3, causal), rk.anchored_attention(q, k, v, pl, 1.3, causal)) < 1e-6
