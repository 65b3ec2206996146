// Turn scoring on CPU: one pass over the stored latents vk. The C++ entry of the op
// rhea_kernels::turn_scores (registered below for the CPU dispatch key; the schema, the
// fake kernel and the CUDA/Triton kernel are registered from rhea_kernels/turn_scores/).
// csrc/score_tiers.cpp registers the same pass with the tiers epilogue as
// rhea_kernels::turn_scores_and_tiers.
//
// score[b, t] = max_{i,j} cos(vq[b,i] - c, vk[b,t,j] - c), norms floored at kNormEps;
// masked turns get -inf and tier 0. See rhea_kernels/reference.py for the definition.
//
// The queries are centred and normalised once. vk is read in chunks of about kChunkBytes
// of latent rows; per chunk, one register-blocked pass (vec.h qk_dots) gives every
// query-key dot product and every row's squared norm, each K element loaded once for all
// queries, and each turn's max is taken from the dots scaled by 1/|k|. (A BLAS GEMM did the
// dots before: with only nq = 8 query rows it is far from its peak, and MKL's generic path on
// a CPU it does not recognise took 1.7x the time of this loop.) Small calls run on the
// calling thread: waking a second thread costs more than it saves, and on a busy machine it
// waits for a core.
#include "turn_scores.h"
#include "vec.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <type_traits>
#include <vector>

namespace rhea_kernels {

namespace {

// Latent rows per chunk: as many as fit in about kChunkBytes of fp32 (within L2), so a whole
// session at d=576 is one chunk.
constexpr int64_t kChunkBytes = int64_t{3} << 19;  // 1.5 MiB: L2 here is 2 MiB per core
constexpr int64_t kSerialMacs = int64_t{8} << 20;  // below this many multiply-adds, stay on one thread

template <typename scalar_t>
void score_rows(const scalar_t* vq, const scalar_t* vk, const bool* mask, const float* center,
                float* scores, int8_t* tiers, int64_t B, int64_t T, int64_t nq, int64_t nk,
                int64_t d, double tau_low, double tau_high) {
  const RowKernels& rk = row_kernels();
  // Centred, unit-norm queries in fp32: tiny next to vk, computed once per call. Rows padded to
  // 64-byte boundaries (see qk_dots).
  const int64_t ldq = padded_row(d);
  AlignedFloats qn(B * nq * ldq);
  for (int64_t r = 0; r < B * nq; ++r) {
    float* dst = qn.data() + r * ldq;
    const scalar_t* src = vq + r * d;
    for (int64_t x = 0; x < d; ++x) dst[x] = static_cast<float>(src[x]) - (center ? center[x] : 0.f);
    rk.scale(dst, d, 1.f / std::max(std::sqrt(rk.sumsq(dst, d)), kNormEps));
  }
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // Thresholds compared in fp32, as the reference (an fp32 tensor against a Python float) and
  // the Triton kernel do: the fused tiers equal score_tiers(scores) exactly.
  const float lo = static_cast<float>(tau_low), hi = static_cast<float>(tau_high);
  // fp32 rows without a centre are read in place; anything else is staged in fp32 once.
  const bool stage = center != nullptr || !std::is_same_v<scalar_t, float>;
  const int64_t ldk = stage ? padded_row(d) : d;  // staged rows start on 64-byte boundaries
  const int64_t chunk_rows = std::max<int64_t>(nk, kChunkBytes / (ldk * int64_t{sizeof(float)}));
  const int64_t tc = std::max<int64_t>(1, chunk_rows / nk);  // turns per chunk
  const int64_t chunks = (T + tc - 1) / tc;
  const int64_t macs = B * T * nk * nq * d;
  const int64_t grain = macs < kSerialMacs ? std::max<int64_t>(1, B * chunks) : 1;
  at::parallel_for(0, B * chunks, grain, [&](int64_t begin, int64_t end) {
    AlignedFloats buf(stage ? tc * nk * ldk : 0);
    std::vector<float> dots(nq * tc * nk), inv(tc * nk);  // inv: |k|^2, then 1/|k|
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / chunks, t0 = (task % chunks) * tc, t1 = std::min(T, t0 + tc);
      bool any = mask == nullptr;
      for (int64_t t = t0; t < t1 && !any; ++t) any = mask[b * T + t];
      if (any) {
        const int64_t rows = (t1 - t0) * nk;
        const scalar_t* src = vk + (b * T + t0) * nk * d;
        const float* K;
        if (stage) {
          float* dst = buf.data();
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t x = 0; x < d; ++x)
              dst[r * ldk + x] = static_cast<float>(src[r * d + x]) - (center ? center[x] : 0.f);
          K = dst;
        } else {
          K = reinterpret_cast<const float*>(src);
        }
        rk.qk_dots(qn.data() + b * nq * ldq, ldq, nq, K, ldk, rows, d, dots.data(), inv.data());
        for (int64_t r = 0; r < rows; ++r) inv[r] = 1.f / std::max(std::sqrt(inv[r]), kNormEps);
      }
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t bt = b * T + t;
        float best = neg_inf;
        if (mask == nullptr || mask[bt]) {
          const int64_t r0 = (t - t0) * nk;
          for (int64_t i = 0; i < nq; ++i) {
            const float* di = dots.data() + i * (t1 - t0) * nk + r0;
            for (int64_t j = 0; j < nk; ++j) best = std::max(best, di[j] * inv[r0 + j]);
          }
        }
        scores[bt] = best;
        if (tiers) tiers[bt] = best > hi ? 2 : (best < lo ? 0 : 1);
      }
    }
  });
}

