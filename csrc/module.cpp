// The Python module rhea_kernels._C. Importing it runs the static registrations of every
// op's C++ entry: TORCH_LIBRARY_IMPL(rhea_kernels, CPU, m) in csrc/turn_scores.cpp,
// csrc/score_tiers.cpp and csrc/anchored_attention.cpp register the CPU kernels under the
// ops' own names. The schemas (one per op), the fake kernels, autograd and the CUDA (Triton)
// kernels are registered from Python, in rhea_kernels/<op>/op.py through rhea_kernels/_library.py.
#include "common.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "rhea_kernels C++ CPU kernels (registered for the CPU key of torch.ops.rhea_kernels.*)";
}
