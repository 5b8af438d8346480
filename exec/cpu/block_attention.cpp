// Blockwise causal attention with log-sum-exp statistics; see block_attention.hpp.
#include "exec/cpu/block_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "exec/cpu/attention_dropout_row.hpp"
#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "block_attention";

/// Checks the shape and the spans shared by forward and backward.
void check(const BlockAttentionShape& s, size_t q, size_t kv, size_t out, size_t lse,
           std::span<const int64_t> q_positions, std::span<const int64_t> k_positions) {
  require_positive(kLayer, s.batch, "batch");
  require_positive(kLayer, s.seq_q, "seq_q");
  require_positive(kLayer, s.seq_k, "seq_k");
  require_positive(kLayer, s.heads, "heads");
  require_positive(kLayer, s.groups, "groups");
  require_positive(kLayer, s.head_dim, "head_dim");
  if (s.heads % s.groups != 0) {
    throw InvalidArgument(std::string(kLayer) + ": groups " + std::to_string(s.groups) +
                          " must divide heads " + std::to_string(s.heads));
  }
  require_size(kLayer, q, s.batch * s.seq_q * s.heads * s.head_dim, "q");
  require_size(kLayer, kv, s.batch * s.seq_k * 2 * s.groups * s.head_dim, "kv");
  require_size(kLayer, out, s.batch * s.seq_q * s.heads * s.head_dim, "out");
  require_size(kLayer, lse, s.batch * s.heads * s.seq_q, "lse");
  require_size(kLayer, q_positions.size(), s.seq_q, "q_positions");
  require_size(kLayer, k_positions.size(), s.seq_k, "k_positions");
  for (size_t j = 0; j < k_positions.size(); ++j) {
    if (k_positions[j] < 0 || (j > 0 && k_positions[j] < k_positions[j - 1])) {
      throw InvalidArgument(std::string(kLayer) + ": k_positions must be non-negative and "
                            "non-decreasing (entry " + std::to_string(j) + " is " +
                            std::to_string(k_positions[j]) + ")");
    }
  }
  for (int64_t p : q_positions) {
    if (p < 0) throw InvalidArgument(std::string(kLayer) + ": negative query position");
  }
}

/// The keys a query at `position` sees: a prefix of the non-decreasing key positions.
int64_t visible_keys(std::span<const int64_t> k_positions, int64_t position) {
  return std::upper_bound(k_positions.begin(), k_positions.end(), position) - k_positions.begin();
}

/// Largest position of the call (for the dropout block's bound).
int64_t positions_end(std::span<const int64_t> q_positions, std::span<const int64_t> k_positions) {
  int64_t end = 0;
  for (int64_t p : q_positions) end = std::max(end, p + 1);
  if (!k_positions.empty()) end = std::max(end, k_positions.back() + 1);
  return end;
}

/// The dropout row of a call: the block's seq is the whole sequence, which every position must
/// be below.
template <typename Scalar>
AttentionDropoutRow<Scalar> dropout_row(const AttentionProbabilityDropout* dropout,
                                        const BlockAttentionShape& s,
                                        std::span<const int64_t> q_positions,
                                        std::span<const int64_t> k_positions) {
  int64_t seq_total = positions_end(q_positions, k_positions);
  if (dropout != nullptr && dropout->params.p > 0) {
    if (dropout->block.seq < seq_total) {
      throw InvalidArgument(std::string(kLayer) + ": position " + std::to_string(seq_total - 1) +
                            " is outside the dropout block's " +
                            std::to_string(dropout->block.seq) + " positions");
    }
    seq_total = dropout->block.seq;
  }
  return AttentionDropoutRow<Scalar>(kLayer, dropout, s.batch, s.heads, seq_total, s.seq_k);
}

}  // namespace

