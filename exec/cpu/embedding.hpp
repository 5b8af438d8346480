// Token + learned position embedding (llm.c encoder_forward/backward):
//   out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]
// B = batch, T = seq, C = channels, V = vocab, maxT = rows of wpe (>= T). Scalar is float or
// double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Forward. Throws InvalidArgument for a size < 1, a span whose length does not match its shape,
/// T > maxT, or a token id outside [0, V).
template <typename Scalar>
void embedding_forward(std::span<Scalar> out,           // [B, T, C]
                       std::span<const int32_t> tokens, // [B, T]
                       std::span<const Scalar> wte,     // [V, C]
                       std::span<const Scalar> wpe,     // [maxT, C]
                       int64_t batch, int64_t seq, int64_t channels, int64_t vocab);

/// Backward; accumulates (+=) into the rows of dwte and dwpe that the forward read.
/// Throws as embedding_forward.
template <typename Scalar>
void embedding_backward(std::span<Scalar> dwte,           // [V, C]
                        std::span<Scalar> dwpe,           // [maxT, C]
                        std::span<const Scalar> dout,     // [B, T, C]
                        std::span<const int32_t> tokens,  // [B, T]
                        int64_t batch, int64_t seq, int64_t channels, int64_t vocab);

}  // namespace traintwin::exec::cpu
