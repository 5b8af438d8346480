// Causal multi-head self-attention; see attention.hpp.
#include "exec/cpu/attention.hpp"

#include "exec/cpu/attention_dropout_row.hpp"
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
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const Scalar* query_t = inp.data() + (b * seq + t) * c3 + h * hs;  // [hs]
        Scalar* preatt_bth = preatt.data() + ((b * heads + h) * seq + t) * seq;  // [T]
        Scalar* att_bth = att.data() + ((b * heads + h) * seq + t) * seq;        // [T]
        // Pass 1: q . k and the running max (for a stable softmax).
        Scalar maxval = -std::numeric_limits<Scalar>::infinity();
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const Scalar* key_t2 = inp.data() + (b * seq + t2) * c3 + h * hs + channels;  // [hs]
          Scalar val = 0;
          for (int64_t i = 0; i < hs; ++i) val += query_t[i] * key_t2[i];
          val *= scale;
          if (val > maxval) maxval = val;
          preatt_bth[t2] = val;
        }
        for (int64_t t2 = t + 1; t2 < seq; ++t2) {
          preatt_bth[t2] = -std::numeric_limits<Scalar>::infinity();
        }
        // Pass 2: exp and sum.
        Scalar expsum = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const Scalar expv = std::exp(preatt_bth[t2] - maxval);
          expsum += expv;
          att_bth[t2] = expv;
        }
        const Scalar expsum_inv = expsum == Scalar{0} ? Scalar{0} : Scalar{1} / expsum;
        // Pass 3: normalize; the causal mask is explicit zeros.
        for (int64_t t2 = 0; t2 < seq; ++t2) {
          att_bth[t2] = t2 <= t ? att_bth[t2] * expsum_inv : Scalar{0};
        }
        // Pass 4: weighted sum of the values (by the dropped-out probabilities).
        const Scalar* factor = drop.row(b, h, t, t + 1);  // [T]
        Scalar* out_bth = out.data() + (b * seq + t) * channels + h * hs;  // [hs]
        for (int64_t i = 0; i < hs; ++i) out_bth[i] = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const Scalar* value_t2 =
              inp.data() + (b * seq + t2) * c3 + h * hs + 2 * channels;  // [hs]
          const Scalar a = att_bth[t2] * factor[t2];
          for (int64_t i = 0; i < hs; ++i) out_bth[i] += a * value_t2[i];
        }
      }
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
  std::vector<Scalar> datt(static_cast<size_t>(seq));     // [T] of one (b, t, h) row
  std::vector<Scalar> dpreatt(static_cast<size_t>(seq));  // [T]
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const Scalar* att_bth = att.data() + ((b * heads + h) * seq + t) * seq;  // [T]
        const Scalar* dout_bth = dout.data() + (b * seq + t) * channels + h * hs;  // [hs]
        const Scalar* query_t = inp.data() + (b * seq + t) * c3 + h * hs;         // [hs]
        Scalar* dquery_t = dinp.data() + (b * seq + t) * c3 + h * hs;             // [hs]
        // Backward through the value accumulation and the dropout: with a = att x factor,
        // datt = factor (v . dout), dv += a dout.
        const Scalar* factor = drop.row(b, h, t, t + 1);  // [T]
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const int64_t v_off = (b * seq + t2) * c3 + h * hs + 2 * channels;
          const Scalar* value_t2 = inp.data() + v_off;  // [hs]
          Scalar* dvalue_t2 = dinp.data() + v_off;      // [hs]
          const Scalar a = att_bth[t2] * factor[t2];
          Scalar d = 0;
          for (int64_t i = 0; i < hs; ++i) {
            d += value_t2[i] * dout_bth[i];
            dvalue_t2[i] += a * dout_bth[i];
          }
          datt[t2] = d * factor[t2];
        }
        // Backward through the softmax: llm.c's dpreatt[t3] = sum over t2 of
        // att[t2] (1[t2 == t3] - att[t3]) datt[t2], summed here in its O(T) closed form
        // att[t3] (datt[t3] - sum over t2 of att[t2] datt[t2]).
        Scalar att_datt = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) att_datt += att_bth[t2] * datt[t2];
        for (int64_t t3 = 0; t3 <= t; ++t3) dpreatt[t3] = att_bth[t3] * (datt[t3] - att_datt);
        // Backward through q . k * scale.
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const int64_t k_off = (b * seq + t2) * c3 + h * hs + channels;
          const Scalar* key_t2 = inp.data() + k_off;  // [hs]
          Scalar* dkey_t2 = dinp.data() + k_off;      // [hs]
          const Scalar g = dpreatt[t2] * scale;
          for (int64_t i = 0; i < hs; ++i) {
            dquery_t[i] += key_t2[i] * g;
            dkey_t2[i] += query_t[i] * g;
          }
        }
      }
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
