// Rotary position embedding; see rope.hpp.
#include "exec/cpu/rope.hpp"

#include <cmath>
#include <string>

#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "rope";

void check(size_t a, size_t b, const char* b_name, size_t positions, int64_t batch, int64_t seq,
           int64_t heads, int64_t head_dim, double base) {
  require_positive(kLayer, batch, "batch");
  require_positive(kLayer, seq, "seq");
  require_positive(kLayer, heads, "heads");
  require_positive(kLayer, head_dim, "head_dim");
  if (head_dim % 2 != 0) {
    throw InvalidArgument(std::string(kLayer) + ": head_dim must be even, got " +
                          std::to_string(head_dim));
  }
  if (!(base > 0)) {
    throw InvalidArgument(std::string(kLayer) + ": base must be > 0, got " + std::to_string(base));
  }
  require_size(kLayer, a, batch * seq * heads * head_dim, "the output");
  require_size(kLayer, b, batch * seq * heads * head_dim, b_name);
  require_size(kLayer, positions, seq, "positions");
}

/// Rotates every head of `src` by +angle (sign 1) or -angle (sign -1), accumulating into dst
/// when `accumulate`.
template <typename Scalar>
void rotate(std::span<Scalar> dst, std::span<const Scalar> src, std::span<const int64_t> positions,
            int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, double base, double sign,
            bool accumulate) {
  const auto half = static_cast<size_t>(head_dim / 2);
  const auto d = static_cast<size_t>(head_dim);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      const double pos = static_cast<double>(positions[static_cast<size_t>(t)]);
      for (size_t i = 0; i < half; ++i) {
        const double theta =
            std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        const auto c = static_cast<Scalar>(std::cos(pos * theta));
        const auto s = static_cast<Scalar>(sign * std::sin(pos * theta));
        for (int64_t h = 0; h < heads; ++h) {
          const size_t at = static_cast<size_t>((b * seq + t) * heads + h) * d;
          const Scalar x1 = src[at + i], x2 = src[at + half + i];
          const Scalar y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
          if (accumulate) {
            dst[at + i] += y1;
            dst[at + half + i] += y2;
          } else {
            dst[at + i] = y1;
            dst[at + half + i] = y2;
          }
        }
      }
    }
  }
}

}  // namespace

template <typename Scalar>
void rope_forward(std::span<Scalar> out, std::span<const Scalar> inp,
                  std::span<const int64_t> positions, int64_t batch, int64_t seq, int64_t heads,
                  int64_t head_dim, double base) {
  check(out.size(), inp.size(), "inp", positions.size(), batch, seq, heads, head_dim, base);
  rotate(out, inp, positions, batch, seq, heads, head_dim, base, 1.0, false);
}

template <typename Scalar>
void rope_backward(std::span<Scalar> dinp, std::span<const Scalar> dout,
                   std::span<const int64_t> positions, int64_t batch, int64_t seq, int64_t heads,
                   int64_t head_dim, double base) {
  check(dinp.size(), dout.size(), "dout", positions.size(), batch, seq, heads, head_dim, base);
  // The rotation is orthogonal: its transpose is the rotation by -angle.
  rotate(dinp, dout, positions, batch, seq, heads, head_dim, base, -1.0, true);
}

template void rope_forward<float>(std::span<float>, std::span<const float>,
                                  std::span<const int64_t>, int64_t, int64_t, int64_t, int64_t,
                                  double);
template void rope_forward<double>(std::span<double>, std::span<const double>,
                                   std::span<const int64_t>, int64_t, int64_t, int64_t, int64_t,
                                   double);
template void rope_backward<float>(std::span<float>, std::span<const float>,
                                   std::span<const int64_t>, int64_t, int64_t, int64_t, int64_t,
                                   double);
template void rope_backward<double>(std::span<double>, std::span<const double>,
                                    std::span<const int64_t>, int64_t, int64_t, int64_t, int64_t,
                                    double);

}  // namespace traintwin::exec::cpu