template <typename Scalar>
void block_attention_forward(std::span<Scalar> out, std::span<Scalar> lse,
                             std::span<const Scalar> q, std::span<const Scalar> kv,
                             std::span<const int64_t> q_positions,
                             std::span<const int64_t> k_positions, const BlockAttentionShape& s,
                             const AttentionProbabilityDropout* dropout) {
  check(s, q.size(), kv.size(), out.size(), lse.size(), q_positions, k_positions);
  AttentionDropoutRow<Scalar> drop = dropout_row<Scalar>(dropout, s, q_positions, k_positions);
  const int64_t d = s.head_dim, qrow = s.heads * d, kvrow = 2 * s.groups * d;
  const int64_t per_group = s.heads / s.groups;
  const Scalar scale = Scalar{1} / std::sqrt(static_cast<Scalar>(d));
  const Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  std::vector<Scalar> p(static_cast<size_t>(s.seq_k));  // one row's scores, then probabilities
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kcol = (h / per_group) * d, vcol = (s.groups + h / per_group) * d;
      for (int64_t t = 0; t < s.seq_q; ++t) {
        const int64_t pos = q_positions[static_cast<size_t>(t)];
        const int64_t n = visible_keys(k_positions, pos);
        const Scalar* qt = q.data() + (b * s.seq_q + t) * qrow + h * d;
        Scalar* o = out.data() + (b * s.seq_q + t) * qrow + h * d;
        Scalar& l = lse[static_cast<size_t>((b * s.heads + h) * s.seq_q + t)];
        for (int64_t i = 0; i < d; ++i) o[i] = 0;
        if (n == 0) {
          l = neg_inf;
          continue;
        }
        Scalar max = neg_inf;
        for (int64_t j = 0; j < n; ++j) {
          const Scalar* k = kv.data() + (b * s.seq_k + j) * kvrow + kcol;
          Scalar dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += qt[i] * k[i];
          p[static_cast<size_t>(j)] = dot * scale;
          max = std::max(max, p[static_cast<size_t>(j)]);
        }
        Scalar sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - max);
          sum += p[static_cast<size_t>(j)];
        }
        l = max + std::log(sum);
        const Scalar* z = drop.row(b, h, pos, n, k_positions.data());
        const Scalar inv = Scalar{1} / sum;
        for (int64_t j = 0; j < n; ++j) {
          const Scalar w = p[static_cast<size_t>(j)] * inv * z[j];
          const Scalar* v = kv.data() + (b * s.seq_k + j) * kvrow + vcol;
          for (int64_t i = 0; i < d; ++i) o[i] += w * v[i];
        }
      }
    }
  }
}

template <typename Scalar>
void attention_merge(std::span<Scalar> out, std::span<Scalar> lse, std::span<const Scalar> block_out,
                     std::span<const Scalar> block_lse, int64_t batch, int64_t seq, int64_t heads,
                     int64_t head_dim) {
  constexpr const char* kMerge = "attention_merge";
  require_positive(kMerge, batch, "batch");
  require_positive(kMerge, seq, "seq");
  require_positive(kMerge, heads, "heads");
  require_positive(kMerge, head_dim, "head_dim");
  require_size(kMerge, out.size(), batch * seq * heads * head_dim, "out");
  require_size(kMerge, block_out.size(), batch * seq * heads * head_dim, "block_out");
  require_size(kMerge, lse.size(), batch * heads * seq, "lse");
  require_size(kMerge, block_lse.size(), batch * heads * seq, "block_lse");
  const Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < seq; ++t) {
        const auto r = static_cast<size_t>((b * heads + h) * seq + t);
        const Scalar l1 = lse[r], l2 = block_lse[r];
        const Scalar m = std::max(l1, l2);
        if (m == neg_inf) continue;  // neither block sees a key
        const Scalar l = m + std::log(std::exp(l1 - m) + std::exp(l2 - m));
        const Scalar w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
        Scalar* o = out.data() + (b * seq + t) * heads * head_dim + h * head_dim;
        const Scalar* o2 = block_out.data() + (b * seq + t) * heads * head_dim + h * head_dim;
        for (int64_t i = 0; i < head_dim; ++i) o[i] = w1 * o[i] + w2 * o2[i];
        lse[r] = l;
      }
    }
  }
}

