// Residual connection; see residual.hpp.
#include "exec/cpu/residual.hpp"

#include "exec/cpu/checks.hpp"

#include <string>

#include "core/error.hpp"

namespace traintwin::exec::cpu {
namespace {

void require_same(size_t a, size_t b, const char* what) {
  cpu::require_same("residual", a, b, what);
}


}  // namespace

template <typename Scalar>
void residual_forward(std::span<Scalar> out, std::span<const Scalar> inp1,
                      std::span<const Scalar> inp2) {
  require_same(out.size(), inp1.size(), "out and inp1");
  require_same(out.size(), inp2.size(), "out and inp2");
  for (size_t i = 0; i < out.size(); ++i) out[i] = inp1[i] + inp2[i];
}

template <typename Scalar>
void residual_backward(std::span<Scalar> dinp1, std::span<Scalar> dinp2,
                       std::span<const Scalar> dout) {
  require_same(dinp1.size(), dout.size(), "dinp1 and dout");
  require_same(dinp2.size(), dout.size(), "dinp2 and dout");
  for (size_t i = 0; i < dout.size(); ++i) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}

template void residual_forward<float>(std::span<float>, std::span<const float>,
                                      std::span<const float>);
template void residual_forward<double>(std::span<double>, std::span<const double>,
                                       std::span<const double>);
template void residual_backward<float>(std::span<float>, std::span<float>,
                                       std::span<const float>);
template void residual_backward<double>(std::span<double>, std::span<double>,
                                        std::span<const double>);

}  // namespace traintwin::exec::cpu
