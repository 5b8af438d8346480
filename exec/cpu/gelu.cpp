// GELU (tanh approximation); see gelu.hpp.
#include "exec/cpu/gelu.hpp"

#include "exec/cpu/checks.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"

namespace traintwin::exec::cpu {
namespace {

void require_same(size_t a, size_t b, const char* what) {
  cpu::require_same("gelu", a, b, what);
}


template <typename Scalar>
constexpr Scalar kScaling = static_cast<Scalar>(0.7978845608028654);  // sqrt(2/pi)
template <typename Scalar>
constexpr Scalar kCubic = static_cast<Scalar>(0.044715);

}  // namespace

template <typename Scalar>
void gelu_forward(std::span<Scalar> out, std::span<const Scalar> inp) {
  require_same(out.size(), inp.size(), "out and inp");
  for (size_t i = 0; i < inp.size(); ++i) {
    const Scalar x = inp[i];
    const Scalar cube = kCubic<Scalar> * x * x * x;
    out[i] = Scalar{0.5} * x * (Scalar{1} + std::tanh(kScaling<Scalar> * (x + cube)));
  }
}

template <typename Scalar>
void gelu_backward(std::span<Scalar> dinp, std::span<const Scalar> inp,
                   std::span<const Scalar> dout) {
  require_same(dinp.size(), inp.size(), "dinp and inp");
  require_same(dout.size(), inp.size(), "dout and inp");
  for (size_t i = 0; i < inp.size(); ++i) {
    const Scalar x = inp[i];
    const Scalar cube = kCubic<Scalar> * x * x * x;
    const Scalar tanh_arg = kScaling<Scalar> * (x + cube);
    const Scalar tanh_out = std::tanh(tanh_arg);
    const Scalar cosh_out = std::cosh(tanh_arg);
    const Scalar sech_out = Scalar{1} / (cosh_out * cosh_out);
    const Scalar local_grad =
        Scalar{0.5} * (Scalar{1} + tanh_out) +
        x * Scalar{0.5} * sech_out * kScaling<Scalar> *
            (Scalar{1} + Scalar{3} * kCubic<Scalar> * x * x);
    dinp[i] += local_grad * dout[i];
  }
}

template void gelu_forward<float>(std::span<float>, std::span<const float>);
template void gelu_forward<double>(std::span<double>, std::span<const double>);
template void gelu_backward<float>(std::span<float>, std::span<const float>,
                                   std::span<const float>);
template void gelu_backward<double>(std::span<double>, std::span<const double>,
                                    std::span<const double>);

}  // namespace traintwin::exec::cpu
