// Vectorised row kernels and a row-major GEMM wrapper for the CPU ops.
//
// setup.py compiles for baseline x86-64 (no -march=native: wheels are built on another
// machine), so the hot loops are written as plain loops that GCC auto-vectorises at -O3,
// stamped out three times with function-level `target` attributes (AVX-512, AVX2+FMA,
// baseline) and picked once at run time from the CPU's feature flags. Matrix products
// go to the BLAS torch ships (MKL on x86 wheels), see gemm_rm.
#pragma once

#include "common.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#define RHEA_INLINE inline __attribute__((always_inline))

namespace rhea_kernels {

// Fortran BLAS sgemm (LP64), which torch exports when built with MKL or OpenBLAS. Declared
// weak: where torch does not export it, the pointer is null and gemm_rm uses ATen's addmm.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc) __attribute__((weak));

// Row-major C[M, N] = alpha * op(A)[M, K] @ op(B)[K, N] + beta * C, op = transpose when t*.
// BLAS is column-major: a row-major X is the column-major X^T, so C^T = op(B)^T op(A)^T.
// Called inside at::parallel_for, where the BLAS runs single-threaded.
inline void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (sgemm_ != nullptr && std::max({M, N, K, lda, ldb, ldc}) < (int64_t{1} << 31)) {
    const char opa = tb ? 'T' : 'N', opb = ta ? 'T' : 'N';
    const int m = N, n = M, k = K, la = ldb, lb = lda, lc = ldc;
    sgemm_(&opa, &opb, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc);
    return;
  }
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor a = ta ? at::from_blob(const_cast<float*>(A), {M, K}, {1, lda}, opts)
                          : at::from_blob(const_cast<float*>(A), {M, K}, {lda, 1}, opts);
  const at::Tensor b = tb ? at::from_blob(const_cast<float*>(B), {K, N}, {1, ldb}, opts)
                          : at::from_blob(const_cast<float*>(B), {K, N}, {ldb, 1}, opts);
  at::Tensor c = at::from_blob(C, {M, N}, {ldc, 1}, opts);
  if (beta == 0.f) c.zero_();
  at::addmm_out(c, c, a, b, beta == 0.f ? 1.f : beta, alpha);
}

// exp(x) to ~2 ulp, branch-free so loops over it vectorise; exp(-inf) = 0 exactly.
// Cephes expf: x = n ln2 + r with |r| <= ln2/2, degree-6 polynomial, 2^n from exponent bits.
RHEA_INLINE float exp_approx(float x) {
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x < -87.0f ? 0.0f : p * scale;
}

// ------------------------------------------------------------ row kernels (generic bodies)

// Online-softmax step on one row of logits s[0, L) (already scaled): columns c < cP get
// +beta, columns c >= cV are masked. Overwrites s with exp(s - m_new) (0 where masked),
// updates the running max *m and sum *l, and returns exp(m_old - m_new), the factor that
// rescales the row's output accumulator.
RHEA_INLINE float softmax_step_body(float* s, int64_t L, int64_t cP, int64_t cV, float beta, float* m, float* l) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < cP; ++c) {
    s[c] += beta;
    mx = std::max(mx, s[c]);
  }
#pragma omp simd reduction(max : mx)
  for (int64_t c = cP; c < cV; ++c) mx = std::max(mx, s[c]);
  const float m_new = std::max(*m, mx);
  if (m_new == -std::numeric_limits<float>::infinity()) {  // nothing visible yet
    std::fill(s, s + L, 0.f);
    return 1.f;
  }
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < cV; ++c) {
    const float e = exp_approx(s[c] - m_new);
    s[c] = e;
    sum += e;
  }
  std::fill(s + cV, s + L, 0.f);
  const float alpha = exp_approx(*m - m_new);
  *l = *l * alpha + sum;
  *m = m_new;
  return alpha;
}

// Backward: probabilities from logits and the row's log-sum-exp (same bias/mask as above).
RHEA_INLINE void probs_body(float* s, int64_t L, int64_t cP, int64_t cV, float beta, float lse) {
  const float lb = lse - beta;
#pragma omp simd
  for (int64_t c = 0; c < cP; ++c) s[c] = exp_approx(s[c] - lb);
#pragma omp simd
  for (int64_t c = cP; c < cV; ++c) s[c] = exp_approx(s[c] - lse);
  std::fill(s + cV, s + L, 0.f);
}

// dp <- p * (dp - delta): the softmax backward of one row.
RHEA_INLINE void dsoftmax_body(const float* p, float* dp, int64_t L, float delta) {
#pragma omp simd
  for (int64_t c = 0; c < L; ++c) dp[c] = p[c] * (dp[c] - delta);
}

// sum of squares of x[0, n)
RHEA_INLINE float sumsq_body(const float* x, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += x[i] * x[i];
  return acc;
}

// y *= a
RHEA_INLINE void scale_body(float* y, int64_t n, float a) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

struct RowKernels {
  float (*softmax_step)(float*, int64_t, int64_t, int64_t, float, float*, float*);
  void (*probs)(float*, int64_t, int64_t, int64_t, float, float);
  void (*dsoftmax)(const float*, float*, int64_t, float);
  void (*scale)(float*, int64_t, float);
  float (*sumsq)(const float*, int64_t);
  const char* isa;
};

#define RHEA_STAMP_ROW_KERNELS(NS, TARGET)                                                                   \
  namespace NS {                                                                                            \
  TARGET inline float softmax_step(float* s, int64_t L, int64_t cP, int64_t cV, float beta, float* m,        \
                                   float* l) {                                                              \
    return softmax_step_body(s, L, cP, cV, beta, m, l);                                                     \
  }                                                                                                         \
  TARGET inline void probs(float* s, int64_t L, int64_t cP, int64_t cV, float beta, float lse) {            \
    probs_body(s, L, cP, cV, beta, lse);                                                                    \
  }                                                                                                         \
  TARGET inline void dsoftmax(const float* p, float* dp, int64_t L, float delta) {                          \
    dsoftmax_body(p, dp, L, delta);                                                                         \
  }                                                                                                         \
  TARGET inline void scale(float* y, int64_t n, float a) { scale_body(y, n, a); }                          \
  TARGET inline float sumsq(const float* x, int64_t n) { return sumsq_body(x, n); }                         \
  }

RHEA_STAMP_ROW_KERNELS(isa_default, )
#if defined(__x86_64__) && defined(__GNUC__)
#define RHEA_HAVE_X86_CLONES 1
RHEA_STAMP_ROW_KERNELS(isa_avx2, __attribute__((target("avx2,fma"))))
RHEA_STAMP_ROW_KERNELS(isa_avx512, __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))))
#endif
#undef RHEA_STAMP_ROW_KERNELS

// The best row kernels this CPU runs (chosen once).
inline const RowKernels& row_kernels() {
  static const RowKernels k = [] {
#define RHEA_ROW_KERNELS(NS) \
  RowKernels { &NS::softmax_step, &NS::probs, &NS::dsoftmax, &NS::scale, &NS::sumsq, #NS }
#ifdef RHEA_HAVE_X86_CLONES
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
      return RHEA_ROW_KERNELS(isa_avx512);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return RHEA_ROW_KERNELS(isa_avx2);
#endif
    return RHEA_ROW_KERNELS(isa_default);
#undef RHEA_ROW_KERNELS
  }();
  return k;
}

}  // namespace rhea_kernels
