// Causal grouped-query attention; see gqa_attention.hpp.
#include "exec/cpu/gqa_attention.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "exec/cpu/attention_dropout_row.hpp"
#include "exec/cpu/causal_head_attention.hpp"
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
  std::vector<Scalar> weighted;  // [T, T] att x dropout factors, with dropout only
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = l.group_of(h);
      const Scalar* row0 = inp.data() + b * seq * l.row;  // token 0 of sample b
      Scalar* a = att.data() + ((b * heads + h) * seq) * seq;
      auto factors = [&](int64_t t) -> const Scalar* {
        return drop.active() ? drop.row(b, h, t, t + 1) : nullptr;
      };
      // The scores are written into att and normalized in place (no preatt is kept).
      causal_head_attention_forward(out.data() + b * seq * c + h * head_dim, c, a, a,
                                    row0 + l.q(h), row0 + l.k(g), row0 + l.v(g), l.row, seq,
                                    head_dim, scale, factors, weighted);
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
  std::vector<Scalar> weighted;  // [T, T] att x dropout factors, with dropout only
  std::vector<Scalar> dscores;   // [T, T]
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = l.group_of(h);
      const int64_t row0 = b * seq * l.row;  // token 0 of sample b
      auto factors = [&](int64_t t) -> const Scalar* {
        return drop.active() ? drop.row(b, h, t, t + 1) : nullptr;
      };
      // The heads of a group accumulate into the group's dk and dv in turn.
      causal_head_attention_backward(
          dinp.data() + row0 + l.q(h), dinp.data() + row0 + l.k(g), dinp.data() + row0 + l.v(g),
          dout.data() + b * seq * c + h * head_dim, c, att.data() + ((b * heads + h) * seq) * seq,
          inp.data() + row0 + l.q(h), inp.data() + row0 + l.k(g), inp.data() + row0 + l.v(g),
          l.row, seq, head_dim, scale, factors, weighted, dscores);
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
