// Residual connection (llm.c residual_forward/backward): out = inp1 + inp2, elementwise over
// N values (N = B*T*C). Scalar is float or double.
#pragma once

#include <span>

namespace traintwin::exec::cpu {

/// Forward. Throws InvalidArgument when the lengths differ.
template <typename Scalar>
void residual_forward(std::span<Scalar> out,          // [N]
                      std::span<const Scalar> inp1,   // [N]
                      std::span<const Scalar> inp2);  // [N]

/// Backward; accumulates (+=) dout into both dinp1 and dinp2. Throws InvalidArgument when the
/// lengths differ.
template <typename Scalar>
void residual_backward(std::span<Scalar> dinp1,        // [N]
                       std::span<Scalar> dinp2,        // [N]
                       std::span<const Scalar> dout);  // [N]

}  // namespace traintwin::exec::cpu
