// Prefix-anchored attention on CPU (forward + backward): flash-style tiling. The C++ entry of
// the ops rhea_kernels::anchored_attention_fwd and rhea_kernels::anchored_attention_bwd
// (registered below for the CPU dispatch key; schemas, fake kernels, autograd and the Triton
// kernels are registered from rhea_kernels/anchored_attention/).
//
// Key j is visible to query i iff j < P (P = prefix_len[b], clamped to [0, N]) or j <= i
// (or always when causal=false); its logit gets +beta iff j < P. GQA: query head h reads
// kv head h / (H / Hkv), K/V are never repeated.
//
// Forward: tasks are (batch, head, query block), run with at::parallel_for (OpenMP). A task
// walks the key blocks with an online softmax: S = scale * Q_blk K_blk^T and O += P V_blk
// are GEMMs (cpublas), the softmax step is a vectorised row kernel (vec.h). The bias is
// added only in key blocks that overlap the prefix; key blocks that no query of the block
// can see (past the diagonal and the prefix) are never visited. Memory: O(block^2) per
// thread plus the [B, H, N] log-sum-exp, which the backward uses to recompute P.
//
// Backward: tasks are (batch, head); each recomputes P block by block and accumulates dQ,
// dK, dV with GEMMs. A task owns its head's dK/dV rows (per query head under GQA, then
// summed over each kv head's group), so no two threads write the same memory.
#include "vec.h"

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
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "H=", q.size(1), " must be a multiple of Hkv=",
              k.size(1));
  TORCH_CHECK(prefix_len.dim() == 1 && prefix_len.size(0) == q.size(0), "prefix_len must be [B]");
  TORCH_CHECK(q.device().is_cpu(), "the C++ anchored_attention kernel is the CPU implementation");
  return {q.size(0), q.size(1), k.size(1), q.size(2), q.size(3), q.size(1) / k.size(1)};
}

std::vector<int64_t> clamped_prefix(const at::Tensor& prefix_len, int64_t N) {
  at::Tensor p = prefix_len.to(at::kLong).contiguous();
  std::vector<int64_t> out(p.numel());
  for (int64_t b = 0; b < p.numel(); ++b) out[b] = std::clamp<int64_t>(p.data_ptr<int64_t>()[b], 0, N);
  return out;
}

// Block sizes as in ATen's CPU flash attention: big query blocks keep the GEMMs efficient,
// small ones keep short sequences parallel.
struct Blocks {
  int64_t q, kv;
};
inline Blocks block_sizes(int64_t N) { return {N >= 768 ? 256 : (N >= 192 ? 64 : 32), 512}; }

// Keys [0, end) hold every key some query in [m0, m0 + mlen) can see.
inline int64_t keys_end(int64_t m0, int64_t mlen, int64_t P, int64_t N, bool causal) {
  return causal ? std::min(N, std::max(P, m0 + mlen)) : N;
}

// In key block [n0, n0 + nlen), query i sees columns [0, cV); columns [0, cP) carry +beta.
inline void row_limits(int64_t i, int64_t n0, int64_t nlen, int64_t P, bool causal, int64_t* cP, int64_t* cV) {
  *cP = std::clamp<int64_t>(P - n0, 0, nlen);
  *cV = causal ? std::max(*cP, std::clamp<int64_t>(i - n0 + 1, 0, nlen)) : nlen;
}

// S[mlen, nlen] = scale * Q_blk K_blk^T for queries [m0, m0 + mlen) and keys [n0, n0 + nlen),
// then row_fn(r, cP, cV) on each row with its bias/visibility limits (see row_limits).
template <typename RowFn>
inline void logits_block(const float* qm, int64_t m0, int64_t mlen, const float* kb, int64_t n0, int64_t nlen,
                         int64_t D, float scale, int64_t P, bool causal, float* S, RowFn&& row_fn) {
  gemm_rm(false, true, mlen, nlen, D, scale, qm, D, kb + n0 * D, D, 0.f, S, nlen);
  for (int64_t r = 0; r < mlen; ++r) {
    int64_t cP, cV;
    row_limits(m0 + r, n0, nlen, P, causal, &cP, &cV);
    row_fn(r, cP, cV);
  }
}

at::Tensor f32(const at::Tensor& t) { return t.to(at::kFloat).contiguous(); }

}  // namespace

