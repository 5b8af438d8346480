// Causal multi-head self-attention core (llm.c attention_forward/backward) on a fused QKV input:
//   inp[b, t, :] = [q (C) | k (C) | v (C)]; head h uses channels [h*hs, (h+1)*hs) of each,
//   hs = C / NH
//   preatt[b, h, t, t2] = q_t . k_t2 / sqrt(hs)                 for t2 <= t (causal)
//   att[b, h, t, :]     = softmax over t2 <= t of preatt; 0 for t2 > t
//   out[b, t, h*hs + i] = sum over t2 <= t of att[b, h, t, t2] v_t2[h*hs + i]
// B = batch, T = seq, C = channels, NH = heads. Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

#include "exec/cpu/dropout.hpp"

namespace traintwin::exec::cpu {

/// Dropout of the attention probabilities (Megatron's attention_dropout): the values are weighted
/// by dropout(att), inverted (kept entries x 1/(1-p)), with the mask of attention_dropout_forward
/// (dropout.hpp) for `block`, whose batch, heads and seq must be the call's; `att` itself stays
/// the undropped softmax, which the backward needs.
struct AttentionProbabilityDropout {
  DropoutParams params;
  AttentionBlock block;
};

/// Forward; saves preatt (masked entries -inf) and att (masked entries 0) for the backward.
/// `dropout` (may be null: none) drops attention probabilities.
/// Throws InvalidArgument for a size < 1, heads not dividing channels, a span whose length
/// does not match its shape, or a dropout block of other sizes.
template <typename Scalar>
void attention_forward(std::span<Scalar> out,        // [B, T, C]
                       std::span<Scalar> preatt,     // [B, NH, T, T]
                       std::span<Scalar> att,        // [B, NH, T, T]
                       std::span<const Scalar> inp,  // [B, T, 3C]
                       int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                       const AttentionProbabilityDropout* dropout = nullptr);

/// Backward; accumulates (+=) into dinp (the q, k and v parts). Needs only the saved att (and
/// the forward's `dropout`, whose mask it recomputes). Throws as attention_forward.
template <typename Scalar>
void attention_backward(std::span<Scalar> dinp,         // [B, T, 3C]
                        std::span<const Scalar> dout,   // [B, T, C]
                        std::span<const Scalar> inp,    // [B, T, 3C]
                        std::span<const Scalar> att,    // [B, NH, T, T]
                        int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                        const AttentionProbabilityDropout* dropout = nullptr);

}  // namespace traintwin::exec::cpu
