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


# ------------------------------------------- the split route (aten flash + LSE merge)

from rhea_kernels.anchored_attention import op as attn_op  # noqa: E402
from rhea_kernels.anchored_attention import split  # noqa: E402

# (B, H, Hkv, N, D, prefix_len per row, causal): GQA 4 and 2, MHA, P = 0 / N - 1 / N, rows with different P
SPLIT_SHAPES = [
    (2, 8, 2, 1024, 64, [128, 128], True),
    (1, 8, 2, 4096, 128, [512], True),
    (1, 16, 4, 4096, 64, [4096], True),
    (3, 4, 4, 1024, 128, [100, 0, 1024], True),
    (2, 8, 4, 1024, 64, [1, 700], False),
    (2, 8, 2, 1000, 64, [999, 333], True),  # pass B of one query row (flash's GQA seqlen_q == 1 path)
]


def _split_id(s):
    return f"B{s[0]}-H{s[1]}-KV{s[2]}-N{s[3]}-D{s[4]}-P{'_'.join(map(str, s[5]))}{'' if s[6] else '-full'}"


@pytest.mark.parametrize("backend", [None, "flash"], ids=["auto", "flash"])
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", SPLIT_SHAPES, ids=_split_id)
def test_split_route_matches_reference(shape, dt, backend):
    """split_fwd / split_bwd (two attention calls per row group, fused merge) vs the fp32 reference,
    with the passes on the backend `pass_backend` picks (cuDNN on an H100) and forced onto FA2."""
    B, H, Hkv, N, D, prefix, causal = shape
    q, k, v, pl, g = _cuda(*attn_inputs(B, H, Hkv, N, D, prefix, DTYPES[dt]))
    assert split.eligible(q, k)
    scale = D ** -0.5
    out, lse = split.split_fwd(q, k, v, pl, 1.3, causal, scale, backend)
    want, want_lse = R.anchored_attention(q.float(), k.float(), v.float(), pl, 1.3, causal, scale, return_lse=True)
    tol = 2 * ATTN_TOL[dt]
    assert out.dtype == q.dtype and out.is_contiguous() and rel_rms(out, want) < tol, rel_rms(out, want)
    assert lse.dtype == torch.float32 and lse.shape == (B, H, N) and rel_rms(lse, want_lse) < 1e-5
    grads = split.split_bwd(g, q, k, v, out, lse, pl, 1.3, causal, scale, backend)
    refs = R.anchored_attention_bwd(g.float(), q.float(), k.float(), v.float(), pl, 1.3, causal, scale)
    for name, got, ref, inp in zip("qkv", grads, refs, (q, k, v)):
        assert got.dtype == inp.dtype and got.shape == inp.shape, f"d{name}"
        assert rel_rms(got, ref, floor=0.1) < 2 * tol, f"d{name}: {rel_rms(got, ref, floor=0.1):.2e}"


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_op_routes_agree(monkeypatch, dt, causal):
    """RHEA_ANCHORED_ROUTE=split and =triton give the same forward, lse and gradients through
    the op, and either backward accepts the other forward's (out, lse)."""
    q, k, v, pl, g = _cuda(*attn_inputs(2, 8, 2, 2048, 128, [256, 1000], DTYPES[dt]))
    split.pass_backend(q, k)  # the one-time cuDNN check runs split_fwd itself: keep it out of the count
    calls = []
    real_fwd = split.split_fwd
    monkeypatch.setattr(split, "split_fwd", lambda *a: calls.append(1) or real_fwd(*a))
    fwd, bwd = torch.ops.rhea_kernels.anchored_attention_fwd, torch.ops.rhea_kernels.anchored_attention_bwd
    args = (pl, 0.9, causal, 128 ** -0.5)
    res = {}
    for route in ("split", "triton"):
        monkeypatch.setenv(attn_op.ROUTE_ENV, route)
        out, lse = fwd(q, k, v, *args)
        res[route] = out, lse, bwd(g, q, k, v, out, lse, *args)
    assert len(calls) == 1  # the split forward ran once, under "split" only
    tol = ATTN_TOL[dt]
    (o_s, l_s, g_s), (o_t, l_t, g_t) = res["split"], res["triton"]
    assert rel_rms(o_s, o_t) < 2 * tol and rel_rms(l_s, l_t) < 1e-5
    for a, b in zip(g_s, g_t):
        assert rel_rms(a, b, floor=0.1) < 4 * tol
    mixed = {"triton": bwd(g, q, k, v, o_s, l_s, *args)}  # Triton backward, split forward
    monkeypatch.setenv(attn_op.ROUTE_ENV, "split")
    mixed["split"] = bwd(g, q, k, v, o_t, l_t, *args)  # split backward, Triton forward
    refs = R.anchored_attention_bwd(g.float(), q.float(), k.float(), v.float(), *args)
    for route, grads in mixed.items():
        for name, got, ref in zip("qkv", grads, refs):
            assert rel_rms(got, ref, floor=0.1) < 4 * tol, f"{route} d{name}"
    monkeypatch.setenv(attn_op.ROUTE_ENV, "auto")
    assert rel_rms(fwd(q, k, v, *args)[0], o_s) < 1e-6  # auto = split for eligible inputs
    monkeypatch.setenv(attn_op.ROUTE_ENV, "bogus")
    with pytest.raises(ValueError, match="RHEA_ANCHORED_ROUTE"):
        fwd(q, k, v, *args)


