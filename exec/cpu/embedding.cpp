// Token + position embedding; see embedding.hpp.
#include "exec/cpu/embedding.hpp"

#include "exec/cpu/checks.hpp"

#include <string>

#include "core/checks.hpp"
#include "core/error.hpp"

namespace traintwin::exec::cpu {
namespace {

void require_size(size_t actual, int64_t expected, const char* name) {
  cpu::require_size("embedding", actual, expected, name);
}


// Checks sizes and tokens, whose ids must lie in [0, vocab).
void check(std::span<const int32_t> tokens, size_t wte_size, size_t wpe_size, int64_t batch,
           int64_t seq, int64_t channels, int64_t vocab) {
  require_at_least_one(batch, "embedding batch");
  require_at_least_one(seq, "embedding seq");
  require_at_least_one(channels, "embedding channels");
  require_at_least_one(vocab, "embedding vocab");
  require_size(tokens.size(), batch * seq, "tokens");
  require_size(wte_size, vocab * channels, "wte");
  const int64_t wpe_rows = static_cast<int64_t>(wpe_size) / channels;
  if (static_cast<int64_t>(wpe_size) % channels != 0 || wpe_rows < seq) {
    throw InvalidArgument("embedding: wpe has " + std::to_string(wpe_size) +
                          " elements, expected a multiple of channels " +
                          std::to_string(channels) + " with at least seq " + std::to_string(seq) +
                          " rows");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw InvalidArgument("embedding: token " + std::to_string(tokens[i]) + " at position " +
                            std::to_string(i) + " is outside [0, " + std::to_string(vocab) + ")");
    }
  }
}

}  // namespace

template <typename Scalar>
void embedding_forward(std::span<Scalar> out, std::span<const int32_t> tokens,
                       std::span<const Scalar> wte, std::span<const Scalar> wpe, int64_t batch,
                       int64_t seq, int64_t channels, int64_t vocab) {
  check(tokens, wte.size(), wpe.size(), batch, seq, channels, vocab);
  require_size(out.size(), batch * seq * channels, "out");
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      Scalar* o = out.data() + (b * seq + t) * channels;                          // [C]
      const Scalar* wte_ix = wte.data() + tokens[b * seq + t] * int64_t{channels};  // [C]
      const Scalar* wpe_t = wpe.data() + t * channels;                              // [C]
      for (int64_t c = 0; c < channels; ++c) o[c] = wte_ix[c] + wpe_t[c];
    }
  }
}

template <typename Scalar>
void embedding_backward(std::span<Scalar> dwte, std::span<Scalar> dwpe,
                        std::span<const Scalar> dout, std::span<const int32_t> tokens,
                        int64_t batch, int64_t seq, int64_t channels, int64_t vocab) {
  check(tokens, dwte.size(), dwpe.size(), batch, seq, channels, vocab);
  require_size(dout.size(), batch * seq * channels, "dout");
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      const Scalar* dy = dout.data() + (b * seq + t) * channels;            // [C]
      Scalar* dwte_ix = dwte.data() + tokens[b * seq + t] * int64_t{channels};  // [C]
      Scalar* dwpe_t = dwpe.data() + t * channels;                              // [C]
      for (int64_t c = 0; c < channels; ++c) {
        dwte_ix[c] += dy[c];
        dwpe_t[c] += dy[c];
      }
    }
  }
}

template void embedding_forward<float>(std::span<float>, std::span<const int32_t>,
                                       std::span<const float>, std::span<const float>, int64_t,
                                       int64_t, int64_t, int64_t);
template void embedding_forward<double>(std::span<double>, std::span<const int32_t>,
                                        std::span<const double>, std::span<const double>, int64_t,
                                        int64_t, int64_t, int64_t);
template void embedding_backward<float>(std::span<float>, std::span<float>,
                                        std::span<const float>, std::span<const int32_t>, int64_t,
                                        int64_t, int64_t, int64_t);
template void embedding_backward<double>(std::span<double>, std::span<double>,
                                         std::span<const double>, std::span<const int32_t>,
                                         int64_t, int64_t, int64_t, int64_t);

}  // namespace traintwin::exec::cpu
