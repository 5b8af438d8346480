// SwiGLU; see swiglu.hpp.
#include "exec/cpu/swiglu.hpp"

#include <cmath>

#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "swiglu";

void check(size_t inp, size_t other, const char* other_name, int64_t rows, int64_t width) {
  require_positive(kLayer, rows, "rows");
  require_positive(kLayer, width, "width");
  require_size(kLayer, inp, rows * 2 * width, "inp");
  require_size(kLayer, other, rows * width, other_name);
}

template <typename Scalar>
Scalar sigmoid(Scalar x) {
  return Scalar{1} / (Scalar{1} + std::exp(-x));
}

}  // namespace

template <typename Scalar>
void swiglu_forward(std::span<Scalar> out, std::span<const Scalar> inp, int64_t rows,
                    int64_t width) {
  check(inp.size(), out.size(), "out", rows, width);
  const auto f = static_cast<size_t>(width);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const Scalar* gate = inp.data() + r * 2 * f;
    const Scalar* up = gate + f;
    for (size_t i = 0; i < f; ++i) out[r * f + i] = gate[i] * sigmoid(gate[i]) * up[i];
  }
}

template <typename Scalar>
void swiglu_backward(std::span<Scalar> dinp, std::span<const Scalar> dout,
                     std::span<const Scalar> inp, int64_t rows, int64_t width) {
  check(inp.size(), dout.size(), "dout", rows, width);
  require_size(kLayer, dinp.size(), rows * 2 * width, "dinp");
  const auto f = static_cast<size_t>(width);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const Scalar* gate = inp.data() + r * 2 * f;
    const Scalar* up = gate + f;
    Scalar* dgate = dinp.data() + r * 2 * f;
    Scalar* dup = dgate + f;
    for (size_t i = 0; i < f; ++i) {
      const Scalar s = sigmoid(gate[i]);
      const Scalar g = dout[r * f + i];
      dgate[i] += g * up[i] * (s + gate[i] * s * (Scalar{1} - s));
      dup[i] += g * gate[i] * s;
    }
  }
}

template void swiglu_forward<float>(std::span<float>, std::span<const float>, int64_t, int64_t);
template void swiglu_forward<double>(std::span<double>, std::span<const double>, int64_t,
                                     int64_t);
template void swiglu_backward<float>(std::span<float>, std::span<const float>,
                                     std::span<const float>, int64_t, int64_t);
template void swiglu_backward<double>(std::span<double>, std::span<const double>,
                                      std::span<const double>, int64_t, int64_t);

}  // namespace traintwin::exec::cpu