def test_split_not_eligible_falls_back_to_triton(monkeypatch):
    """fp32 and D % 8 != 0 are served by the Triton kernels even when split is asked for."""
    monkeypatch.setenv(attn_op.ROUTE_ENV, "split")
    for dt, D in ((torch.float32, 64), (torch.bfloat16, 60)):
        q, k, v, pl, _ = _cuda(*attn_inputs(1, 4, 2, 300, D, [40], dt))
        assert not split.eligible(q, k)
        out, lse = torch.ops.rhea_kernels.anchored_attention_fwd(q, k, v, pl, 0.5, True, D ** -0.5)
        want = R.anchored_attention(q.float(), k.float(), v.float(), pl, 0.5, True, D ** -0.5)
        assert rel_rms(out, want) < ATTN_TOL["fp32" if dt == torch.float32 else "bf16"]


def test_split_merge_kernel_on_gpu():
    """The fused merge vs the torch merge on the device (bf16, pass B in the flash [B, N, H, D] layout)."""
    g = torch.Generator(device=CUDA).manual_seed(0)
    oa = torch.randn(2, 8, 1000, 128, device=CUDA, generator=g).bfloat16()
    ob = torch.randn(2, 1000 - 77, 8, 128, device=CUDA, generator=g).bfloat16().transpose(1, 2)
    la, lb = torch.randn(2, 8, 1000, device=CUDA, generator=g), torch.randn(2, 8, 1000 - 77, device=CUDA, generator=g)
    out, lse = split.merge_triton(oa, la, ob, lb, 77, 1.1)
    want, want_lse = split.merge_torch(oa, la, ob, lb, 77, 1.1)
    assert rel_rms(out, want) < 5e-3 and (lse - want_lse).abs().max() < 1e-5


# ---- turn scoring: the kernel's variants (split-K, NATIVE_DOT, num_stages) at one conversation's and a
# batch's shapes, in bf16 (what benchmarks/turn_scores_tiles.py sweeps, checked here once each)

_TURN_VARIANTS = {
    "native": dict(NATIVE_DOT=True, SPLIT_D=1),
    "native-s2": dict(NATIVE_DOT=True, SPLIT_D=1, num_stages=2),
    "native-s4-d128": dict(NATIVE_DOT=True, SPLIT_D=1, num_stages=4, BLOCK_D=128),
    "ieee-split4": dict(NATIVE_DOT=False, SPLIT_D=4),
    "native-split8": dict(NATIVE_DOT=True, SPLIT_D=8),
    "native-split16-rows32": dict(NATIVE_DOT=True, SPLIT_D=16, BLOCK_T=4),
}


@pytest.mark.parametrize("variant", list(_TURN_VARIANTS))
@pytest.mark.parametrize("shape", [(1, 512, 8, 4096), (64, 64, 8, 4096)], ids=["session", "batch"])
def test_turn_scores_variants_on_cuda(shape, variant):
    from rhea_kernels.score_tiers.reference import score_tiers
    from rhea_kernels.turn_scores.triton_kernel import launch_config, turn_scores_triton
    from tests.kernels.harness import TAU_HIGH, TAU_LOW, _check_scores, _check_tiers

    B, T, n, d = shape
    vq, vk, mask, _ = _cuda(*score_inputs(B, T, n, n, d, False, torch.bfloat16))
    cfg = dict(launch_config(n, d, n, B, T, 132, torch.bfloat16), **_TURN_VARIANTS[variant])
    want = R.turn_scores(vq.float(), vk.float(), mask)
    scores, tiers = turn_scores_triton(vq, vk, mask, None, TAU_LOW, TAU_HIGH, True, config=cfg)
    _check_scores(scores, want, 1e-4)
    _check_tiers(tiers, scores, want, mask, 1e-4)
    plain, _ = turn_scores_triton(vq, vk, mask, config=cfg)
    assert torch.equal(plain, scores)  # the tiers epilogue does not change the scores
    assert torch.equal(score_tiers(scores, TAU_LOW, TAU_HIGH), tiers)


@pytest.mark.parametrize("shape", [(1, 512, 8, 4096), (64, 64, 8, 4096), (1, 40, 8, 1536)])
def test_turn_scores_default_and_centred_split_on_cuda(shape):
    """What `launch_config` picks (split-K + native dot for one conversation), and a centred call
    (the fp32 `ieee` dot) split and unsplit, through the public ops."""
    from rhea_kernels.turn_scores.triton_kernel import launch_config, turn_scores_triton

    B, T, n, d = shape
    for center in (False, True):
        vq, vk, mask, c = _cuda(*score_inputs(B, T, n, n, d, center, torch.bfloat16))
        want = R.turn_scores(vq.float(), vk.float(), mask, c)
        got = rk.turn_scores(vq, vk, mask, c)
        assert torch.equal(got.isinf(), want.isinf())
        assert (got - want)[~want.isinf()].abs().max() < 1e-4
        split = dict(launch_config(n, d, n, B, T, 132, torch.bfloat16, center), SPLIT_D=4)
        got_split = turn_scores_triton(vq, vk, mask, c, config=split)[0]
        assert (got_split - want)[~want.isinf()].abs().max() < 1e-4
