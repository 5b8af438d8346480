// Vocab-parallel token embedding; see vocab_parallel_embedding.hpp.
#include "exec/cpu/vocab_parallel_embedding.hpp"

#include <string>

#include "core/checks.hpp"
#include "core/error.hpp"
#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "vocab_parallel_embedding";

// `act_size` is the length of the activation span, `act_name` its name ("out" or "dout").
void check(std::span<const int32_t> tokens, size_t table_size, size_t act_size,
           const char* act_name, const char* table_name, int64_t batch, int64_t seq,
           int64_t channels, int64_t vocab_start, int64_t vocab_local, int64_t vocab_total) {
  require_at_least_one(batch, "vocab_parallel_embedding batch");
  require_at_least_one(seq, "vocab_parallel_embedding seq");
  require_at_least_one(channels, "vocab_parallel_embedding channels");
  require_at_least_one(vocab_local, "vocab_parallel_embedding vocab_local");
  require_at_least_one(vocab_total, "vocab_parallel_embedding vocab_total");
  if (vocab_start < 0 || vocab_start > vocab_total - vocab_local) {
    throw InvalidArgument(std::string(kLayer) + ": shard [vocab_start " +
                          std::to_string(vocab_start) + ", + vocab_local " +
                          std::to_string(vocab_local) + ") is not inside [0, vocab_total " +
                          std::to_string(vocab_total) + ")");
  }
  require_size(kLayer, tokens.size(), batch * seq, "tokens");
  require_size(kLayer, table_size, vocab_local * channels, table_name);
  require_size(kLayer, act_size, batch * seq * channels, act_name);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_total) {
      throw InvalidArgument(std::string(kLayer) + ": token " + std::to_string(tokens[i]) +
                            " at position " + std::to_string(i) + " is outside [0, " +
                            std::to_string(vocab_total) + ")");
    }
  }
}

}  // namespace

template <typename Scalar>
void vocab_parallel_embedding_forward(std::span<Scalar> out, std::span<const int32_t> tokens,
                                      std::span<const Scalar> wte_local, int64_t batch, int64_t seq,
                                      int64_t channels, int64_t vocab_start, int64_t vocab_local,
                                      int64_t vocab_total) {
  check(tokens, wte_local.size(), out.size(), "out", "wte_local", batch, seq, channels, vocab_start,
        vocab_local, vocab_total);
  for (int64_t i = 0; i < batch * seq; ++i) {
    Scalar* o = out.data() + i * channels;  // [C]
    const int64_t row = int64_t{tokens[i]} - vocab_start;
    if (row < 0 || row >= vocab_local) {
      for (int64_t c = 0; c < channels; ++c) o[c] = Scalar{0};
      continue;
    }
    const Scalar* w = wte_local.data() + row * channels;  // [C]
    for (int64_t c = 0; c < channels; ++c) o[c] = w[c];
  }
}

template <typename Scalar>
void vocab_parallel_embedding_backward(std::span<Scalar> dwte_local, std::span<const Scalar> dout,
                                       std::span<const int32_t> tokens, int64_t batch, int64_t seq,
                                       int64_t channels, int64_t vocab_start, int64_t vocab_local,
                                       int64_t vocab_total) {
  check(tokens, dwte_local.size(), dout.size(), "dout", "dwte_local", batch, seq, channels,
        vocab_start, vocab_local, vocab_total);
  for (int64_t i = 0; i < batch * seq; ++i) {
    const int64_t row = int64_t{tokens[i]} - vocab_start;
    if (row < 0 || row >= vocab_local) continue;
    const Scalar* dy = dout.data() + i * channels;    // [C]
    Scalar* dw = dwte_local.data() + row * channels;  // [C]
    for (int64_t c = 0; c < channels; ++c) dw[c] += dy[c];
  }
}

template void vocab_parallel_embedding_forward<float>(std::span<float>, std::span<const int32_t>,
                                                      std::span<const float>, int64_t, int64_t,
                                                      int64_t, int64_t, int64_t, int64_t);
template void vocab_parallel_embedding_forward<double>(std::span<double>, std::span<const int32_t>,
                                                       std::span<const double>, int64_t, int64_t,
                                                       int64_t, int64_t, int64_t, int64_t);
template void vocab_parallel_embedding_backward<float>(std::span<float>, std::span<const float>,
                                                       std::span<const int32_t>, int64_t, int64_t,
                                                       int64_t, int64_t, int64_t, int64_t);
template void vocab_parallel_embedding_backward<double>(std::span<double>, std::span<const double>,
                                                        std::span<const int32_t>, int64_t, int64_t,
                                                        int64_t, int64_t, int64_t, int64_t);

}  // namespace traintwin::exec::cpu
