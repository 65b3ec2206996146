// Shared helpers for the rhea_kernels CPU (OpenMP) ops.
#pragma once

#include <torch/extension.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace rhea_kernels {

// Norm floor: a zero vector gets cosine 0 instead of NaN (same value as reference.EPS).
constexpr float kNormEps = 1e-12f;

// `omp simd reduction` lets the compiler vectorise float sums without -ffast-math.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// y += alpha * x
inline void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace rhea_kernels
