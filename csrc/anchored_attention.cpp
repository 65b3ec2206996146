// Prefix-anchored attention on CPU (forward + backward), OpenMP via at::parallel_for.
//
// Key j is visible to query i iff j < P (P = prefix_len[b], clamped to [0, N]) or j <= i
// (or always when causal=false); its logit gets +beta iff j < P. GQA: query head h reads
// kv head h / (H / Hkv). Forward keeps O(N) memory per thread (one row of logits) and
// returns the log-sum-exp, which the backward uses to recompute probabilities.
#include "common.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace rhea_kernels {

namespace {

struct Dims {
  int64_t B, H, Hkv, N, D, group;
};

Dims check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& prefix_len) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be [B, H, N, D]");
  TORCH_CHECK(k.sizes() == v.sizes(), "k ", k.sizes(), " and v ", v.sizes(), " must match");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3),
              "q ", q.sizes(), " and k ", k.sizes(), " disagree on B, N or D");
  TORCH_CHECK(q.size(1) % k.size(1) == 0, "H=", q.size(1), " must be a multiple of Hkv=", k.size(1));
  TORCH_CHECK(prefix_len.dim() == 1 && prefix_len.size(0) == q.size(0), "prefix_len must be [B]");
  TORCH_CHECK(q.device().is_cpu(), "cpp_anchored_attention is the CPU implementation");
  return {q.size(0), q.size(1), k.size(1), q.size(2), q.size(3), q.size(1) / k.size(1)};
}

std::vector<int64_t> clamped_prefix(const at::Tensor& prefix_len, int64_t N) {
  at::Tensor p = prefix_len.to(at::kLong).contiguous();
  std::vector<int64_t> out(p.numel());
  for (int64_t b = 0; b < p.numel(); ++b) out[b] = std::clamp<int64_t>(p.data_ptr<int64_t>()[b], 0, N);
  return out;
}

// Number of keys visible to query i: the visible set is always a prefix [0, hi).
inline int64_t visible_end(int64_t i, int64_t P, int64_t N, bool causal) {
  return causal ? std::max(i + 1, P) : N;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> anchored_attention_fwd_cpu(const at::Tensor& q_in, const at::Tensor& k_in,
                                                             const at::Tensor& v_in, const at::Tensor& prefix_len,
                                                             double beta, bool causal, double scale) {
  const Dims s = check_inputs(q_in, k_in, v_in, prefix_len);
  const at::Tensor q = q_in.to(at::kFloat).contiguous(), k = k_in.to(at::kFloat).contiguous(),
                   v = v_in.to(at::kFloat).contiguous();
  const std::vector<int64_t> P = clamped_prefix(prefix_len, s.N);
  at::Tensor out = at::empty({s.B, s.H, s.N, s.D}, q.options());
  at::Tensor lse = at::empty({s.B, s.H, s.N}, q.options());
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  float *op = out.data_ptr<float>(), *lp = lse.data_ptr<float>();
  const float fscale = static_cast<float>(scale), fbeta = static_cast<float>(beta);
  // Grain of 16 rows: consecutive queries of one head reuse the same keys from cache.
  at::parallel_for(0, s.B * s.H * s.N, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> logits(s.N);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = row % s.N, bh = row / s.N, b = bh / s.H, h = bh % s.H;
      const int64_t kvh = b * s.Hkv + h / s.group;
      const float* qi = qp + row * s.D;
      const float* kb = kp + kvh * s.N * s.D;
      const float* vb = vp + kvh * s.N * s.D;
      const int64_t hi = visible_end(i, P[b], s.N, causal);
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < hi; ++j) {
        logits[j] = dot(qi, kb + j * s.D, s.D) * fscale + (j < P[b] ? fbeta : 0.f);
        m = std::max(m, logits[j]);
      }
      float* oi = op + row * s.D;
      std::fill(oi, oi + s.D, 0.f);
      float l = 0.f;
      for (int64_t j = 0; j < hi; ++j) {
        const float p = std::exp(logits[j] - m);
        l += p;
        axpy(p, vb + j * s.D, oi, s.D);
      }
      const float inv = 1.f / l;
      for (int64_t x = 0; x < s.D; ++x) oi[x] *= inv;
      lp[row] = m + std::log(l);
    }
  });
  return {out.to(q_in.scalar_type()), lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> anchored_attention_bwd_cpu(
    const at::Tensor& grad_out, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse_in, const at::Tensor& prefix_len, double beta, bool causal,
    double scale) {
  const Dims s = check_inputs(q_in, k_in, v_in, prefix_len);
  const at::Tensor q = q_in.to(at::kFloat).contiguous(), k = k_in.to(at::kFloat).contiguous(),
                   v = v_in.to(at::kFloat).contiguous(), dout = grad_out.to(at::kFloat).contiguous(),
                   lse = lse_in.to(at::kFloat).contiguous();
  // delta_i = dO_i . O_i, the softmax-backward row term.
  const at::Tensor delta = (dout * out_in.to(at::kFloat)).sum(-1).contiguous();
  const std::vector<int64_t> P = clamped_prefix(prefix_len, s.N);
  at::Tensor dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>(),
              *dop = dout.data_ptr<float>(), *lp = lse.data_ptr<float>(), *dlp = delta.data_ptr<float>();
  float *dqp = dq.data_ptr<float>(), *dkp = dk.data_ptr<float>(), *dvp = dv.data_ptr<float>();
  const float fscale = static_cast<float>(scale), fbeta = static_cast<float>(beta);
  // One task per (batch, kv head): it owns dK/dV of that head and dQ of its query group,
  // so no two threads ever write the same row (no atomics, deterministic).
  at::parallel_for(0, s.B * s.Hkv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bk = begin; bk < end; ++bk) {
      const int64_t b = bk / s.Hkv;
      const float* kb = kp + bk * s.N * s.D;
      const float* vb = vp + bk * s.N * s.D;
      float* dkb = dkp + bk * s.N * s.D;
      float* dvb = dvp + bk * s.N * s.D;
      for (int64_t g = 0; g < s.group; ++g) {
        const int64_t bh = b * s.H + (bk % s.Hkv) * s.group + g;
        for (int64_t i = 0; i < s.N; ++i) {
          const int64_t row = bh * s.N + i;
          const float *qi = qp + row * s.D, *doi = dop + row * s.D;
          float* dqi = dqp + row * s.D;
          const int64_t hi = visible_end(i, P[b], s.N, causal);
          for (int64_t j = 0; j < hi; ++j) {
            const float logit = dot(qi, kb + j * s.D, s.D) * fscale + (j < P[b] ? fbeta : 0.f);
            const float p = std::exp(logit - lp[row]);
            axpy(p, doi, dvb + j * s.D, s.D);
            const float ds = p * (dot(doi, vb + j * s.D, s.D) - dlp[row]) * fscale;
            axpy(ds, kb + j * s.D, dqi, s.D);
            axpy(ds, qi, dkb + j * s.D, s.D);
          }
        }
      }
    }
  });
  return {dq.to(q_in.scalar_type()), dk.to(k_in.scalar_type()), dv.to(v_in.scalar_type())};
}

}  // namespace rhea_kernels
