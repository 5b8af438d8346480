// Squared ReLU (So et al. 2021, "Primer"; Nemotron-4, Megatron --squared-relu), elementwise:
//   out = max(inp, 0)^2
// N values (B*T*F in the MLP). Scalar is float or double.
#pragma once

#include <span>

namespace traintwin::exec::cpu {

/// Forward. Throws InvalidArgument when out and inp differ in length.
template <typename Scalar>
void squared_relu_forward(std::span<Scalar> out,         // [N]
                          std::span<const Scalar> inp);  // [N]

/// Backward; accumulates (+=) into dinp: dinp += 2 max(inp, 0) dout. Throws when the lengths
/// differ.
template <typename Scalar>
void squared_relu_backward(std::span<Scalar> dinp,         // [N]
                           std::span<const Scalar> inp,    // [N]
                           std::span<const Scalar> dout);  // [N]

}  // namespace traintwin::exec::cpu
