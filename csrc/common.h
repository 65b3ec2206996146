// Shared helpers for the rhea_kernels CPU (OpenMP) ops.
#pragma once

#include <torch/extension.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace rhea_kernels {

// Norm floor: a zero vector gets cosine 0 instead of NaN (same value as reference.EPS).
constexpr float kNormEps = 1e-12f;

}  // namespace rhea_kernels
