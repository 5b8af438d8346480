// Vocab-parallel token embedding (Megatron-LM megatron/core/tensor_parallel/layers.py,
// VocabParallelEmbedding). The word table wte[V_total, C] is split by rows over the TP ranks;
// this rank holds rows [vocab_start, vocab_start + V_local) as wte_local[V_local, C].
//   forward:  out[b, t, :] = wte_local[tok - vocab_start, :]  if vocab_start <= tok <
//                                                               vocab_start + V_local, else 0
//   backward: dwte_local[tok - vocab_start, :] += dout[b, t, :]  for the same in-range tokens
// The executor then all-reduces `out` (SUM) over the TP group (Megatron reduce_from_tensor_
// model_parallel_region, or a reduce-scatter with sequence parallelism); every token is in range
// on exactly one rank. The backward needs no communication. B = batch, T = seq, C = channels.
// Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Forward; overwrites `out`. Throws InvalidArgument for a size < 1, a span whose length does
/// not match its shape, a shard outside [0, V_total) (vocab_start < 0 or vocab_start + V_local >
/// V_total), or a token id outside [0, V_total).
template <typename Scalar>
void vocab_parallel_embedding_forward(std::span<Scalar> out,              // [B, T, C]
                                      std::span<const int32_t> tokens,    // [B, T]
                                      std::span<const Scalar> wte_local,  // [V_local, C]
                                      int64_t batch, int64_t seq, int64_t channels,
                                      int64_t vocab_start, int64_t vocab_local,
                                      int64_t vocab_total);

/// Backward; accumulates (+=) into the rows of dwte_local of the in-range tokens.
/// Throws as vocab_parallel_embedding_forward.
template <typename Scalar>
void vocab_parallel_embedding_backward(std::span<Scalar> dwte_local,     // [V_local, C]
                                       std::span<const Scalar> dout,     // [B, T, C]
                                       std::span<const int32_t> tokens,  // [B, T]
                                       int64_t batch, int64_t seq, int64_t channels,
                                       int64_t vocab_start, int64_t vocab_local,
                                       int64_t vocab_total);

}  // namespace traintwin::exec::cpu
