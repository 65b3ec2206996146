// The turn-scoring pass shared by the ops rhea_kernels::turn_scores (csrc/turn_scores.cpp)
// and rhea_kernels::turn_scores_and_tiers (csrc/score_tiers.cpp).
#pragma once

#include "common.h"

#include <optional>
#include <tuple>

namespace rhea_kernels {

// (fp32 scores [B, T], int8 tiers [B, T] when with_tiers, else an undefined tensor).
std::tuple<at::Tensor, at::Tensor> score_turns_cpu(const at::Tensor& vq, const at::Tensor& vk,
                                                   const std::optional<at::Tensor>& turn_mask,
                                                   const std::optional<at::Tensor>& center, double tau_low,
                                                   double tau_high, bool with_tiers);

}  // namespace rhea_kernels
