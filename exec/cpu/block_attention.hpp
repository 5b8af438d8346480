// Blockwise causal attention with log-sum-exp statistics: the building block of FlashAttention
// (Dao et al. 2022, Algorithm 1-2: no T x T score matrix is stored, the backward recomputes the
// probabilities from the saved log-sum-exp) and of ring attention under context parallelism
// (Liu et al. 2023; Megatron-Core / Transformer Engine cp_comm_type p2p), where each CP rank
// attends its queries to one K/V block at a time and merges the block outputs by their
// log-sum-exps (the online softmax of Milakov & Gimelshein 2018).
//
// Queries and keys carry their positions in the whole sequence (under CP a rank holds two
// non-contiguous chunks, exec/cp_sequence.hpp); the causal mask is key position <= query
// position. Grouped-query attention (Ainslie et al. 2023): query head h uses K/V head
// h / (NH / G); G = NH is multi-head attention. With scale = 1 / sqrt(D), for one query row
// (b, h, t) against the keys j of a block with pos_k[j] <= pos_q[t]:
//   s_j = scale q . k_j,   lse = log sum_j exp(s_j),   P_j = exp(s_j - lse)
//   out = sum_j z_j P_j v_j      (z_j: attention-probability dropout factor, 1 without dropout)
// A row with no visible key has out = 0 and lse = -inf. Merging two blocks' (out, lse):
//   lse' = log(exp(lse_1) + exp(lse_2)),   out' = exp(lse_1 - lse') out_1 + exp(lse_2 - lse') out_2
// which equals attending to the union of the blocks' keys. The backward of one block, from the
// FINAL (merged) out and lse of the row and its output gradient dout (FlashAttention-2's
// D = rowsum(dout * out), valid with dropout as well):
//   P_j = exp(s_j - lse), dv_j += z_j P_j dout, dP_j = z_j dout . v_j, dS_j = P_j (dP_j - D),
//   dq += scale sum_j dS_j k_j,   dk_j += scale dS_j q
// Layouts: q and out [B, Tq, NH D]; kv [B, Tk, 2 G D] with each row [k (G D) | v (G D)] (the K/V
// columns of a fused QKV row, exchanged as one block); lse [B, NH, Tq]. Dropout masks use
// attention_dropout_index() on global positions (the dropout block's seq is the whole sequence),
// the mask of attention.hpp and gqa_attention.hpp. Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

#include "exec/cpu/attention.hpp"

namespace traintwin::exec::cpu {

/// Sizes of one block call.
struct BlockAttentionShape {
  int64_t batch = 0;     ///< B
  int64_t seq_q = 0;     ///< Tq, query rows
  int64_t seq_k = 0;     ///< Tk, keys of the block
  int64_t heads = 0;     ///< NH, query heads
  int64_t groups = 0;    ///< G, K/V heads (divides NH)
  int64_t head_dim = 0;  ///< D
};

/// Forward of one block: overwrites out and lse. `q_positions` ([Tq]) and `k_positions` ([Tk],
/// non-decreasing) are positions in the whole sequence, below the dropout block's seq when
/// `dropout` (may be null) is given. Throws InvalidArgument for a size < 1, groups not dividing
/// heads, a span whose length does not match its shape, decreasing or negative key positions,
/// or a dropout block of other sizes.
template <typename Scalar>
void block_attention_forward(std::span<Scalar> out,                    // [B, Tq, NH D]
                             std::span<Scalar> lse,                    // [B, NH, Tq]
                             std::span<const Scalar> q,                // [B, Tq, NH D]
                             std::span<const Scalar> kv,               // [B, Tk, 2 G D]
                             std::span<const int64_t> q_positions,     // [Tq]
                             std::span<const int64_t> k_positions,     // [Tk]
                             const BlockAttentionShape& shape,
                             const AttentionProbabilityDropout* dropout = nullptr);

/// Merges a block's (block_out, block_lse) into the running (out, lse) in place, as above; rows
/// whose lse are both -inf stay 0 / -inf. Throws InvalidArgument for mismatched lengths or a
/// size < 1.
template <typename Scalar>
void attention_merge(std::span<Scalar> out,                // [B, T, NH D]
                     std::span<Scalar> lse,                // [B, NH, T]
                     std::span<const Scalar> block_out,    // [B, T, NH D]
                     std::span<const Scalar> block_lse,    // [B, NH, T]
                     int64_t batch, int64_t seq, int64_t heads, int64_t head_dim);

/// Backward of one block; accumulates (+=) into dq and dkv (the block's K and V gradients).
/// `out` and `lse` are the row's final values (after every merge), `dout` their gradient.
/// Throws as block_attention_forward.
template <typename Scalar>
void block_attention_backward(std::span<Scalar> dq,                     // [B, Tq, NH D]
                              std::span<Scalar> dkv,                    // [B, Tk, 2 G D]
                              std::span<const Scalar> dout,             // [B, Tq, NH D]
                              std::span<const Scalar> q,                // [B, Tq, NH D]
                              std::span<const Scalar> kv,               // [B, Tk, 2 G D]
                              std::span<const Scalar> out,              // [B, Tq, NH D]
                              std::span<const Scalar> lse,              // [B, NH, Tq]
                              std::span<const int64_t> q_positions,     // [Tq]
                              std::span<const int64_t> k_positions,     // [Tk]
                              const BlockAttentionShape& shape,
                              const AttentionProbabilityDropout* dropout = nullptr);

}  // namespace traintwin::exec::cpu
