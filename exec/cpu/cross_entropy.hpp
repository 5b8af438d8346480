// Softmax over the vocabulary and cross-entropy loss per position (llm.c softmax_forward,
// crossentropy_forward, crossentropy_softmax_backward):
//   probs[b, t, :] = softmax(logits[b, t, :]),  losses[b, t] = -ln probs[b, t, targets[b, t]]
//   dlogits[b, t, v] += (probs[b, t, v] - 1[v == targets[b, t]]) dlosses[b, t]
// B = batch, T = seq, V = vocab. The mean loss of llm.c is dlosses = 1 / (B*T).
// Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Numerically stable softmax (max subtracted). Throws InvalidArgument for a size < 1 or a span
/// whose length does not match its shape.
template <typename Scalar>
void softmax_forward(std::span<Scalar> probs,          // [B, T, V]
                     std::span<const Scalar> logits,   // [B, T, V]
                     int64_t batch, int64_t seq, int64_t vocab);

/// Loss per position from the softmax probabilities. Throws InvalidArgument as softmax_forward
/// and for a target outside [0, V).
template <typename Scalar>
void cross_entropy_forward(std::span<Scalar> losses,          // [B, T]
                           std::span<const Scalar> probs,     // [B, T, V]
                           std::span<const int32_t> targets,  // [B, T]
                           int64_t batch, int64_t seq, int64_t vocab);

/// Backward through cross-entropy and softmax together; accumulates (+=) into dlogits.
/// Throws as cross_entropy_forward.
template <typename Scalar>
void cross_entropy_softmax_backward(std::span<Scalar> dlogits,          // [B, T, V]
                                    std::span<const Scalar> dlosses,    // [B, T]
                                    std::span<const Scalar> probs,      // [B, T, V]
                                    std::span<const int32_t> targets,   // [B, T]
                                    int64_t batch, int64_t seq, int64_t vocab);

}  // namespace traintwin::exec::cpu
