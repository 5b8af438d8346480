// LayerNorm; see layernorm.hpp.
#include "exec/cpu/layernorm.hpp"

#include "exec/cpu/checks.hpp"

#include <cmath>
#include <string>

#include "core/checks.hpp"
#include "core/error.hpp"

namespace traintwin::exec::cpu {
namespace {

void require_size(size_t actual, int64_t expected, const char* name) {
  cpu::require_size("layernorm", actual, expected, name);
}


void check_sizes(int64_t batch, int64_t seq, int64_t channels) {
  require_at_least_one(batch, "layernorm batch");
  require_at_least_one(seq, "layernorm seq");
  require_at_least_one(channels, "layernorm channels");
}

}  // namespace

template <typename Scalar>
void layernorm_forward(std::span<Scalar> out, std::span<Scalar> mean, std::span<Scalar> rstd,
                       std::span<const Scalar> inp, std::span<const Scalar> weight,
                       std::span<const Scalar> bias, int64_t batch, int64_t seq,
                       int64_t channels) {
  check_sizes(batch, seq, channels);
  const int64_t bt = batch * seq;
  require_size(out.size(), bt * channels, "out");
  require_size(mean.size(), bt, "mean");
  require_size(rstd.size(), bt, "rstd");
  require_size(inp.size(), bt * channels, "inp");
  require_size(weight.size(), channels, "weight");
  require_size(bias.size(), channels, "bias");
  const Scalar inv_c = Scalar{1} / static_cast<Scalar>(channels);
  const Scalar eps = static_cast<Scalar>(kLayerNormEps);
  for (int64_t i = 0; i < bt; ++i) {
    const Scalar* x = inp.data() + i * channels;  // [C]
    Scalar m = 0;
    for (int64_t c = 0; c < channels; ++c) m += x[c];
    m *= inv_c;
    Scalar v = 0;
    for (int64_t c = 0; c < channels; ++c) {
      const Scalar d = x[c] - m;
      v += d * d;
    }
    v *= inv_c;
    const Scalar s = Scalar{1} / std::sqrt(v + eps);
    Scalar* o = out.data() + i * channels;  // [C]
    for (int64_t c = 0; c < channels; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

template <typename Scalar>
void layernorm_backward(std::span<Scalar> dinp, std::span<Scalar> dweight,
                        std::span<Scalar> dbias, std::span<const Scalar> dout,
                        std::span<const Scalar> inp, std::span<const Scalar> weight,
                        std::span<const Scalar> mean, std::span<const Scalar> rstd,
                        int64_t batch, int64_t seq, int64_t channels) {
  check_sizes(batch, seq, channels);
  const int64_t bt = batch * seq;
  require_size(dinp.size(), bt * channels, "dinp");
  require_size(dweight.size(), channels, "dweight");
  require_size(dbias.size(), channels, "dbias");
  require_size(dout.size(), bt * channels, "dout");
  require_size(inp.size(), bt * channels, "inp");
  require_size(weight.size(), channels, "weight");
  require_size(mean.size(), bt, "mean");
  require_size(rstd.size(), bt, "rstd");
  const Scalar inv_c = Scalar{1} / static_cast<Scalar>(channels);
  for (int64_t i = 0; i < bt; ++i) {
    const Scalar* dy = dout.data() + i * channels;  // [C]
    const Scalar* x = inp.data() + i * channels;    // [C]
    Scalar* dx = dinp.data() + i * channels;        // [C]
    const Scalar m = mean[i];
    const Scalar s = rstd[i];
    // Two reductions: mean of dnorm and mean of dnorm * norm.
    Scalar dnorm_mean = 0;
    Scalar dnorm_norm_mean = 0;
    for (int64_t c = 0; c < channels; ++c) {
      const Scalar norm = (x[c] - m) * s;
      const Scalar dnorm = weight[c] * dy[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean *= inv_c;
    dnorm_norm_mean *= inv_c;
    for (int64_t c = 0; c < channels; ++c) {
      const Scalar norm = (x[c] - m) * s;
      const Scalar dnorm = weight[c] * dy[c];
      dbias[c] += dy[c];
      dweight[c] += norm * dy[c];
      dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

template void layernorm_forward<float>(std::span<float>, std::span<float>, std::span<float>,
                                       std::span<const float>, std::span<const float>,
                                       std::span<const float>, int64_t, int64_t, int64_t);
template void layernorm_forward<double>(std::span<double>, std::span<double>, std::span<double>,
                                        std::span<const double>, std::span<const double>,
                                        std::span<const double>, int64_t, int64_t, int64_t);
template void layernorm_backward<float>(std::span<float>, std::span<float>, std::span<float>,
                                        std::span<const float>, std::span<const float>,
                                        std::span<const float>, std::span<const float>,
                                        std::span<const float>, int64_t, int64_t, int64_t);
template void layernorm_backward<double>(std::span<double>, std::span<double>,
                                         std::span<double>, std::span<const double>,
                                         std::span<const double>, std::span<const double>,
                                         std::span<const double>, std::span<const double>,
                                         int64_t, int64_t, int64_t);

}  // namespace traintwin::exec::cpu
