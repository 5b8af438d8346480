// Causal multi-head self-attention; see attention.hpp.
#include "exec/cpu/attention.hpp"

#include "exec/cpu/attention_dropout_row.hpp"
#include "exec/cpu/causal_head_attention.hpp"
#include "exec/cpu/checks.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "core/error.hpp"

namespace traintwin::exec::cpu {
namespace {

void require_size(size_t actual, int64_t expected, const char* name) {
  cpu::require_size("attention", actual, expected, name);
}


void check_sizes(int64_t batch, int64_t seq, int64_t channels, int64_t heads) {
  require_at_least_one(batch, "attention batch");
  require_at_least_one(seq, "attention seq");
  require_at_least_one(channels, "attention channels");
  require_at_least_one(heads, "attention heads");
  if (channels % heads != 0) {
    throw InvalidArgument("attention: heads " + std::to_string(heads) +
                          " must divide channels " + std::to_string(channels));
  }
}

}  // namespace

template <typename Scalar>
void attention_forward(std::span<Scalar> out, std::span<Scalar> preatt, std::span<Scalar> att,
                       std::span<const Scalar> inp, int64_t batch, int64_t seq, int64_t channels,
                       int64_t heads, const AttentionProbabilityDropout* dropout) {
  check_sizes(batch, seq, channels, heads);
  AttentionDropoutRow<Scalar> drop("attention", dropout, batch, heads, seq, seq);
  require_size(out.size(), batch * seq * channels, "out");
  require_size(preatt.size(), batch * heads * seq * seq, "preatt");
  require_size(att.size(), batch * heads * seq * seq, "att");
  require_size(inp.size(), batch * seq * 3 * channels, "inp");
  const int64_t c3 = 3 * channels;
  const int64_t hs = channels / heads;
  const Scalar scale = Scalar{1} / std::sqrt(static_cast<Scalar>(hs));
  std::vector<Scalar> weighted;  // [T, T] att x dropout factors, with dropout only
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const Scalar* query = inp.data() + b * seq * c3 + h * hs;  // [T, hs], stride 3C
      const size_t square = static_cast<size_t>(((b * heads + h) * seq) * seq);
      auto factors = [&](int64_t t) -> const Scalar* {
        return drop.active() ? drop.row(b, h, t, t + 1) : nullptr;
      };
      causal_head_attention_forward(out.data() + b * seq * channels + h * hs, channels,
                                    preatt.data() + square, att.data() + square, query,
                                    query + channels, query + 2 * channels, c3, seq, hs, scale,
                                    factors, weighted);
    }
  }
}

template <typename Scalar>
void attention_backward(std::span<Scalar> dinp, std::span<const Scalar> dout,
                        std::span<const Scalar> inp, std::span<const Scalar> att, int64_t batch,
                        int64_t seq, int64_t channels, int64_t heads,
                        const AttentionProbabilityDropout* dropout) {
  check_sizes(batch, seq, channels, heads);
  AttentionDropoutRow<Scalar> drop("attention", dropout, batch, heads, seq, seq);
  require_size(dinp.size(), batch * seq * 3 * channels, "dinp");
  require_size(dout.size(), batch * seq * channels, "dout");
  require_size(inp.size(), batch * seq * 3 * channels, "inp");
  require_size(att.size(), batch * heads * seq * seq, "att");
  const int64_t c3 = 3 * channels;
  const int64_t hs = channels / heads;
  const Scalar scale = Scalar{1} / std::sqrt(static_cast<Scalar>(hs));
  std::vector<Scalar> weighted;  // [T, T] att x dropout factors, with dropout only
  std::vector<Scalar> dscores;   // [T, T]
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t qkv = b * seq * c3 + h * hs;  // [T, hs] blocks, stride 3C
      auto factors = [&](int64_t t) -> const Scalar* {
        return drop.active() ? drop.row(b, h, t, t + 1) : nullptr;
      };
      causal_head_attention_backward(
          dinp.data() + qkv, dinp.data() + qkv + channels, dinp.data() + qkv + 2 * channels,
          dout.data() + b * seq * channels + h * hs, channels,
          att.data() + ((b * heads + h) * seq) * seq, inp.data() + qkv,
          inp.data() + qkv + channels, inp.data() + qkv + 2 * channels, c3, seq, hs, scale,
          factors, weighted, dscores);
    }
  }
}

#define TRAINTWIN_ATTENTION(Scalar)                                                              \
  template void attention_forward<Scalar>(std::span<Scalar>, std::span<Scalar>, std::span<Scalar>, \
                                          std::span<const Scalar>, int64_t, int64_t, int64_t,      \
                                          int64_t, const AttentionProbabilityDropout*);            \
  template void attention_backward<Scalar>(std::span<Scalar>, std::span<const Scalar>,             \
                                           std::span<const Scalar>, std::span<const Scalar>,       \
                                           int64_t, int64_t, int64_t, int64_t,                      \
                                           const AttentionProbabilityDropout*);
TRAINTWIN_ATTENTION(float)
TRAINTWIN_ATTENTION(double)
#undef TRAINTWIN_ATTENTION

}  // namespace traintwin::exec::cpu
