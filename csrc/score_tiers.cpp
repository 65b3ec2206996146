// The C++ entry of the op rhea_kernels::turn_scores_and_tiers on CPU: the turn-scoring pass
// (csrc/turn_scores.cpp) with the tiers written in the same loop (2 RAW if s > tau_high,
// 0 DROP if s < tau_low, else 1 LATENT; masked turns 0). Schema, fake kernel and the CUDA
// (Triton) kernel are registered from rhea_kernels/score_tiers/.
#include "turn_scores.h"

namespace rhea_kernels {

namespace {

std::tuple<at::Tensor, at::Tensor> turn_scores_and_tiers_cpu(const at::Tensor& vq, const at::Tensor& vk,
                                                             const std::optional<at::Tensor>& turn_mask,
                                                             const std::optional<at::Tensor>& center,
                                                             double tau_low, double tau_high) {
  TORCH_CHECK(tau_low <= tau_high, "tau_low=", tau_low, " must be <= tau_high=", tau_high);
  return score_turns_cpu(vq, vk, turn_mask, center, tau_low, tau_high, true);
}

}  // namespace

TORCH_LIBRARY_IMPL(rhea_kernels, CPU, m) { m.impl("turn_scores_and_tiers", &turn_scores_and_tiers_cpu); }

}  // namespace rhea_kernels
