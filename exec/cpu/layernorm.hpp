// LayerNorm over the channel dimension (llm.c layernorm_forward/backward):
//   out = (inp - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + 1e-5)  (biased variance)
// B = batch, T = seq, C = channels. Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// The epsilon inside the square root, as GPT-2 / llm.c.
inline constexpr double kLayerNormEps = 1e-5;

/// Forward; also saves mean and rstd per position for the backward.
/// Throws InvalidArgument for a size < 1 or a span whose length does not match its shape.
template <typename Scalar>
void layernorm_forward(std::span<Scalar> out,          // [B, T, C]
                       std::span<Scalar> mean,         // [B, T]
                       std::span<Scalar> rstd,         // [B, T]
                       std::span<const Scalar> inp,    // [B, T, C]
                       std::span<const Scalar> weight, // [C]
                       std::span<const Scalar> bias,   // [C]
                       int64_t batch, int64_t seq, int64_t channels);

/// Backward; accumulates (+=) into dinp, dweight and dbias. Throws as layernorm_forward.
template <typename Scalar>
void layernorm_backward(std::span<Scalar> dinp,           // [B, T, C]
                        std::span<Scalar> dweight,        // [C]
                        std::span<Scalar> dbias,          // [C]
                        std::span<const Scalar> dout,     // [B, T, C]
                        std::span<const Scalar> inp,      // [B, T, C]
                        std::span<const Scalar> weight,   // [C]
                        std::span<const Scalar> mean,     // [B, T]
                        std::span<const Scalar> rstd,     // [B, T]
                        int64_t batch, int64_t seq, int64_t channels);

}  // namespace traintwin::exec::cpu
