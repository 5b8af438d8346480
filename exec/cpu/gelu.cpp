// GELU (tanh approximation); see gelu.hpp.
#include "exec/cpu/gelu.hpp"

#include "exec/cpu/checks.hpp"

#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "exec/cpu/vector_math.hpp"

namespace traintwin::exec::cpu {
namespace {

void require_same(size_t a, size_t b, const char* what) {
  cpu::require_same("gelu", a, b, what);
}


template <typename Scalar>
constexpr Scalar kScaling = static_cast<Scalar>(0.7978845608028654);  // sqrt(2/pi)
template <typename Scalar>
constexpr Scalar kCubic = static_cast<Scalar>(0.044715);

// fp32: 0.5 (1 + tanh(u)) = sigmoid(2u), so GELU(x) = x sigmoid(2u) and
// GELU'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2) with s = sigmoid(2u): the same
// function as the tanh form (no cancellation where tanh(u) -> -1), one exp per element,
// vectorized (vector_math.hpp).
TRAINTWIN_CPU_CLONES
void gelu_forward_f32(float* __restrict out, const float* __restrict inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kScaling<float> * (x + kCubic<float> * x * x * x);
    out[i] = x * sigmoid_approx(2.0f * u);
  }
}

TRAINTWIN_CPU_CLONES
void gelu_backward_f32(float* __restrict dinp, const float* __restrict inp,
                       const float* __restrict dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kScaling<float> * (x + kCubic<float> * x * x * x);
    const float s = sigmoid_approx(2.0f * u);
    const float du_dx = kScaling<float> * (1.0f + 3.0f * kCubic<float> * x * x);
    dinp[i] += (s + 2.0f * x * s * (1.0f - s) * du_dx) * dout[i];
  }
}

}  // namespace

template <typename Scalar>
void gelu_forward(std::span<Scalar> out, std::span<const Scalar> inp) {
  require_same(out.size(), inp.size(), "out and inp");
  if constexpr (std::is_same_v<Scalar, float>) {
    gelu_forward_f32(out.data(), inp.data(), inp.size());
    return;
  }
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
  if constexpr (std::is_same_v<Scalar, float>) {
    gelu_backward_f32(dinp.data(), inp.data(), dout.data(), inp.size());
    return;
  }
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
