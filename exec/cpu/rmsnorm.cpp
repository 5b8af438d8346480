// RMSNorm; see rmsnorm.hpp.
#include "exec/cpu/rmsnorm.hpp"

#include <cmath>

#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "rmsnorm";

void check(size_t inp, size_t weight, size_t rrms, int64_t b, int64_t t, int64_t c) {
  require_positive(kLayer, b, "batch");
  require_positive(kLayer, t, "seq");
  require_positive(kLayer, c, "channels");
  require_size(kLayer, inp, b * t * c, "inp");
  require_size(kLayer, weight, c, "weight");
  require_size(kLayer, rrms, b * t, "rrms");
}

}  // namespace

template <typename Scalar>
void rmsnorm_forward(std::span<Scalar> out, std::span<Scalar> rrms, std::span<const Scalar> inp,
                     std::span<const Scalar> weight, int64_t batch, int64_t seq,
                     int64_t channels) {
  check(inp.size(), weight.size(), rrms.size(), batch, seq, channels);
  require_size(kLayer, out.size(), batch * seq * channels, "out");
  const auto c = static_cast<size_t>(channels);
  for (size_t row = 0; row < static_cast<size_t>(batch * seq); ++row) {
    const Scalar* x = inp.data() + row * c;
    Scalar sum_sq = 0;
    for (size_t i = 0; i < c; ++i) sum_sq += x[i] * x[i];
    const Scalar r = Scalar{1} / std::sqrt(sum_sq / static_cast<Scalar>(c) +
                                           static_cast<Scalar>(kRmsNormEps));
    Scalar* y = out.data() + row * c;
    for (size_t i = 0; i < c; ++i) y[i] = x[i] * r * weight[i];
    rrms[row] = r;
  }
}

template <typename Scalar>
void rmsnorm_backward(std::span<Scalar> dinp, std::span<Scalar> dweight,
                      std::span<const Scalar> dout, std::span<const Scalar> inp,
                      std::span<const Scalar> weight, std::span<const Scalar> rrms, int64_t batch,
                      int64_t seq, int64_t channels) {
  check(inp.size(), weight.size(), rrms.size(), batch, seq, channels);
  require_size(kLayer, dinp.size(), batch * seq * channels, "dinp");
  require_size(kLayer, dout.size(), batch * seq * channels, "dout");
  require_size(kLayer, dweight.size(), channels, "dweight");
  const auto c = static_cast<size_t>(channels);
  for (size_t row = 0; row < static_cast<size_t>(batch * seq); ++row) {
    const Scalar* x = inp.data() + row * c;
    const Scalar* g = dout.data() + row * c;
    const Scalar r = rrms[row];
    Scalar dot = 0;  // sum_j dout_j weight_j inp_j
    for (size_t i = 0; i < c; ++i) dot += g[i] * weight[i] * x[i];
    const Scalar k = r * r * r * dot / static_cast<Scalar>(c);
    Scalar* dx = dinp.data() + row * c;
    for (size_t i = 0; i < c; ++i) {
      dweight[i] += g[i] * x[i] * r;
      dx[i] += r * weight[i] * g[i] - k * x[i];
    }
  }
}

template void rmsnorm_forward<float>(std::span<float>, std::span<float>, std::span<const float>,
                                     std::span<const float>, int64_t, int64_t, int64_t);
template void rmsnorm_forward<double>(std::span<double>, std::span<double>,
                                      std::span<const double>, std::span<const double>, int64_t,
                                      int64_t, int64_t);
template void rmsnorm_backward<float>(std::span<float>, std::span<float>, std::span<const float>,
                                      std::span<const float>, std::span<const float>,
                                      std::span<const float>, int64_t, int64_t, int64_t);
template void rmsnorm_backward<double>(std::span<double>, std::span<double>,
                                       std::span<const double>, std::span<const double>,
                                       std::span<const double>, std::span<const double>, int64_t,
                                       int64_t, int64_t);

}  // namespace traintwin::exec::cpu
