// Turn scoring on CPU: one pass over the stored latents vk, OpenMP over (batch, turn).
//
// score[b, t] = max_{i,j} cos(vq[b,i] - c, vk[b,t,j] - c), norms floored at kNormEps;
// masked turns get -inf and tier 0. See rhea_kernels/reference.py for the definition.
#include "common.h"
#include "dots.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <type_traits>
#include <vector>

namespace rhea_kernels {

namespace {

template <typename scalar_t>
void score_rows(const scalar_t* vq, const scalar_t* vk, const bool* mask, const float* center,
                float* scores, int8_t* tiers, int64_t B, int64_t T, int64_t nq, int64_t nk,
                int64_t d, double tau_low, double tau_high) {
  // Centred, unit-norm queries in fp32: tiny next to vk, computed once per call.
  std::vector<float> qn(B * nq * d);
  at::parallel_for(0, B * nq, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* dst = qn.data() + r * d;
      const scalar_t* src = vq + r * d;
      for (int64_t x = 0; x < d; ++x) dst[x] = static_cast<float>(src[x]) - (center ? center[x] : 0.f);
      const float inv = 1.f / std::max(std::sqrt(dot(dst, dst, d)), kNormEps);
      for (int64_t x = 0; x < d; ++x) dst[x] *= inv;
    }
  });
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // Grain 4 turns: each turn is nk*d elements, enough work to amortise scheduling.
  const DotsFn dots_and_norm = pick_dots_and_norm();
  // fp32 rows without a centre are read in place; anything else is staged in fp32 once.
  const bool stage = center != nullptr || !std::is_same_v<scalar_t, float>;
  // Grain 4 turns: each turn is nk*d elements, enough work to amortise scheduling.
  at::parallel_for(0, B * T, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(stage ? d : 0), dots(nq);
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / T;
      float best = neg_inf;
      if (mask == nullptr || mask[bt]) {
        for (int64_t j = 0; j < nk; ++j) {
          const scalar_t* src = vk + (bt * nk + j) * d;
          const float* row;
          if (stage) {
            for (int64_t x = 0; x < d; ++x) buf[x] = static_cast<float>(src[x]) - (center ? center[x] : 0.f);
            row = buf.data();
          } else {
            row = reinterpret_cast<const float*>(src);
          }
          const float nrm2 = dots_and_norm(qn.data() + b * nq * d, nq, row, d, dots.data());
          const float inv = 1.f / std::max(std::sqrt(nrm2), kNormEps);
          for (int64_t i = 0; i < nq; ++i) best = std::max(best, dots[i] * inv);
        }
      }
      scores[bt] = best;
      if (tiers) tiers[bt] = best > tau_high ? 2 : (best < tau_low ? 0 : 1);
    }
  });
}

void check_inputs(const at::Tensor& vq, const at::Tensor& vk, const std::optional<at::Tensor>& turn_mask,
                  const std::optional<at::Tensor>& center) {
  TORCH_CHECK(vq.dim() == 3, "vq must be [B, nq, d], got ", vq.sizes());
  TORCH_CHECK(vk.dim() == 4, "vk must be [B, T, nk, d], got ", vk.sizes());
  TORCH_CHECK(vq.size(0) == vk.size(0) && vq.size(2) == vk.size(3), "vq ", vq.sizes(), " and vk ",
              vk.sizes(), " disagree on B or d");
  TORCH_CHECK(vq.scalar_type() == vk.scalar_type(), "vq and vk must share a dtype");
  TORCH_CHECK(vq.device().is_cpu() && vk.device().is_cpu(), "cpp_turn_scores is the CPU implementation");
  if (turn_mask) TORCH_CHECK(turn_mask->sizes() == vk.sizes().slice(0, 2), "turn_mask must be [B, T]");
  if (center) TORCH_CHECK(center->dim() == 1 && center->size(0) == vq.size(2), "center must be [d]");
}

std::tuple<at::Tensor, at::Tensor> run(const at::Tensor& vq_in, const at::Tensor& vk_in,
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
  at::Tensor tiers = at::empty({B, T}, vk.options().dtype(at::kChar));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, vk.scalar_type(), "cpp_turn_scores", [&] {
    score_rows<scalar_t>(vq.data_ptr<scalar_t>(), vk.data_ptr<scalar_t>(),
                         mask.defined() ? mask.data_ptr<bool>() : nullptr,
                         center.defined() ? center.data_ptr<float>() : nullptr, scores.data_ptr<float>(),
                         with_tiers ? tiers.data_ptr<int8_t>() : nullptr, B, T, nq, nk, d, tau_low, tau_high);
  });
  return {scores, tiers};
}

}  // namespace

at::Tensor turn_scores_cpu(const at::Tensor& vq, const at::Tensor& vk, const std::optional<at::Tensor>& turn_mask,
                           const std::optional<at::Tensor>& center) {
  return std::get<0>(run(vq, vk, turn_mask, center, 0.0, 0.0, false));
}

std::tuple<at::Tensor, at::Tensor> turn_scores_and_tiers_cpu(const at::Tensor& vq, const at::Tensor& vk,
                                                             const std::optional<at::Tensor>& turn_mask,
                                                             const std::optional<at::Tensor>& center,
                                                             double tau_low, double tau_high) {
  TORCH_CHECK(tau_low <= tau_high, "tau_low=", tau_low, " must be <= tau_high=", tau_high);
  return run(vq, vk, turn_mask, center, tau_low, tau_high, true);
}

}  // namespace rhea_kernels
