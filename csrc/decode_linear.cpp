// The C++ entry of the op rhea_kernels::decode_linear on CPU: y = x @ weight^T + bias for an input
// of a few rows (a decoding step: one token per sequence, M = batch rows). Schema, fake kernel
// and the other devices' kernel are registered from rhea_kernels/decode_linear/.
//
// With M between 2 and 16, MKL's sgemm on this project's CPUs (AMD EPYC, AVX2) is far from both
// bounds: Qwen2.5-1.5B's MLP projection at M = 8 ran at ~2 of the ~12 GB/s one row's GEMV
// streams (benchmarks/decode_linear.py). Here a block of 24 weight rows is read from memory once and
// meets the input rows 4 at a time, 3 weight rows x 4 input rows per register block (vec.h
// linear_rows), and the outputs are split across threads by weight rows, so a step stays close to
// the cost of streaming the weights once.
// fp32 only; other dtypes (and a weight whose rows are not contiguous) go to at::linear.
#include "common.h"
#include "vec.h"

#include <ATen/Parallel.h>

namespace rhea_kernels {

namespace {

constexpr int64_t kSerialMacs = int64_t{1} << 20;  // below this many multiply-adds, stay on one thread
constexpr int64_t kRowBlock = 24;                 // weight rows per inner block (24 x 3072 fp32 = 288 KiB, in L2)

at::Tensor decode_linear_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 2, "decode_linear: weight must be [N, K], got ", weight.sizes());
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "decode_linear: x ", x.sizes(), " and weight ",
              weight.sizes(), " disagree on K (x's last dimension)");
  TORCH_CHECK(!bias || (bias->dim() == 1 && bias->size(0) == weight.size(0)), "decode_linear: bias must be [N]");
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(), "the C++ decode_linear kernel is the CPU implementation");
  const bool fast = x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                    (!bias || bias->scalar_type() == at::kFloat) && weight.stride(1) == 1 && weight.stride(0) >= weight.size(1);
  if (!fast) return bias ? at::linear(x, weight, *bias) : at::linear(x, weight);
  const int64_t K = weight.size(1), N = weight.size(0);
  const at::Tensor xc = x.contiguous();
  const int64_t M = c10::multiply_integers(x.sizes().slice(0, x.dim() - 1));  // rows: every leading dimension
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = N;
  // y starts as the bias (a fresh tensor: expand().contiguous() of one row would alias the bias itself and the
  // sums below would then write into the layer's parameter)
  at::Tensor y = at::empty({M, N}, x.options());
  if (bias) y.copy_(bias->unsqueeze(0).expand({M, N}));
  else y.zero_();
  if (M == 0 || N == 0 || K == 0) return y.view(out_shape);
  const float* xp = xc.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  const int64_t ldw = weight.stride(0);
  float* yp = y.data_ptr<float>();
  const RowKernels& rk = row_kernels();
  const int64_t grain = M * N * K < kSerialMacs ? N : kRowBlock;
  at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n0 = begin; n0 < end; n0 += kRowBlock)
      rk.linear_rows(xp, K, M, wp, ldw, K, n0, std::min(end, n0 + kRowBlock), yp, N);
  });
  return y.view(out_shape);
}

}  // namespace

TORCH_LIBRARY_IMPL(rhea_kernels, CPU, m) { m.impl("decode_linear", &decode_linear_cpu); }

}  // namespace rhea_kernels
