// bfloat16 rounding and the bf16 linear layer's CPU reference; see bf16.hpp.
#include "exec/cpu/bf16.hpp"

#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/matmul.hpp"

namespace traintwin::exec::cpu {
namespace {

void require_same_size(const char* who, size_t dst, size_t src) {
  if (dst != src) {
    throw InvalidArgument(std::string("cpu ") + who + ": dst has " + std::to_string(dst) +
                          " elements, src " + std::to_string(src));
  }
}

std::vector<float> widen(std::span<const uint16_t> x) {
  std::vector<float> out(x.size());
  from_bf16(out, x);
  return out;
}

}  // namespace

void to_bf16(std::span<uint16_t> dst, std::span<const float> src) {
  require_same_size("to_bf16", dst.size(), src.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = float_to_bf16(src[i]);
}

void from_bf16(std::span<float> dst, std::span<const uint16_t> src) {
  require_same_size("from_bf16", dst.size(), src.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = bf16_to_float(src[i]);
}

void accumulate_bf16(std::span<float> dst, std::span<const uint16_t> src) {
  require_same_size("accumulate_bf16", dst.size(), src.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] += bf16_to_float(src[i]);
}

void matmul_forward_bf16(std::span<uint16_t> out, std::span<const uint16_t> inp,
                         std::span<const uint16_t> weight, std::span<const uint16_t> bias,
                         int64_t batch, int64_t seq, int64_t channels, int64_t out_channels) {
  std::vector<float> y(out.size());
  const std::vector<float> x = widen(inp), w = widen(weight), b = widen(bias);
  matmul_forward<float>(y, x, w, b, batch, seq, channels, out_channels);
  to_bf16(out, y);
}

void matmul_backward_data_bf16(std::span<uint16_t> dinp, std::span<const uint16_t> dout,
                               std::span<const uint16_t> weight, int64_t batch, int64_t seq,
                               int64_t channels, int64_t out_channels) {
  std::vector<float> dx(dinp.size(), 0.0f);
  const std::vector<float> dy = widen(dout), w = widen(weight);
  matmul_backward_data<float>(dx, dy, w, batch, seq, channels, out_channels);
  to_bf16(dinp, dx);
}

void matmul_backward_weight_bf16(std::span<float> dweight, std::span<float> dbias,
                                 std::span<const uint16_t> dout, std::span<const uint16_t> inp,
                                 int64_t batch, int64_t seq, int64_t channels,
                                 int64_t out_channels) {
  const std::vector<float> dy = widen(dout), x = widen(inp);
  matmul_backward_weight<float>(dweight, dbias, dy, x, batch, seq, channels, out_channels);
}

}  // namespace traintwin::exec::cpu
