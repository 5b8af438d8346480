// Position embedding with an offset; see position_embedding.hpp.
#include "exec/cpu/position_embedding.hpp"

#include <string>

#include "core/checks.hpp"
#include "core/error.hpp"
#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "position_embedding";

void check(size_t table_size, const char* table_name, size_t act_size, const char* act_name,
           int64_t batch, int64_t seq_local, int64_t channels, int64_t seq_offset) {
  require_at_least_one(batch, "position_embedding batch");
  require_at_least_one(seq_local, "position_embedding seq_local");
  require_at_least_one(channels, "position_embedding channels");
  if (seq_offset < 0) {
    throw InvalidArgument(std::string(kLayer) + ": seq_offset must be >= 0, got " +
                          std::to_string(seq_offset));
  }
  require_size(kLayer, act_size, batch * seq_local * channels, act_name);
  const auto table = static_cast<int64_t>(table_size);
  if (table % channels != 0 || table / channels < seq_offset + seq_local) {
    throw InvalidArgument(
        std::string(kLayer) + ": " + table_name + " has " + std::to_string(table_size) +
        " elements, expected a multiple of channels " + std::to_string(channels) +
        " with at least seq_offset + seq_local = " + std::to_string(seq_offset + seq_local) +
        " rows");
  }
}

}  // namespace

template <typename Scalar>
void position_embedding_forward(std::span<Scalar> out, std::span<const Scalar> wpe, int64_t batch,
                                int64_t seq_local, int64_t channels, int64_t seq_offset) {
  check(wpe.size(), "wpe", out.size(), "out", batch, seq_local, channels, seq_offset);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq_local; ++t) {
      Scalar* o = out.data() + (b * seq_local + t) * channels;     // [C]
      const Scalar* w = wpe.data() + (seq_offset + t) * channels;  // [C]
      for (int64_t c = 0; c < channels; ++c) o[c] += w[c];
    }
  }
}

template <typename Scalar>
void position_embedding_backward(std::span<Scalar> dwpe, std::span<const Scalar> dout,
                                 int64_t batch, int64_t seq_local, int64_t channels,
                                 int64_t seq_offset) {
  check(dwpe.size(), "dwpe", dout.size(), "dout", batch, seq_local, channels, seq_offset);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq_local; ++t) {
      const Scalar* dy = dout.data() + (b * seq_local + t) * channels;  // [C]
      Scalar* dw = dwpe.data() + (seq_offset + t) * channels;           // [C]
      for (int64_t c = 0; c < channels; ++c) dw[c] += dy[c];
    }
  }
}

template void position_embedding_forward<float>(std::span<float>, std::span<const float>, int64_t,
                                                int64_t, int64_t, int64_t);
template void position_embedding_forward<double>(std::span<double>, std::span<const double>,
                                                 int64_t, int64_t, int64_t, int64_t);
template void position_embedding_backward<float>(std::span<float>, std::span<const float>, int64_t,
                                                 int64_t, int64_t, int64_t);
template void position_embedding_backward<double>(std::span<double>, std::span<const double>,
                                                  int64_t, int64_t, int64_t, int64_t);

}  // namespace traintwin::exec::cpu
