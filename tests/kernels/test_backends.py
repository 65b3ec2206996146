"""Every op, every backend this machine has, against its reference: one test body per backend,
parametrised over the ops of `tests/kernels/harness.py` (the CUDA twin is test_cuda.py).

* `cpu`: ``torch.ops.rhea_kernels.<op>`` on CPU tensors, i.e. the C++ kernel registered for
  the CPU key (skipped where the extension is not built: the reference would meet itself);
* `interp`: the op's Triton kernel under TRITON_INTERPRET=1, in a child process.
"""
import pytest

import rhea_kernels as rk
from tests.kernels.harness import SPECS, op_params, run_and_compare


def _needs_cpp(spec):
    if rk.OPS[spec.name].cpu_backend != "cpp":
        pytest.skip(f"no C++ CPU kernel for {spec.name} (build with RHEA_BUILD_EXT=1)")


@pytest.mark.parametrize("spec,shape,dt", op_params())
def test_cpu_kernel(spec, shape, dt):
    _needs_cpp(spec)
    run_and_compare(spec, shape, dt, "cpu")


@pytest.mark.parametrize("spec,shape,dt", op_params("big_shapes", dtypes=("fp32", "bf16")))
def test_cpu_kernel_past_one_tile(spec, shape, dt):
    """Several query/key blocks, the prefix ending mid-block; turn scoring over many chunks on all threads."""
    _needs_cpp(spec)
    run_and_compare(spec, shape, dt, "cpu")


@pytest.mark.xdist_group("triton_interpreter")
@pytest.mark.parametrize("spec,shape,dt", op_params(dtypes="interp"))
def test_triton_kernel_interpreted(interp, spec, shape, dt):
    run_and_compare(spec, shape, dt, "cpu", run=interp.run)


def test_every_registered_op_has_a_spec():
    assert set(SPECS) == set(rk.OPS)
