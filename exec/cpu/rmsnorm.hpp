// RMSNorm over the channel dimension (Zhang & Sennrich 2019; Llama, Megatron --normalization
// RMSNorm), llm.c style:
//   out = inp * rrms * weight,  rrms = 1 / sqrt(mean over C of inp^2 + eps)
// No mean subtraction and no bias. B = batch, T = seq, C = channels. Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Megatron's default --norm-epsilon (Llama 3 uses 1e-5 too).
inline constexpr double kRmsNormEps = 1e-5;

/// Forward; saves rrms per position for the backward.
/// Throws InvalidArgument for a size < 1 or a span whose length does not match its shape.
template <typename Scalar>
void rmsnorm_forward(std::span<Scalar> out,           // [B, T, C]
                     std::span<Scalar> rrms,          // [B, T]
                     std::span<const Scalar> inp,     // [B, T, C]
                     std::span<const Scalar> weight,  // [C]
                     int64_t batch, int64_t seq, int64_t channels);

/// Backward; accumulates (+=) into dinp and dweight:
///   dweight_i += dout_i inp_i rrms;
///   dinp_i += rrms weight_i dout_i - rrms^3 inp_i / C * sum_j dout_j weight_j inp_j.
/// Throws as rmsnorm_forward.
template <typename Scalar>
void rmsnorm_backward(std::span<Scalar> dinp,           // [B, T, C]
                      std::span<Scalar> dweight,        // [C]
                      std::span<const Scalar> dout,     // [B, T, C]
                      std::span<const Scalar> inp,      // [B, T, C]
                      std::span<const Scalar> weight,   // [C]
                      std::span<const Scalar> rrms,     // [B, T]
                      int64_t batch, int64_t seq, int64_t channels);

}  // namespace traintwin::exec::cpu