template <typename Scalar>
void block_attention_backward(std::span<Scalar> dq, std::span<Scalar> dkv,
                              std::span<const Scalar> dout, std::span<const Scalar> q,
                              std::span<const Scalar> kv, std::span<const Scalar> out,
                              std::span<const Scalar> lse, std::span<const int64_t> q_positions,
                              std::span<const int64_t> k_positions, const BlockAttentionShape& s,
                              const AttentionProbabilityDropout* dropout) {
  check(s, q.size(), kv.size(), out.size(), lse.size(), q_positions, k_positions);
  require_size(kLayer, dq.size(), static_cast<int64_t>(q.size()), "dq");
  require_size(kLayer, dkv.size(), static_cast<int64_t>(kv.size()), "dkv");
  require_size(kLayer, dout.size(), static_cast<int64_t>(out.size()), "dout");
  AttentionDropoutRow<Scalar> drop = dropout_row<Scalar>(dropout, s, q_positions, k_positions);
  const int64_t d = s.head_dim, qrow = s.heads * d, kvrow = 2 * s.groups * d;
  const int64_t per_group = s.heads / s.groups;
  const Scalar scale = Scalar{1} / std::sqrt(static_cast<Scalar>(d));
  const Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kcol = (h / per_group) * d, vcol = (s.groups + h / per_group) * d;
      for (int64_t t = 0; t < s.seq_q; ++t) {
        const int64_t pos = q_positions[static_cast<size_t>(t)];
        const int64_t n = visible_keys(k_positions, pos);
        const Scalar l = lse[static_cast<size_t>((b * s.heads + h) * s.seq_q + t)];
        if (n == 0 || l == neg_inf) continue;
        const int64_t row = (b * s.seq_q + t) * qrow + h * d;
        const Scalar* qt = q.data() + row;
        const Scalar* o = out.data() + row;
        const Scalar* d_o = dout.data() + row;
        Scalar* dqt = dq.data() + row;
        Scalar dsum = 0;  // D = dout . out
        for (int64_t i = 0; i < d; ++i) dsum += d_o[i] * o[i];
        const Scalar* z = drop.row(b, h, pos, n, k_positions.data());
        for (int64_t j = 0; j < n; ++j) {
          const int64_t kvr = (b * s.seq_k + j) * kvrow;
          const Scalar* k = kv.data() + kvr + kcol;
          const Scalar* v = kv.data() + kvr + vcol;
          Scalar* dk = dkv.data() + kvr + kcol;
          Scalar* dv = dkv.data() + kvr + vcol;
          Scalar dot = 0, dp = 0;
          for (int64_t i = 0; i < d; ++i) {
            dot += qt[i] * k[i];
            dp += d_o[i] * v[i];
          }
          const Scalar p = std::exp(dot * scale - l);
          const Scalar pz = p * z[j];
          for (int64_t i = 0; i < d; ++i) dv[i] += pz * d_o[i];
          const Scalar ds = p * (dp * z[j] - dsum) * scale;
          for (int64_t i = 0; i < d; ++i) {
            dqt[i] += ds * k[i];
            dk[i] += ds * qt[i];
          }
        }
      }
    }
  }
}

#define TRAINTWIN_BLOCK_ATTENTION(Scalar)                                                         \
  template void block_attention_forward<Scalar>(                                                 \
      std::span<Scalar>, std::span<Scalar>, std::span<const Scalar>, std::span<const Scalar>,    \
      std::span<const int64_t>, std::span<const int64_t>, const BlockAttentionShape&,            \
      const AttentionProbabilityDropout*);                                                       \
  template void attention_merge<Scalar>(std::span<Scalar>, std::span<Scalar>,                     \
                                        std::span<const Scalar>, std::span<const Scalar>, int64_t, \
                                        int64_t, int64_t, int64_t);                              \
  template void block_attention_backward<Scalar>(                                                \
      std::span<Scalar>, std::span<Scalar>, std::span<const Scalar>, std::span<const Scalar>,    \
      std::span<const Scalar>, std::span<const Scalar>, std::span<const Scalar>,                 \
      std::span<const int64_t>, std::span<const int64_t>, const BlockAttentionShape&,            \
      const AttentionProbabilityDropout*);
TRAINTWIN_BLOCK_ATTENTION(float)
TRAINTWIN_BLOCK_ATTENTION(double)
#undef TRAINTWIN_BLOCK_ATTENTION

}  // namespace traintwin::exec::cpu
