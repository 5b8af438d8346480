// GELU, tanh approximation as GPT-2 / llm.c:
//   out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// Elementwise over N values (N = B*T*4C in the MLP). Scalar is float or double. double evaluates
// the tanh form with std::tanh/std::cosh (the reference). float uses the identity
// 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)) with exp_approx (exec/cpu/vector_math.hpp), vectorized:
// |error| <= 1.5e-7 (1 + |x|) in the output and 4e-7 (1 + |x|) in the local gradient against the
// float64 formula (tests/exec/vector_math_test.cpp; the float std::tanh/std::cosh evaluation
// it replaces: 0.9e-7 for both), at a tenth of the time.
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
