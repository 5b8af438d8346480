// The inputs `traintwin profile` hands a kernel; see profile_inputs.hpp.
#include "exec/profile_inputs.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "exec/counter_rng.hpp"

namespace traintwin::exec {

Tensor ProfileInputs::uniform(int64_t n, double lo, double hi) {
  if (!(lo < hi)) {
    throw InvalidArgument("profile inputs: uniform range [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + ") is empty");
  }
  const int64_t tile = std::min(n, kTileElements);
  host_.resize(static_cast<size_t>(tile));
  const uint64_t stream = next_++;
  for (int64_t i = 0; i < tile; ++i) {
    host_[static_cast<size_t>(i)] = static_cast<float>(
        lo + (hi - lo) * counter_uniform(seed_, stream, static_cast<uint64_t>(i)));
  }
  Tensor x(be_, n);
  for (int64_t at = 0; at < n; at += tile) {
    const auto len = static_cast<size_t>(std::min(tile, n - at));
    be_.upload(x.span().subspan(static_cast<size_t>(at), len), CFSpan(host_).first(len));
  }
  return x;
}

Tensor ProfileInputs::zeros(int64_t n) {
  Tensor x(be_, n);
  if (n > 0) be_.fill_2d(x, n, n, 1, 0.0f);
  return x;
}

Bf16Tensor ProfileInputs::uniform_bf16(int64_t n, double lo, double hi) {
  const Tensor x = uniform(n, lo, hi);
  Bf16Tensor y(be_, n);
  be_.convert_to_bf16(y, x);
  return y;
}

Fp8Tensor ProfileInputs::uniform_fp8(int64_t n, cpu::Fp8Kind kind) {
  const Tensor x = uniform(n);
  Fp8Tensor y(be_, n);
  be_.quantize_fp8(y, x, kind, 1.0f);
  return y;
}

Bf16Tensor ProfileInputs::zeros_bf16(int64_t n) {
  const Tensor x = zeros(n);
  Bf16Tensor y(be_, n);
  be_.convert_to_bf16(y, x);
  return y;
}

DeviceBuffer<int32_t> ProfileInputs::ids(int64_t n, int64_t range) {
  if (range < 1) throw InvalidArgument("profile inputs: id range must be >= 1, got " + std::to_string(range));
  std::vector<int32_t> h(static_cast<size_t>(n));
  const uint64_t stream = next_++;
  for (int64_t i = 0; i < n; ++i) {
    h[static_cast<size_t>(i)] = static_cast<int32_t>(std::min<double>(
        static_cast<double>(range) - 1,
        std::floor(static_cast<double>(range) *
                   counter_uniform(seed_, stream, static_cast<uint64_t>(i)))));
  }
  DeviceBuffer<int32_t> x(be_, n);
  be_.upload(x, h);
  return x;
}

}  // namespace traintwin::exec
