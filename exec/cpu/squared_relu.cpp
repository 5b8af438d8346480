// Squared ReLU; see squared_relu.hpp.
#include "exec/cpu/squared_relu.hpp"

#include <algorithm>

#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {

template <typename Scalar>
void squared_relu_forward(std::span<Scalar> out, std::span<const Scalar> inp) {
  require_same("squared_relu", out.size(), inp.size(), "out and inp");
  for (size_t i = 0; i < inp.size(); ++i) {
    const Scalar r = std::max(inp[i], Scalar{0});
    out[i] = r * r;
  }
}

template <typename Scalar>
void squared_relu_backward(std::span<Scalar> dinp, std::span<const Scalar> inp,
                           std::span<const Scalar> dout) {
  require_same("squared_relu", dinp.size(), inp.size(), "dinp and inp");
  require_same("squared_relu", dout.size(), inp.size(), "dout and inp");
  for (size_t i = 0; i < inp.size(); ++i) {
    dinp[i] += Scalar{2} * std::max(inp[i], Scalar{0}) * dout[i];
  }
}

template void squared_relu_forward<float>(std::span<float>, std::span<const float>);
template void squared_relu_forward<double>(std::span<double>, std::span<const double>);
template void squared_relu_backward<float>(std::span<float>, std::span<const float>,
                                           std::span<const float>);
template void squared_relu_backward<double>(std::span<double>, std::span<const double>,
                                            std::span<const double>);

}  // namespace traintwin::exec::cpu
