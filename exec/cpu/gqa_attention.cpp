// Causal grouped-query attention; see gqa_attention.hpp.
#include "exec/cpu/gqa_attention.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "exec/cpu/attention_dropout_row.hpp"
#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "gqa_attention";

/// Offsets into one token's fused QKV row.
struct Layout {
  int64_t heads, groups, d, row;  // row = (heads + 2 groups) d
  int64_t q(int64_t h) const { return h * d; }
  int64_t k(int64_t g) const { return (heads + g) * d; }
  int64_t v(int64_t g) const { return (heads + groups + g) * d; }
  int64_t group_of(int64_t h) const { return h / (heads / groups); }
};

Layout check(size_t inp, size_t out, const char* out_name, size_t att, int64_t batch, int64_t seq,
             int64_t heads, int64_t groups, int64_t d) {
  require_positive(kLayer, batch, "batch");
  require_positive(kLayer, seq, "seq");
  require_positive(kLayer, heads, "heads");
  require_positive(kLayer, groups, "query_groups");
  require_positive(kLayer, d, "head_dim");
  if (heads % groups != 0) {
    throw InvalidArgument(std::string(kLayer) + ": query_groups " + std::to_string(groups) +
                          " must divide heads " + std::to_string(heads));
  }
  const Layout l{heads, groups, d, (heads + 2 * groups) * d};
  require_size(kLayer, inp, batch * seq * l.row, "inp");
  require_size(kLayer, out, batch * seq * heads * d, out_name);
  require_size(kLayer, att, batch * heads * seq * seq, "att");
  return l;
}

}  // namespace

template <typename Scalar>
void gqa_attention_forward(std::span<Scalar> out, std::span<Scalar> att,
                           std::span<const Scalar> inp, int64_t batch, int64_t seq, int64_t heads,
                           int64_t query_groups, int64_t head_dim,
                           const AttentionProbabilityDropout* dropout) {
  const Layout l =
      check(inp.size(), out.size(), "out", att.size(), batch, seq, heads, query_groups, head_dim);
  AttentionDropoutRow<Scalar> drop(kLayer, dropout, batch, heads, seq, seq);
  const Scalar scale = Scalar{1} / std::sqrt(static_cast<Scalar>(head_dim));
  const int64_t c = heads * head_dim;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = l.group_of(h);
      for (int64_t t = 0; t < seq; ++t) {
        const Scalar* q = inp.data() + (b * seq + t) * l.row + l.q(h);
        Scalar* a = att.data() + ((b * heads + h) * seq + t) * seq;
        Scalar max = -std::numeric_limits<Scalar>::infinity();
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const Scalar* k = inp.data() + (b * seq + t2) * l.row + l.k(g);
          Scalar dot = 0;
          for (int64_t i = 0; i < head_dim; ++i) dot += q[i] * k[i];
          a[t2] = dot * scale;
          if (a[t2] > max) max = a[t2];
        }
        Scalar sum = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          a[t2] = std::exp(a[t2] - max);
          sum += a[t2];
        }
        for (int64_t t2 = 0; t2 < seq; ++t2) a[t2] = t2 <= t ? a[t2] / sum : Scalar{0};
        // The values weighted by the dropped-out probabilities (att itself stays undropped).
        const Scalar* factor = drop.row(b, h, t, t + 1);
        Scalar* o = out.data() + (b * seq + t) * c + h * head_dim;
        for (int64_t i = 0; i < head_dim; ++i) o[i] = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const Scalar* v = inp.data() + (b * seq + t2) * l.row + l.v(g);
          const Scalar w = a[t2] * factor[t2];
          for (int64_t i = 0; i < head_dim; ++i) o[i] += w * v[i];
        }
      }
    }
  }
}

template <typename Scalar>
void gqa_attention_backward(std::span<Scalar> dinp, std::span<const Scalar> dout,
                            std::span<const Scalar> inp, std::span<const Scalar> att,
                            int64_t batch, int64_t seq, int64_t heads, int64_t query_groups,
                            int64_t head_dim, const AttentionProbabilityDropout* dropout) {
  const Layout l =
      check(inp.size(), dout.size(), "dout", att.size(), batch, seq, heads, query_groups, head_dim);
  AttentionDropoutRow<Scalar> drop(kLayer, dropout, batch, heads, seq, seq);
  require_size(kLayer, dinp.size(), batch * seq * l.row, "dinp");
  const Scalar scale = Scalar{1} / std::sqrt(static_cast<Scalar>(head_dim));
  const int64_t c = heads * head_dim;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = l.group_of(h);
      for (int64_t t = 0; t < seq; ++t) {
        const Scalar* a = att.data() + ((b * heads + h) * seq + t) * seq;
        const Scalar* d_o = dout.data() + (b * seq + t) * c + h * head_dim;
        // With dropout factors z (1/(1-p) kept, 0 dropped): d att[t2] = z (dout . v_t2);
        // dv_t2 += att[t2] z dout.
        const Scalar* factor = drop.row(b, h, t, t + 1);
        Scalar datt_dot_att = 0;
        // First pass: datt values (recomputed per t2) and their att-weighted sum.
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const Scalar* v = inp.data() + (b * seq + t2) * l.row + l.v(g);
          Scalar datt = 0;
          for (int64_t i = 0; i < head_dim; ++i) datt += d_o[i] * v[i];
          datt *= factor[t2];
          datt_dot_att += datt * a[t2];
          Scalar* dv = dinp.data() + (b * seq + t2) * l.row + l.v(g);
          const Scalar w = a[t2] * factor[t2];
          for (int64_t i = 0; i < head_dim; ++i) dv[i] += w * d_o[i];
        }
        // Softmax backward: dpreatt = att (datt - sum att datt); then q and k.
        const Scalar* q = inp.data() + (b * seq + t) * l.row + l.q(h);
        Scalar* dq = dinp.data() + (b * seq + t) * l.row + l.q(h);
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const Scalar* v = inp.data() + (b * seq + t2) * l.row + l.v(g);
          Scalar datt = 0;
          for (int64_t i = 0; i < head_dim; ++i) datt += d_o[i] * v[i];
          datt *= factor[t2];
          const Scalar dpre = a[t2] * (datt - datt_dot_att) * scale;
          const Scalar* k = inp.data() + (b * seq + t2) * l.row + l.k(g);
          Scalar* dk = dinp.data() + (b * seq + t2) * l.row + l.k(g);
          for (int64_t i = 0; i < head_dim; ++i) {
            dq[i] += dpre * k[i];
            dk[i] += dpre * q[i];
          }
        }
      }
    }
  }
}

#define TRAINTWIN_GQA_ATTENTION(Scalar)                                                           \
  template void gqa_attention_forward<Scalar>(std::span<Scalar>, std::span<Scalar>,              \
                                              std::span<const Scalar>, int64_t, int64_t, int64_t, \
                                              int64_t, int64_t, const AttentionProbabilityDropout*); \
  template void gqa_attention_backward<Scalar>(                                                   \
      std::span<Scalar>, std::span<const Scalar>, std::span<const Scalar>,                        \
      std::span<const Scalar>, int64_t, int64_t, int64_t, int64_t, int64_t,                       \
      const AttentionProbabilityDropout*);
TRAINTWIN_GQA_ATTENTION(float)
TRAINTWIN_GQA_ATTENTION(double)
#undef TRAINTWIN_GQA_ATTENTION

}  // namespace traintwin::exec::cpu
