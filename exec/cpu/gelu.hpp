// GELU, tanh approximation as GPT-2 / llm.c:
//   out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// Elementwise over N values (N = B*T*4C in the MLP). Scalar is float or double.
#pragma once

#include <span>

namespace traintwin::exec::cpu {

/// Forward. Throws InvalidArgument when out and inp differ in length.
template <typename Scalar>
void gelu_forward(std::span<Scalar> out,         // [N]
                  std::span<const Scalar> inp);  // [N]

/// Backward; accumulates (+=) into dinp. Throws InvalidArgument when the lengths differ.
template <typename Scalar>
void gelu_backward(std::span<Scalar> dinp,         // [N]
                   std::span<const Scalar> inp,    // [N]
                   std::span<const Scalar> dout);  // [N]

}  // namespace traintwin::exec::cpu
