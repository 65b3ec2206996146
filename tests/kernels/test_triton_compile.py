"""The Triton kernels compile for sm_80 and sm_90 without a GPU (full PTX/cubin pipeline)."""
import os

import pytest

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") == "1":  # interpreted kernels cannot be compiled
    pytest.skip("TRITON_INTERPRET=1 in this process", allow_module_level=True)

from rhea_kernels.triton import anchored_attention as A  # noqa: E402
from rhea_kernels.triton import turn_scores as S  # noqa: E402
from tests.kernels.gpu_compile import TARGETS, compile_for  # noqa: E402

pytestmark = pytest.mark.xdist_group("triton_compile")
TARGET_IDS = [f"sm{t[1]}" for t in TARGETS]


@pytest.mark.parametrize("target", TARGETS, ids=TARGET_IDS)
@pytest.mark.parametrize("dt,nq,d", [("bf16", 8, 4096), ("fp32", 3, 576)], ids=["bf16-nq8-d4096", "fp32-nq3-d576"])
def test_turn_scores_compiles(target, dt, nq, d):
    ptrs = dict(VQ=dt, VK=dt, MASK="u8", CENTER="fp32", SCORES="fp32", TIERS="i8")
    const = dict(HAS_MASK=True, HAS_CENTER=True, WRITE_TIERS=True, **S.launch_config(nq, d))
    kernel = compile_for(S._turn_scores_kernel, target, const, ptrs, {"tau_low", "tau_high"})
    assert "ptx" in kernel.asm and kernel.asm["cubin"]


@pytest.mark.parametrize("target", TARGETS, ids=TARGET_IDS)
@pytest.mark.parametrize("dt,D", [("fp16", 64), ("bf16", 128)], ids=["fp16-D64", "bf16-D128"])
def test_anchored_attention_compiles(target, dt, D):
    common = dict(Q=dt, K=dt, V=dt, PL="i64", LSE="fp32")
    prec = "ieee" if dt == "fp32" else "tf32"
    cfg = dict(D=D, CAUSAL=True, UPCAST=False, DOT_PREC=prec, BLOCK_D=D)
    kernels = [
        (A._fwd_kernel, dict(O=dt, **common), A.FWD_BLOCKS),
        (A._bwd_dkdv_kernel, dict(DO=dt, DELTA="fp32", DK=dt, DV=dt, **common), A.DKDV_BLOCKS),
        (A._bwd_dq_kernel, dict(DO=dt, DELTA="fp32", DQ=dt, **common), A.DQ_BLOCKS),
    ]
    for kern, ptrs, (bm, bn) in kernels:
        compiled = compile_for(kern, target, dict(cfg, BLOCK_M=bm, BLOCK_N=bn), ptrs, {"sm_scale", "beta"})
        assert compiled.asm["cubin"], kern.fn.__name__
