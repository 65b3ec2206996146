// dots_and_norm: the inner loop of turn scoring, with an AVX2+FMA path chosen at run time.
//
// setup.py compiles for baseline x86-64 (SSE2, no FMA), so the hot loop is compiled with a
// function-level target attribute and picked only when the CPU reports AVX2 and FMA.
#pragma once

#include "common.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RHEA_HAVE_AVX2_PATH 1
#endif

namespace rhea_kernels {

// dots[i] = q[i*d : (i+1)*d] . row for i < nq; returns row . row. Portable version.
inline float dots_and_norm_generic(const float* q, int64_t nq, const float* row, int64_t d, float* dots) {
  for (int64_t i = 0; i < nq; ++i) dots[i] = dot(q + i * d, row, d);
  return dot(row, row, d);
}

#ifdef RHEA_HAVE_AVX2_PATH
__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// NI queries per sweep over the row: each row chunk is loaded once and feeds NI
// independent FMA chains (8 chains hide the FMA latency); the norm rides on the first sweep.
template <int NI>
__attribute__((target("avx2,fma"))) inline void dots_tile_avx2(const float* q, const float* row, int64_t d,
                                                               float* dots, float* nrm2) {
  const int64_t dv = d - d % 8;
  __m256 acc[NI];
  __m256 nrm = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < NI; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t x = 0; x < dv; x += 8) {
    const __m256 r = _mm256_loadu_ps(row + x);
#pragma GCC unroll 8
    for (int i = 0; i < NI; ++i) acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(q + i * d + x), r, acc[i]);
    if (nrm2) nrm = _mm256_fmadd_ps(r, r, nrm);
  }
  for (int i = 0; i < NI; ++i) {
    float s = hsum256(acc[i]);
    for (int64_t x = dv; x < d; ++x) s += q[i * d + x] * row[x];
    dots[i] = s;
  }
  if (nrm2) {
    float s = hsum256(nrm);
    for (int64_t x = dv; x < d; ++x) s += row[x] * row[x];
    *nrm2 = s;
  }
}

__attribute__((target("avx2,fma"))) inline float dots_and_norm_avx2(const float* q, int64_t nq, const float* row,
                                                                    int64_t d, float* dots) {
  float nrm2 = 0.f;
  for (int64_t i0 = 0; i0 < nq;) {
    const int64_t rem = nq - i0;
    float* n = i0 == 0 ? &nrm2 : nullptr;
    const int ni = rem >= 8 ? 8 : rem >= 4 ? 4 : rem >= 2 ? 2 : 1;
    switch (ni) {
      case 8: dots_tile_avx2<8>(q + i0 * d, row, d, dots + i0, n); break;
      case 4: dots_tile_avx2<4>(q + i0 * d, row, d, dots + i0, n); break;
      case 2: dots_tile_avx2<2>(q + i0 * d, row, d, dots + i0, n); break;
      default: dots_tile_avx2<1>(q + i0 * d, row, d, dots + i0, n); break;
    }
    i0 += ni;
  }
  return nrm2;
}
#endif

using DotsFn = float (*)(const float*, int64_t, const float*, int64_t, float*);

inline DotsFn pick_dots_and_norm() {
#ifdef RHEA_HAVE_AVX2_PATH
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &dots_and_norm_avx2;
#endif
  return &dots_and_norm_generic;
}

}  // namespace rhea_kernels
