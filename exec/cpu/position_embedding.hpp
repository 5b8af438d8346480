// Learned position embedding added to a block of hidden states that holds the consecutive
// positions [seq_offset, seq_offset + T_local) of each sample (a sequence-parallel or
// context-parallel shard; seq_offset = 0 and T_local = T for the whole sequence):
//   forward:  out[b, t, :] += wpe[seq_offset + t, :]
//   backward: dwpe[seq_offset + t, :] += sum over b of dout[b, t, :]
// This is the position half of llm.c encoder_forward/backward (exec/cpu/embedding.hpp) and of
// Megatron-LM LanguageModelEmbedding (word + position embeddings). B = batch, T_local = seq_local,
// C = channels, maxT = rows of wpe. Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Forward; adds (+=) the position rows into `out` (which usually holds the word embeddings).
/// Throws InvalidArgument for a size < 1, seq_offset < 0, a span whose length does not match its
/// shape, wpe not a whole number of rows, or seq_offset + T_local > maxT.
template <typename Scalar>
void position_embedding_forward(std::span<Scalar> out,        // [B, T_local, C]
                                std::span<const Scalar> wpe,  // [maxT, C]
                                int64_t batch, int64_t seq_local, int64_t channels,
                                int64_t seq_offset);

/// Backward; accumulates (+=) into rows [seq_offset, seq_offset + T_local) of dwpe.
/// Throws as position_embedding_forward.
template <typename Scalar>
void position_embedding_backward(std::span<Scalar> dwpe,        // [maxT, C]
                                 std::span<const Scalar> dout,  // [B, T_local, C]
                                 int64_t batch, int64_t seq_local, int64_t channels,
                                 int64_t seq_offset);

}  // namespace traintwin::exec::cpu
