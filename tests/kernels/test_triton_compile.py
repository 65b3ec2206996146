"""The Triton kernels compile for sm_80 and sm_90 without a GPU (full PTX/cubin pipeline)."""
import os

import pytest

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") == "1":  # interpreted kernels cannot be compiled
    pytest.skip("TRITON_INTERPRET=1 in this process", allow_module_level=True)

from rhea_kernels.anchored_attention import split as SP  # noqa: E402
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
    """The configs launch_config picks (with its defaults: fp32 dtype, so the ieee dot): a server batch's
    32 turns x 8 latents; a small grid; large nk (70 latents, 32 at a time) at d = 1536, which is
    split-K's first half (SPLIT_D = 2: few rows, d >= 1024)."""
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


@pytest.mark.parametrize("target", TARGETS, ids=TARGET_IDS)
@pytest.mark.parametrize("dt,D", [("bf16", 64), ("fp16", 128), ("bf16", 96)], ids=["bf16-D64", "fp16-D128", "bf16-D96"])
def test_split_merge_compiles(target, dt, D):
    """The split route's fused LSE merge (rhea_kernels/anchored_attention/split.py) at the tile merge_config picks."""
    ptrs = dict(OA=dt, LA="fp32", OB=dt, LB="fp32", O=dt, L="fp32")
    compiled = compile_for(SP._merge_kernel, target, dict(D=D, **SP.merge_config(D)), ptrs, {"beta"})
    assert compiled.asm["cubin"]


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



# ---- turn scoring: the NATIVE_DOT and split-K variants, with the pipelining depths the tile sweep tries.
# Pointers and the ints a real launch makes multiples of 16 carry tt.divisibility, as the JIT's
# specialisation gives them: without it Triton neither vectorises nor pipelines the loads.

_TURN_ALIGNED = {"VQ", "VK", "MASK", "CENTER", "SCORES", "TIERS", "P_DOT", "P_KSQ", "P_QSQ", "D", "s_qb", "s_qi",
                 "s_kb", "s_kt", "s_kj", "D_CHUNK"}


def _compile_turn_kernel(kernel, target, const, ptrs, num_stages, num_warps=4):
    import inspect

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(inspect.signature(kernel.fn).parameters)
    sig = {n: ("constexpr" if n in const else "*" + ptrs[n] if n in ptrs else
               "fp32" if n in ("tau_low", "tau_high") else "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in _TURN_ALIGNED and n not in const}
    return triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=const, attrs=attrs),
                          target=GPUTarget(*target), options=dict(num_stages=num_stages, num_warps=num_warps))


def _turn_const(nq, d, nk, batch, turns, dt, center, **over):
    import torch

    cfg = S.launch_config(nq, d, nk, batch, turns, 132, dict(bf16=torch.bfloat16, fp16=torch.float16,
                                                             fp32=torch.float32)[dt], center)
    cfg.update(over)
    return cfg, cfg.pop("num_stages", 3)


_TURN_PTRS = dict(MASK="u8", CENTER="fp32", SCORES="fp32", TIERS="i8")


@pytest.mark.parametrize("target", TARGETS, ids=TARGET_IDS)
@pytest.mark.parametrize("dt,shape,over", [
    ("bf16", (8, 4096, 8, 64, 512), dict(num_stages=4)),  # server batch: 256-row tiles, tensor cores
    ("bf16", (8, 4096, 8, 64, 512), dict(num_stages=2, BLOCK_D=128)),
    ("fp16", (8, 576, 8, 1, 64), dict(BLOCK_T=2)),  # the smallest tile: 16 rows
    ("bf16", (5, 777, 3, 2, 11), dict(BLOCK_T=4)),  # odd nq / nk / d
], ids=["bf16-server-s4", "bf16-server-d128-s2", "fp16-16rows", "bf16-odd"])
def test_turn_scores_native_dot_compiles(target, dt, shape, over):
    const, stages = _turn_const(*shape, dt, False, SPLIT_D=1, **over)
    assert const["NATIVE_DOT"]
    const.update(HAS_MASK=True, HAS_CENTER=False, WRITE_TIERS=True)
    kernel = _compile_turn_kernel(S._turn_scores_kernel, target, const, dict(_TURN_PTRS, VQ=dt, VK=dt), stages)
    ptx = kernel.asm["ptx"]
    assert kernel.asm["cubin"] and "mma" in ptx  # the 16-bit dot runs on the tensor cores, not as FMAs
    if stages > 1 and shape[1] == 4096:
        assert "cp.async" in ptx  # num_stages > 1 pipelines the d-loop's loads


@pytest.mark.parametrize("target", TARGETS, ids=TARGET_IDS)
@pytest.mark.parametrize("dt,center,stages", [("bf16", False, 3), ("bf16", True, 2), ("fp32", True, 4)],
                         ids=["bf16-native-s3", "bf16-centre-ieee-s2", "fp32-centre-s4"])
def test_turn_scores_split_k_compiles(target, dt, center, stages):
    """One conversation's shape (1, 512, 8, 4096): the split-K pair launch_config picks."""
    const, _ = _turn_const(8, 4096, 8, 1, 512, dt, center)
    assert const["SPLIT_D"] > 1 and const["NATIVE_DOT"] == (not center)
    const.update(HAS_MASK=False, HAS_CENTER=center, WRITE_TIERS=False)
    part = _compile_turn_kernel(S._turn_scores_kernel, target, const, dict(_TURN_PTRS, VQ=dt, VK=dt), stages)
    assert part.asm["cubin"] and "cp.async" in part.asm["ptx"]
    red_const = dict(HAS_MASK=True, WRITE_TIERS=True, BLOCK_T=const["BLOCK_T"], BLOCK_J=const["BLOCK_J"],
                     BLOCK_Q=const["BLOCK_Q"])
    red_ptrs = dict(P_DOT="fp32", P_KSQ="fp32", P_QSQ="fp32", MASK="u8", SCORES="fp32", TIERS="i8")
    assert _compile_turn_kernel(S._turn_scores_reduce_kernel, target, red_const, red_ptrs, 1).asm["cubin"]