void check_inputs(const at::Tensor& vq, const at::Tensor& vk, const std::optional<at::Tensor>& turn_mask,
                  const std::optional<at::Tensor>& center) {
  TORCH_CHECK(vq.dim() == 3, "vq must be [B, nq, d], got ", vq.sizes());
  TORCH_CHECK(vk.dim() == 4, "vk must be [B, T, nk, d], got ", vk.sizes());
  TORCH_CHECK(vq.size(0) == vk.size(0) && vq.size(2) == vk.size(3), "vq ", vq.sizes(), " and vk ",
              vk.sizes(), " disagree on B or d");
  TORCH_CHECK(vq.size(1) >= 1 && vk.size(2) >= 1 && vk.size(3) >= 1, "nq, nk and d must be >= 1, got vq ",
              vq.sizes(), " and vk ", vk.sizes());
  TORCH_CHECK(vq.scalar_type() == vk.scalar_type(), "vq and vk must share a dtype");
  TORCH_CHECK(vq.device().is_cpu() && vk.device().is_cpu(), "the C++ turn_scores kernel is the CPU implementation");
  if (turn_mask) TORCH_CHECK(turn_mask->sizes() == vk.sizes().slice(0, 2), "turn_mask must be [B, T]");
  if (center) TORCH_CHECK(center->dim() == 1 && center->size(0) == vq.size(2), "center must be [d]");
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> score_turns_cpu(const at::Tensor& vq_in, const at::Tensor& vk_in,
                                       const std::optional<at::Tensor>& turn_mask,
                                       const std::optional<at::Tensor>& center_in, double tau_low,
                                       double tau_high, bool with_tiers) {
  check_inputs(vq_in, vk_in, turn_mask, center_in);
  const at::Tensor vq = vq_in.contiguous(), vk = vk_in.contiguous();
  const int64_t B = vk.size(0), T = vk.size(1), nk = vk.size(2), d = vk.size(3), nq = vq.size(1);
  at::Tensor mask, center;
  if (turn_mask) mask = turn_mask->to(at::kBool).contiguous();
  if (center_in) center = center_in->to(at::kFloat).contiguous();
  at::Tensor scores = at::empty({B, T}, vk.options().dtype(at::kFloat));
  at::Tensor tiers = with_tiers ? at::empty({B, T}, vk.options().dtype(at::kChar)) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vk.scalar_type(), "rhea_kernels::turn_scores", [&] {
    score_rows<scalar_t>(vq.data_ptr<scalar_t>(), vk.data_ptr<scalar_t>(),
                         mask.defined() ? mask.data_ptr<bool>() : nullptr,
                         center.defined() ? center.data_ptr<float>() : nullptr, scores.data_ptr<float>(),
                         with_tiers ? tiers.data_ptr<int8_t>() : nullptr, B, T, nq, nk, d, tau_low, tau_high);
  });
  return {scores, tiers};
}

namespace {

at::Tensor turn_scores_cpu(const at::Tensor& vq, const at::Tensor& vk, const std::optional<at::Tensor>& turn_mask,
                           const std::optional<at::Tensor>& center) {
  return std::get<0>(score_turns_cpu(vq, vk, turn_mask, center, 0.0, 0.0, false));
}

}  // namespace

TORCH_LIBRARY_IMPL(rhea_kernels, CPU, m) { m.impl("turn_scores", &turn_scores_cpu); }

}  // namespace rhea_kernels