namespace {

std::tuple<at::Tensor, at::Tensor> anchored_attention_fwd_cpu(const at::Tensor& q_in, const at::Tensor& k_in,
                                                             const at::Tensor& v_in, const at::Tensor& prefix_len,
                                                             double beta, bool causal, double scale) {
  const Dims s = check_inputs(q_in, k_in, v_in, prefix_len);
  const at::Tensor q = f32(q_in), k = f32(k_in), v = f32(v_in);
  const std::vector<int64_t> P = clamped_prefix(prefix_len, s.N);
  at::Tensor out = at::empty({s.B, s.H, s.N, s.D}, q.options());
  at::Tensor lse = at::empty({s.B, s.H, s.N}, q.options());
  if (s.N == 0 || s.D == 0 || q.numel() == 0) return {out.zero_().to(q_in.scalar_type()), lse.fill_(-INFINITY)};
  const Blocks blk = block_sizes(s.N);
  const int64_t nqb = (s.N + blk.q - 1) / blk.q;
  const int64_t kvb = std::min(blk.kv, s.N);
  // Per-thread scratch: logits [q, kv], running max and sum [q], output accumulator [q, D].
  const int64_t scratch = blk.q * kvb + 2 * blk.q + blk.q * s.D;
  std::vector<float> buf(at::get_num_threads() * scratch);
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  float *op = out.data_ptr<float>(), *lp = lse.data_ptr<float>();
  const float fscale = static_cast<float>(scale), fbeta = static_cast<float>(beta);
  const RowKernels& rk = row_kernels();
  at::parallel_for(0, s.B * s.H * nqb, 1, [&](int64_t begin, int64_t end) {
    float* S = buf.data() + at::get_thread_num() * scratch;
    float *mrow = S + blk.q * kvb, *lrow = mrow + blk.q, *acc = lrow + blk.q;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t qb = task % nqb, bh = task / nqb, b = bh / s.H, h = bh % s.H;
      const int64_t m0 = qb * blk.q, mlen = std::min(blk.q, s.N - m0);
      const int64_t kv_end = keys_end(m0, mlen, P[b], s.N, causal);
      const float* qm = qp + (bh * s.N + m0) * s.D;
      const float* kb = kp + (b * s.Hkv + h / s.group) * s.N * s.D;
      const float* vb = vp + (b * s.Hkv + h / s.group) * s.N * s.D;
      std::fill(mrow, mrow + mlen, -std::numeric_limits<float>::infinity());
      std::fill(lrow, lrow + mlen, 0.f);
      for (int64_t n0 = 0; n0 < kv_end; n0 += kvb) {
        const int64_t nlen = std::min(kvb, kv_end - n0);
        logits_block(qm, m0, mlen, kb, n0, nlen, s.D, fscale, P[b], causal, S,
                     [&](int64_t r, int64_t cP, int64_t cV) {
                       const float alpha = rk.softmax_step(S + r * nlen, nlen, cP, cV, fbeta, mrow + r, lrow + r);
                       if (n0 > 0 && alpha != 1.f) rk.scale(acc + r * s.D, s.D, alpha);
                     });
        gemm_rm(false, false, mlen, s.D, nlen, 1.f, S, nlen, vb + n0 * s.D, s.D, n0 == 0 ? 0.f : 1.f, acc, s.D);
      }
      float* om = op + (bh * s.N + m0) * s.D;
      for (int64_t r = 0; r < mlen; ++r) {
        std::copy(acc + r * s.D, acc + (r + 1) * s.D, om + r * s.D);
        rk.scale(om + r * s.D, s.D, 1.f / lrow[r]);
        lp[bh * s.N + m0 + r] = mrow[r] + std::log(lrow[r]);
      }
    }
  });
  return {out.to(q_in.scalar_type()), lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> anchored_attention_bwd_cpu(
    const at::Tensor& grad_out, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse_in, const at::Tensor& prefix_len, double beta, bool causal,
    double scale) {
  const Dims s = check_inputs(q_in, k_in, v_in, prefix_len);
  const at::Tensor q = f32(q_in), k = f32(k_in), v = f32(v_in), dout = f32(grad_out), lse = f32(lse_in);
  // delta_i = dO_i . O_i, the softmax-backward row term.
  const at::Tensor delta = (dout * out_in.to(at::kFloat)).sum(-1).contiguous();
  const std::vector<int64_t> P = clamped_prefix(prefix_len, s.N);
  at::Tensor dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
  // Under GQA each query head accumulates its own dK/dV, summed over the group at the end.
  at::Tensor dkh = s.group == 1 ? dk : at::zeros_like(q), dvh = s.group == 1 ? dv : at::zeros_like(q);
  if (s.N > 0 && s.D > 0 && q.numel() > 0) {
    const Blocks blk = block_sizes(s.N);
    const int64_t kvb = std::min(blk.kv, s.N);
    const int64_t scratch = 2 * blk.q * kvb;  // P and dP blocks
    std::vector<float> buf(at::get_num_threads() * scratch);
    const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>(),
                *dop = dout.data_ptr<float>(), *lp = lse.data_ptr<float>(), *dlp = delta.data_ptr<float>();
    float *dqp = dq.data_ptr<float>(), *dkp = dkh.data_ptr<float>(), *dvp = dvh.data_ptr<float>();
    const float fscale = static_cast<float>(scale), fbeta = static_cast<float>(beta);
    const RowKernels& rk = row_kernels();
    at::parallel_for(0, s.B * s.H, 1, [&](int64_t begin, int64_t end) {
      float* Pm = buf.data() + at::get_thread_num() * scratch;
      float* dP = Pm + blk.q * kvb;
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / s.H, h = bh % s.H;
        const int64_t kvh = b * s.Hkv + h / s.group;
        const float *kb = kp + kvh * s.N * s.D, *vb = vp + kvh * s.N * s.D;
        const int64_t gh = s.group == 1 ? kvh : bh;  // the rows of dkh/dvh this task owns
        float *dkb = dkp + gh * s.N * s.D, *dvb = dvp + gh * s.N * s.D;
        for (int64_t m0 = 0; m0 < s.N; m0 += blk.q) {
          const int64_t mlen = std::min(blk.q, s.N - m0), row0 = bh * s.N + m0;
          const float *qm = qp + row0 * s.D, *dom = dop + row0 * s.D;
          float* dqm = dqp + row0 * s.D;
          const int64_t kv_end = keys_end(m0, mlen, P[b], s.N, causal);
          for (int64_t n0 = 0; n0 < kv_end; n0 += kvb) {
            const int64_t nlen = std::min(kvb, kv_end - n0);
            logits_block(qm, m0, mlen, kb, n0, nlen, s.D, fscale, P[b], causal, Pm,
                         [&](int64_t r, int64_t cP, int64_t cV) {
                           rk.probs(Pm + r * nlen, nlen, cP, cV, fbeta, lp[row0 + r]);
                         });
            // dV += P^T dO; dP = dO V^T; dS = P * (dP - delta); dQ += scale dS K; dK += scale dS^T Q
            gemm_rm(true, false, nlen, s.D, mlen, 1.f, Pm, nlen, dom, s.D, 1.f, dvb + n0 * s.D, s.D);
            gemm_rm(false, true, mlen, nlen, s.D, 1.f, dom, s.D, vb + n0 * s.D, s.D, 0.f, dP, nlen);
            for (int64_t r = 0; r < mlen; ++r) rk.dsoftmax(Pm + r * nlen, dP + r * nlen, nlen, dlp[row0 + r]);
            gemm_rm(false, false, mlen, s.D, nlen, fscale, dP, nlen, kb + n0 * s.D, s.D, 1.f, dqm, s.D);
            gemm_rm(true, false, nlen, s.D, mlen, fscale, dP, nlen, qm, s.D, 1.f, dkb + n0 * s.D, s.D);
          }
        }
      }
    });
    if (s.group > 1) {
      dk = dkh.view({s.B, s.Hkv, s.group, s.N, s.D}).sum(2);
      dv = dvh.view({s.B, s.Hkv, s.group, s.N, s.D}).sum(2);
    }
  }
  return {dq.to(q_in.scalar_type()), dk.to(k_in.scalar_type()), dv.to(v_in.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(rhea_kernels, CPU, m) {
  m.impl("anchored_attention_fwd", &anchored_attention_fwd_cpu);
  m.impl("anchored_attention_bwd", &anchored_attention_bwd_cpu);
}

}  // namespace rhea_kernels
