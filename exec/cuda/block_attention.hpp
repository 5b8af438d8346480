// Blockwise causal attention with log-sum-exp statistics on the GPU: the same functions, shapes
// and semantics as exec/cpu/block_attention.hpp (FlashAttention's tile, Dao et al. 2022; one
// block of ring attention under context parallelism, Liu et al. 2023; grouped-query attention,
// query head h on K/V head h / (NH / G)). For a query row (b, h, t) and the keys j of the block
// with global position pos_k[j] <= pos_q[t] (exec/cp_sequence.hpp), scale = 1 / sqrt(D):
//   s_j = scale q . k_j,  lse = log sum_j exp(s_j),  P_j = exp(s_j - lse),  out = sum_j z_j P_j v_j
// (z_j: attention-probability dropout factor on global positions, exec/cpu/dropout.hpp's mask);
// a row with no visible key has out = 0, lse = -inf. The backward (FlashAttention-2, from the
// final merged out and lse, D = rowsum(dout o out)):
//   dv_j += z_j P_j dout,  dS_j = P_j (z_j dout . v_j - D) scale,  dq += dS_j k_j,  dk_j += dS_j q
// Kernels: fp32 storage; under float32_matmul_precision high or medium (TF32 or bf16 products)
// and head_dim 64 or 128, the tensor-core kernels of flash_attention_tc.cuh (FlashAttention-2's
// tiles through WMMA); otherwise fp32 arithmetic (no tensor cores), no T x T store. The forward
// and the dq kernel take 16 query rows of one (sample, head) per block of 4 warps (4 rows per warp),
// stream the visible keys through shared memory 32 at a time (lane j owns key j of the tile for
// the scores; the output row is spread over the lanes, D / 32 channels each) with the online
// softmax of Milakov & Gimelshein 2018; the dk/dv kernel takes 16 keys of one (sample, K/V head)
// per block and streams the query rows of the group's heads that see them, 32 at a time, so
// nothing is accumulated atomically. head_dim at most 256. Device pointers; asynchronous on
// `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/scenario.hpp"
#include "exec/cp_sequence.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/block_attention.hpp"

namespace traintwin::exec::cuda {

/// Largest head_dim the kernels take.
inline constexpr int64_t kBlockAttentionMaxHeadDim = 256;

/// Forward of one block; overwrites out and lse. Queries are the local positions of
/// `q_positions` (shape.seq_q = q_positions.local()), keys those of `k_positions` (shape.seq_k =
/// k_positions.local()). `dropout` (may be null) is the attention-probability dropout whose
/// block's seq is the whole sequence. Throws InvalidArgument for a size < 1, groups not dividing
/// heads, a head_dim above kBlockAttentionMaxHeadDim, positions that are not the shape's, dropout
/// p outside [0, 1), a dropout block of other sizes or a null pointer; CudaError if a launch
/// fails. `precision`: the products' arithmetic (highest: fp32; high: TF32; medium: bf16 operands,
/// fp32 accumulation), as the GEMMs'.
void block_attention_forward(float* out,        // [B, Tq, NH D]
                             float* lse,        // [B, NH, Tq]
                             const float* q,    // [B, Tq, NH D]
                             const float* kv,   // [B, Tk, 2 G D]: [k | v] rows
                             const CpSequence& q_positions, const CpSequence& k_positions,
                             const cpu::BlockAttentionShape& shape,
                             const cpu::AttentionProbabilityDropout* dropout,
                             Float32MatmulPrecision precision, cudaStream_t stream);

/// Ring attention's merge of a block's (block_out, block_lse) into the running (out, lse), in
/// place:  lse' = log(exp(lse) + exp(block_lse)),
///         out' = exp(lse - lse') out + exp(block_lse - lse') block_out;
/// rows whose lse are both -inf are left as they are. One warp per row (b, h, t). Throws
/// InvalidArgument for a size < 1 or a null pointer; CudaError if the launch fails.
void attention_merge(float* out,              // [B, T, NH D]
                     float* lse,              // [B, NH, T]
                     const float* block_out,  // [B, T, NH D]
                     const float* block_lse,  // [B, NH, T]
                     int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                     cudaStream_t stream);

/// Bytes of device workspace block_attention_backward needs: B NH Tq floats (D per row).
size_t block_attention_backward_workspace_bytes(const cpu::BlockAttentionShape& shape);

/// Backward of one block; accumulates (+=) into dq and dkv. `out` and `lse` are the rows' final
/// (merged) values, `dout` their gradient. Three kernels: D = rowsum(dout o out) into the
/// workspace, dq (per query tile), dk and dv (per key tile); `precision` as the forward's. Throws
/// as block_attention_forward,
/// or for a workspace smaller than block_attention_backward_workspace_bytes().
void block_attention_backward(float* dq,          // [B, Tq, NH D]
                              float* dkv,         // [B, Tk, 2 G D]
                              const float* dout,  // [B, Tq, NH D]
                              const float* q,     // [B, Tq, NH D]
                              const float* kv,    // [B, Tk, 2 G D]
                              const float* out,   // [B, Tq, NH D]
                              const float* lse,   // [B, NH, Tq]
                              const CpSequence& q_positions, const CpSequence& k_positions,
                              const cpu::BlockAttentionShape& shape,
                              const cpu::AttentionProbabilityDropout* dropout, void* workspace,
                              size_t workspace_bytes, Float32MatmulPrecision precision,
                              cudaStream_t stream);

}  // namespace traintwin::exec::cuda
