"""The Triton kernels compile for sm_80 and sm_90 without a GPU (full PTX/cubin pipeline)."""
import os

import pytest

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") == "1":  # interpreted kernels cannot be compiled
    pytest.skip("TRITON_INTERPRET=1 in this process", allow_module_level=True)

from rhea_kernels.anchored_attention import triton_kernel as A  # noqa: E402
from rhea_kernels.turn_scores import triton_kernel as S  # noqa: E402
from tests.kernels.gpu_compile import TARGETS, compile_for  # noqa: E402

pytestmark = pytest.mark.xdist_group("triton_compile")
TARGET_IDS = [f"sm{t[1]}" for t in TARGETS]


@pytest.mark.parametrize("target", TARGETS, ids=TARGET_IDS)
@pytest.mark.parametrize("dt,nq,nk,d,batch,turns", [("bf16", 8, 8, 4096, 64, 512), ("fp32", 3, 5, 576, 1, 7),
                                                     ("bf16", 8, 70, 1536, 1, 3)],
                         ids=["bf16-nq8-d4096-server", "fp32-nq3-nk5-d576", "bf16-nk70-d1536"])
def test_turn_scores_compiles(target, dt, nq, nk, d, batch, turns):
    """The tile shapes launch_config picks: 16 turns x 8 latents, 2 x 8 (a small grid), 1 x 32 (large nk)."""
    ptrs = dict(VQ=dt, VK=dt, MASK="u8", CENTER="fp32", SCORES="fp32", TIERS="i8")
    const = dict(HAS_MASK=True, HAS_CENTER=True, WRITE_TIERS=True, **S.launch_config(nq, d, nk, batch, turns))
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


class _FakeKernel:
    """Stands in for the jitted kernel: raises OutOfResources for tiles over `limit` rows."""

    def __init__(self, limit):
        self.limit, self.launched = limit, []

    def __getitem__(self, grid):
        def launch(*args, BLOCK_T, BLOCK_J, **kw):
            if BLOCK_T * BLOCK_J > self.limit:
                raise triton.runtime.errors.OutOfResources(300000, 232448, "shared memory")
            self.launched.append((grid, BLOCK_T, BLOCK_J))
        return launch


def test_default_tile_shrinks_to_fit_and_is_remembered(monkeypatch):
    import torch

    fake = _FakeKernel(limit=64)
    monkeypatch.setattr(S, "_turn_scores_kernel", fake)
    monkeypatch.setattr(S, "_SHRUNK", {})
    vq, vk = torch.zeros(64, 8, 32), torch.zeros(64, 512, 8, 32)  # a server batch: 256-row tiles by default
    S.turn_scores_triton(vq, vk)
    assert fake.launched == [((64, 512 // 8), 8, 8)]  # 32 -> 16 -> 8 turns per program
    S.turn_scores_triton(vq, vk)
    assert len(fake.launched) == 2 and fake.launched[1] == fake.launched[0]  # no second search
    with pytest.raises(triton.runtime.errors.OutOfResources):  # an explicit config is never changed
        S.turn_scores_triton(vq, vk, config=S.launch_config(8, 32, 8, 64, 512))
