// Causal grouped-query self-attention core (Ainslie et al. 2023; Llama 2 70B, Llama 3), llm.c
// style, on a fused QKV input of NH query heads and G key/value heads (query groups), head_dim D:
//   inp[b, t, :] = [q (NH D) | k (G D) | v (G D)]; query head h uses K/V head h / (NH / G)
//   preatt[b, h, t, t2] = q_h,t . k_g,t2 / sqrt(D)                 for t2 <= t (causal)
//   att[b, h, t, :]     = softmax over t2 <= t of preatt; 0 for t2 > t
//   out[b, t, h D + i]  = sum over t2 <= t of att[b, h, t, t2] v_g,t2[i]
// G = NH is multi-head attention, G = 1 multi-query attention. Attention-probability dropout
// (optional) draws the mask of attention.hpp on the same global (sample, head, query, key)
// coordinates (attention_dropout_row.hpp), so both kernels drop the same entries for G = NH.
// B = batch, T = seq. Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

#include "exec/cpu/attention.hpp"

namespace traintwin::exec::cpu {

/// Forward; saves att (masked entries 0, undropped) for the backward. `dropout` (may be null:
/// none) weights the values by the dropped-out probabilities.
/// Throws InvalidArgument for a size < 1, query_groups not dividing heads, a span whose
/// length does not match its shape, or a dropout block of other sizes.
template <typename Scalar>
void gqa_attention_forward(std::span<Scalar> out,        // [B, T, NH D]
                           std::span<Scalar> att,        // [B, NH, T, T]
                           std::span<const Scalar> inp,  // [B, T, (NH + 2G) D]
                           int64_t batch, int64_t seq, int64_t heads, int64_t query_groups,
                           int64_t head_dim,
                           const AttentionProbabilityDropout* dropout = nullptr);

/// Backward; accumulates (+=) into dinp (q, k, v parts; each K/V head gathers the gradients of
/// its NH / G query heads). Needs only the saved att and the forward's `dropout` (its mask is
/// recomputed). Throws as gqa_attention_forward.
template <typename Scalar>
void gqa_attention_backward(std::span<Scalar> dinp,         // [B, T, (NH + 2G) D]
                            std::span<const Scalar> dout,   // [B, T, NH D]
                            std::span<const Scalar> inp,    // [B, T, (NH + 2G) D]
                            std::span<const Scalar> att,    // [B, NH, T, T]
                            int64_t batch, int64_t seq, int64_t heads, int64_t query_groups,
                            int64_t head_dim,
                            const AttentionProbabilityDropout* dropout = nullptr);

}  // namespace traintwin::exec::cpu
