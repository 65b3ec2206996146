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
#include <cstdint>
#include <cstring>
#include <vector>

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

// GCC vector types: each stamped ISA below picks the widest its registers hold, so one generic
// body compiles to AVX-512 (zmm), AVX + FMA (ymm) or SSE2 (xmm) code; `a * b + c` is fused into
// an FMA wherever the target has one (-ffp-contract=fast is GCC's default).
// (-Wpsabi: these helpers pass vectors by value but are always inlined, so no call ABI is involved.)
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float vf4 __attribute__((vector_size(16)));
typedef float vf8 __attribute__((vector_size(32)));
typedef float vf16 __attribute__((vector_size(64)));

template <typename V>
RHEA_INLINE V load_v(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// Sum of a vector's lanes by halving (v + v with its halves swapped, then quarters, ...): log2(W)
// shuffle-adds instead of spilling the vector and adding W scalars one after another. The masks
// are literals: built in a loop, GCC assembled them at run time inside the hot loop.
typedef int vi4 __attribute__((vector_size(16)));
typedef int vi8 __attribute__((vector_size(32)));
typedef int vi16 __attribute__((vector_size(64)));

RHEA_INLINE float hsum_v(vf4 v) {
  v += __builtin_shuffle(v, vi4{2, 3, 0, 1});
  v += __builtin_shuffle(v, vi4{1, 0, 3, 2});
  return v[0];
}

RHEA_INLINE float hsum_v(vf8 v) {
  v += __builtin_shuffle(v, vi8{4, 5, 6, 7, 0, 1, 2, 3});
  v += __builtin_shuffle(v, vi8{2, 3, 0, 1, 6, 7, 4, 5});
  v += __builtin_shuffle(v, vi8{1, 0, 3, 2, 5, 4, 7, 6});
  return v[0];
}

RHEA_INLINE float hsum_v(vf16 v) {
  v += __builtin_shuffle(v, vi16{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
  v += __builtin_shuffle(v, vi16{4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
  v += __builtin_shuffle(v, vi16{2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
  v += __builtin_shuffle(v, vi16{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14});
  return v[0];
}

// dots[i * ldd + r] += q_i . K_r over columns [x0, x1) for the NB queries q_i = q + i * ldq and
// rows K_r = K + r * ldk, r < rows; with NORM also sq[r] += |K_r|^2 over the same columns.
// Register-blocked: each K element is loaded once and meets the NB queries (held in L1) in NB
// vector FMAs, so the loop is FMA-bound rather than load-bound.
template <typename V, int NB, bool NORM>
RHEA_INLINE void qk_block_body(const float* q, int64_t ldq, const float* K, int64_t ldk, int64_t rows, int64_t x0,
                               int64_t x1, float* dots, int64_t ldd, float* sq) {
  constexpr int64_t W = sizeof(V) / sizeof(float);
  const int64_t xv = x0 + (x1 - x0) / W * W;
  for (int64_t r = 0; r < rows; ++r) {
    const float* k = K + r * ldk;
    V acc[NB], nrm = {};
    for (int i = 0; i < NB; ++i) acc[i] = V{};
    for (int64_t x = x0; x < xv; x += W) {
      const V kv = load_v<V>(k + x);
      if (NORM) nrm += kv * kv;
      for (int i = 0; i < NB; ++i) acc[i] += load_v<V>(q + i * ldq + x) * kv;
    }
    for (int i = 0; i < NB; ++i) {
      float s = hsum_v(acc[i]);
      for (int64_t x = xv; x < x1; ++x) s += q[i * ldq + x] * k[x];
      dots[i * ldd + r] += s;
    }
    if (NORM) {
      float s = hsum_v(nrm);
      for (int64_t x = xv; x < x1; ++x) s += k[x] * k[x];
      sq[r] += s;
    }
  }
}

// A float buffer whose data() starts on a 64-byte boundary (std::vector only promises 16).
class AlignedFloats {
 public:
  explicit AlignedFloats(int64_t n) : raw_(n + 16) {
    const auto p = reinterpret_cast<std::uintptr_t>(raw_.data());
    ptr_ = raw_.data() + ((64 - p % 64) % 64) / sizeof(float);
  }
  float* data() { return ptr_; }

 private:
  std::vector<float> raw_;
  float* ptr_;
};

// Floats per row so that every row of a [rows, d] buffer starts on a 64-byte boundary.
inline int64_t padded_row(int64_t d) { return (d + 15) / 16 * 16; }

// Columns per pass of qk_dots: 8 queries x 768 fp32 = 24 KiB stay in a 32 KiB L1 while K streams.
constexpr int64_t kDotColumns = 768;

// dots[i * rows + r] = q_i . K_r for every query i < nq and row r < rows (q_i = q + i * ldq,
// K_r = K + r * ldk, d columns each), and sq[r] = |K_r|^2: queries in register blocks of
// 8/4/2/1, columns in passes of kDotColumns. Rows starting on 64-byte boundaries matter: a vector
// load that straddles two cache lines costs two, and made this loop 1.5x slower (AMD Zen 4).
template <typename V>
RHEA_INLINE void qk_dots_body(const float* q, int64_t ldq, int64_t nq, const float* K, int64_t ldk, int64_t rows,
                              int64_t d, float* dots, float* sq) {
  std::fill(dots, dots + nq * rows, 0.f);
  std::fill(sq, sq + rows, 0.f);
  for (int64_t x0 = 0; x0 < d; x0 += kDotColumns) {
    const int64_t x1 = std::min(d, x0 + kDotColumns);
    for (int64_t i = 0; i < nq;) {
      const int64_t left = nq - i;
      const float* qi = q + i * ldq;
      float* di = dots + i * rows;
      const bool first = i == 0;
#define RHEA_QK(NB)                                                                   \
  (first ? qk_block_body<V, NB, true>(qi, ldq, K, ldk, rows, x0, x1, di, rows, sq)    \
         : qk_block_body<V, NB, false>(qi, ldq, K, ldk, rows, x0, x1, di, rows, sq)), \
      i += NB
      if (left >= 8) RHEA_QK(8);
      else if (left >= 4) RHEA_QK(4);
      else if (left >= 2) RHEA_QK(2);
      else RHEA_QK(1);
#undef RHEA_QK
    }
  }
}

// Columns per pass of linear_rows: 4 rows of x x 3072 fp32 = 48 KiB stay in L2 beside the weight block.
constexpr int64_t kLinearColumns = 3072;

// y[i * ldy + r] += x_i . W_r over columns [x0, x1) for NB rows x_i = x + i * ldx and RB weight rows
// W_r = W + r * ldw at a time (rows r < rows; a last block of fewer than RB weight rows one by one).
// RB x NB accumulators: each loaded weight vector meets NB rows of x and each x vector RB weight rows,
// and the RB * NB FMA chains are independent, so neither the loads nor one chain's latency bind:
// at NB = 4 (RB = 3: 12 accumulators + 3 weight vectors + 1 of x = the 16 AVX2 registers) one core
// streamed Qwen2.5-1.5B's 1536 x 8960 MLP weights for 8 rows about 2x faster than one weight row at a
// time with 8 rows of x (csrc/decode_linear.cpp).
template <typename V, int RB, int NB>
RHEA_INLINE void linear_block_body(const float* x, int64_t ldx, const float* W, int64_t ldw, int64_t rows,
                                   int64_t x0, int64_t x1, float* y, int64_t ldy) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  const int64_t xv = x0 + (x1 - x0) / L * L;
  int64_t r = 0;
  for (; r + RB <= rows; r += RB) {
    const float* w = W + r * ldw;
    V acc[RB][NB];
    for (int j = 0; j < RB; ++j)
      for (int i = 0; i < NB; ++i) acc[j][i] = V{};
    for (int64_t c = x0; c < xv; c += L) {
      V wv[RB];
      for (int j = 0; j < RB; ++j) wv[j] = load_v<V>(w + j * ldw + c);
      for (int i = 0; i < NB; ++i) {
        const V xv_i = load_v<V>(x + i * ldx + c);
        for (int j = 0; j < RB; ++j) acc[j][i] += xv_i * wv[j];
      }
    }
    for (int j = 0; j < RB; ++j)
      for (int i = 0; i < NB; ++i) {
        float s = hsum_v(acc[j][i]);
        for (int64_t c = xv; c < x1; ++c) s += x[i * ldx + c] * w[j * ldw + c];
        y[i * ldy + r + j] += s;
      }
  }
  if (r < rows) qk_block_body<V, NB, false>(x, ldx, W + r * ldw, ldw, rows - r, x0, x1, y + r, ldy, nullptr);
}

// y[i * ldy + n] += x_i . W_n for every row i < M of x (x_i = x + i * ldx) and every output
// n in [n0, n1) (W_n = W + n * ldw, K columns each): a linear layer's product for a few rows, as
// in decoding, where a BLAS GEMM is far from both its compute and its memory bound. Columns in passes
// of kLinearColumns; rows of x in blocks of 4 (3 weight rows at a time), then 2 (6), then 1 (8):
// linear_block_body. The caller keeps [n0, n1) small (a few dozen weight rows), so a block of weights
// is read from memory once and from cache by the next blocks of x.
template <typename V>
RHEA_INLINE void linear_rows_body(const float* x, int64_t ldx, int64_t M, const float* W, int64_t ldw, int64_t K,
                                  int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const float* Wn = W + n0 * ldw;
  for (int64_t x0 = 0; x0 < K; x0 += kLinearColumns) {
    const int64_t x1 = std::min(K, x0 + kLinearColumns);
    for (int64_t i = 0; i < M;) {
      const int64_t left = M - i;
      const float* xi = x + i * ldx;
      float* yi = y + i * ldy + n0;
      if (left >= 4) linear_block_body<V, 3, 4>(xi, ldx, Wn, ldw, n1 - n0, x0, x1, yi, ldy), i += 4;
      else if (left >= 2) linear_block_body<V, 6, 2>(xi, ldx, Wn, ldw, n1 - n0, x0, x1, yi, ldy), i += 2;
      else linear_block_body<V, 8, 1>(xi, ldx, Wn, ldw, n1 - n0, x0, x1, yi, ldy), i += 1;
    }
  }
}

struct RowKernels {
  float (*softmax_step)(float*, int64_t, int64_t, int64_t, float, float*, float*);
  void (*probs)(float*, int64_t, int64_t, int64_t, float, float);
  void (*dsoftmax)(const float*, float*, int64_t, float);
  void (*scale)(float*, int64_t, float);
  float (*sumsq)(const float*, int64_t);
  void (*qk_dots)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, float*, float*);
  void (*linear_rows)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, float*,
                      int64_t);
  const char* isa;
};

#define RHEA_STAMP_ROW_KERNELS(NS, TARGET, VEC)                                                                 \
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
  TARGET inline void qk_dots(const float* q, int64_t ldq, int64_t nq, const float* K, int64_t ldk, int64_t rows, \
                             int64_t d, float* dots, float* sq) {                                           \
    qk_dots_body<VEC>(q, ldq, nq, K, ldk, rows, d, dots, sq);                                               \
  }                                                                                                         \
  TARGET inline void linear_rows(const float* x, int64_t ldx, int64_t M, const float* W, int64_t ldw,        \
                                 int64_t K, int64_t n0, int64_t n1, float* y, int64_t ldy) {                \
    linear_rows_body<VEC>(x, ldx, M, W, ldw, K, n0, n1, y, ldy);                                            \
  }                                                                                                         \
  }

RHEA_STAMP_ROW_KERNELS(isa_default, , vf4)
#if defined(__x86_64__) && defined(__GNUC__)
#define RHEA_HAVE_X86_CLONES 1
RHEA_STAMP_ROW_KERNELS(isa_avx2, __attribute__((target("avx2,fma"))), vf8)
RHEA_STAMP_ROW_KERNELS(isa_avx512, __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))), vf16)
#endif
#undef RHEA_STAMP_ROW_KERNELS

// The best row kernels this CPU runs (chosen once).
inline const RowKernels& row_kernels() {
  static const RowKernels k = [] {
#define RHEA_ROW_KERNELS(NS) \
  RowKernels { &NS::softmax_step, &NS::probs, &NS::dsoftmax, &NS::scale, &NS::sumsq, &NS::qk_dots, \
             &NS::linear_rows, #NS }
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
