"""The registration harness (rhea_kernels/_library.py): one name per op, implementations by
dispatch key, one fake kernel, opcheck and torch.compile(fullgraph=True) for every op."""

import pytest
import torch

import rhea_kernels as rk
from rhea_kernels import reference as R
from tests.kernels.harness import SPECS, attn_inputs, rel_rms, score_inputs

EXPECTED_OPS = {"turn_scores", "turn_scores_and_tiers", "anchored_attention_fwd", "anchored_attention_bwd",
                "decode_linear"}


def test_one_name_per_op():
    assert set(rk.OPS) == EXPECTED_OPS
    if rk._ext.missing_kernels():
        pytest.skip("an extension built from older sources (with the former cpp_* ops) is loaded")
    for name in EXPECTED_OPS:  # the former per-backend names are gone
        assert not hasattr(torch.ops.rhea_kernels, "cpp_" + name)


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_kernels_registered_by_dispatch_key(name):
    op = rk.OPS[name]
    for key in ("CPU", "CUDA", "Meta"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.qualname, key), key
    assert op.cpu_backend == ("cpp" if rk.HAS_EXT and name not in rk._ext.missing_kernels() else "reference")
    assert rk.backend_for(torch.zeros(1), name) == op.cpu_backend
    assert op.package.startswith("rhea_kernels/") and op.cpp_source.startswith("csrc/")


def test_backend_for_names_unknown_ops():
    assert rk.backend_for(torch.zeros(1)) == rk.OPS["turn_scores"].cpu_backend
    with pytest.raises(ValueError, match="unknown op 'nope'"):
        rk.backend_for(torch.zeros(1), "nope")


def test_autograd_registered_once_for_the_forward_only():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("rhea_kernels::anchored_attention_fwd", "Autograd")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("rhea_kernels::turn_scores", "Autograd")


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_opcheck(name):
    spec = SPECS[name]
    shape = {"turn_scores": spec.shapes[1], "turn_scores_and_tiers": spec.shapes[1],
             "decode_linear": spec.shapes[1]}.get(
        name, (2, 4, 2, 9, 16, [3, 9], True))
    args = spec.make(shape, torch.float32, "cpu")
    if name == "anchored_attention_fwd":  # with gradients: checks the autograd registration too
        args = (*(t.requires_grad_() for t in args[:3]), *args[3:])
    torch.library.opcheck(rk.OPS[name].overload, args)


def test_compile_fullgraph_forward_and_backward():
    torch._dynamo.reset()
    q, k, v, pl, g = attn_inputs(2, 4, 2, 21, 16, [4, 0], torch.float32)
    vq, vk, mask, center = score_inputs(2, 7, 3, 5, 16, True, torch.float32)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(q, k, v, vq, vk):
        scores, tiers = rk.turn_scores_and_tiers(vq, vk, 0.1, 0.5, mask, center)
        return rk.anchored_attention(q, k, v, pl, 1.5), scores, tiers, rk.turn_scores(vq, vk, mask, center)

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, scores, tiers, plain = step(*leaves, vq, vk)
    out.backward(g)
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    R.anchored_attention(*ref_leaves, pl, 1.5).backward(g)
    assert rel_rms(out, R.anchored_attention(q, k, v, pl, 1.5)) < 1e-5
    assert torch.allclose(scores, R.turn_scores(vq, vk, mask, center), atol=1e-5) and torch.equal(plain, scores)
    assert torch.equal(tiers, R.score_tiers(scores, 0.1, 0.5))
    for got, ref in zip(leaves, ref_leaves):
        assert rel_rms(got.grad, ref.grad, floor=0.1) < 1e-5


def test_op_packages_are_importable_beside_the_public_functions():
    """``rhea_kernels.turn_scores`` is the function; the package's modules import by full name."""
    from rhea_kernels.anchored_attention import reference as attn_ref
    from rhea_kernels.score_tiers import reference as tiers_ref
    from rhea_kernels.turn_scores import reference as ts_ref

    assert callable(rk.turn_scores) and callable(rk.score_tiers) and callable(rk.anchored_attention)
    assert R.turn_scores is ts_ref.turn_scores and R.score_tiers is tiers_ref.score_tiers
    assert R.anchored_attention is attn_ref.anchored_attention


def test_other_devices_get_a_named_error():
    vq, vk = torch.randn(1, 2, 8, device="meta"), torch.randn(1, 3, 2, 8, device="meta")
    with pytest.raises(ValueError, match="run on cpu and cuda"):
        rk.turn_scores(vq, vk)
