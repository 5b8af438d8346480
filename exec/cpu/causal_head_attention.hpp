// One (sample, head) of causal self-attention through BLAS GEMMs, shared by the multi-head
// (attention.hpp) and grouped-query (gqa_attention.hpp) kernels; the formulas are theirs:
//   S = scale Q K^T,  att = row-softmax of S over the visible prefix t2 <= t (0 beyond),
//   out = (att o Z) V                                       (Z: dropout factors, 1 without)
// backward (llm.c attention_backward; softmax in its closed form):
//   dV += (att o Z)^T dout,  dA = (dout V^T) o Z,  dS = att o (dA - rowsum(att o dA)) scale,
//   dQ += dS K,  dK += dS^T Q
// QK^T and dout V^T are GEMMs over the full T x T square whose masked (t2 > t) entries are then
// overwritten: at these sizes one square GEMM beats T prefix-length GEMVs; the masked entries of
// att and dS are exact zeros, so the other GEMMs over the square add nothing for them.
// Q, K, V, dQ, dK, dV are [T, D] with leading dimension ld_qkv (columns of a fused QKV row);
// out and dout are [T, D] with leading dimension ld_out; scores and att are [T, T].
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "exec/cpu/gemm.hpp"

namespace traintwin::exec::cpu {

/// Forward of one head: writes scores (masked entries -inf; may alias att), att (masked entries
/// 0) and out. `factors(t)` returns the dropout factors of query row t for keys 0..t, or null for
/// no dropout; `weighted` is scratch of T x T used only with dropout.
template <typename Scalar, typename Factors>
void causal_head_attention_forward(Scalar* out, int64_t ld_out, Scalar* scores, Scalar* att,
                                   const Scalar* q, const Scalar* k, const Scalar* v,
                                   int64_t ld_qkv, int64_t seq, int64_t head_dim, Scalar scale,
                                   Factors&& factors, std::vector<Scalar>& weighted) {
  const Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  gemm(CblasNoTrans, CblasTrans, seq, seq, head_dim, scale, q, ld_qkv, k, ld_qkv, Scalar{0},
       scores, seq);
  bool dropped = false;
  for (int64_t t = 0; t < seq; ++t) {
    Scalar* s = scores + t * seq;
    Scalar* a = att + t * seq;
    Scalar max = neg_inf;
    for (int64_t t2 = 0; t2 <= t; ++t2) max = s[t2] > max ? s[t2] : max;
    Scalar sum = 0;
    for (int64_t t2 = 0; t2 <= t; ++t2) {
      const Scalar e = std::exp(s[t2] - max);
      a[t2] = e;  // s and a may alias: s[t2] is read before
      sum += e;
    }
    const Scalar inv = sum == Scalar{0} ? Scalar{0} : Scalar{1} / sum;
    for (int64_t t2 = 0; t2 <= t; ++t2) a[t2] *= inv;
    if (scores != att) {
      for (int64_t t2 = t + 1; t2 < seq; ++t2) s[t2] = neg_inf;
    }
    for (int64_t t2 = t + 1; t2 < seq; ++t2) a[t2] = 0;
    if (const Scalar* z = factors(t); z != nullptr) {
      if (!dropped) weighted.assign(static_cast<size_t>(seq * seq), Scalar{0});
      dropped = true;
      Scalar* w = weighted.data() + t * seq;
      for (int64_t t2 = 0; t2 <= t; ++t2) w[t2] = a[t2] * z[t2];
    }
  }
  gemm(CblasNoTrans, CblasNoTrans, seq, head_dim, seq, Scalar{1},
       dropped ? weighted.data() : att, seq, v, ld_qkv, Scalar{0}, out, ld_out);
}

/// Backward of one head: accumulates (+=) into dq, dk, dv. `factors` as in the forward (the
/// forward's mask); `weighted` and `dscores` are scratch (T x T).
template <typename Scalar, typename Factors>
void causal_head_attention_backward(Scalar* dq, Scalar* dk, Scalar* dv, const Scalar* dout,
                                    int64_t ld_out, const Scalar* att, const Scalar* q,
                                    const Scalar* k, const Scalar* v, int64_t ld_qkv, int64_t seq,
                                    int64_t head_dim, Scalar scale, Factors&& factors,
                                    std::vector<Scalar>& weighted, std::vector<Scalar>& dscores) {
  dscores.resize(static_cast<size_t>(seq * seq));
  Scalar* ds = dscores.data();
  // dA = dout V^T over the square.
  gemm(CblasNoTrans, CblasTrans, seq, seq, head_dim, Scalar{1}, dout, ld_out, v, ld_qkv,
       Scalar{0}, ds, seq);
  bool dropped = false;
  for (int64_t t = 0; t < seq; ++t) {
    const Scalar* a = att + t * seq;
    Scalar* d = ds + t * seq;
    const Scalar* z = factors(t);
    if (z != nullptr) {
      if (!dropped) weighted.assign(static_cast<size_t>(seq * seq), Scalar{0});
      dropped = true;
      Scalar* w = weighted.data() + t * seq;
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        w[t2] = a[t2] * z[t2];
        d[t2] *= z[t2];
      }
    }
    Scalar att_datt = 0;
    for (int64_t t2 = 0; t2 <= t; ++t2) att_datt += a[t2] * d[t2];
    for (int64_t t2 = 0; t2 <= t; ++t2) d[t2] = a[t2] * (d[t2] - att_datt) * scale;
    for (int64_t t2 = t + 1; t2 < seq; ++t2) d[t2] = 0;
  }
  gemm(CblasTrans, CblasNoTrans, seq, head_dim, seq, Scalar{1}, dropped ? weighted.data() : att,
       seq, dout, ld_out, Scalar{1}, dv, ld_qkv);
  gemm(CblasNoTrans, CblasNoTrans, seq, head_dim, seq, Scalar{1}, ds, seq, k, ld_qkv, Scalar{1},
       dq, ld_qkv);
  gemm(CblasTrans, CblasNoTrans, seq, head_dim, seq, Scalar{1}, ds, seq, q, ld_qkv, Scalar{1}, dk,
       ld_qkv);
}

}  // namespace traintwin::exec::cpu
