// Causal grouped-query self-attention on the GPU (Ainslie et al. 2023; Llama 2 70B, Llama 3): the
// same function, shapes and semantics as exec/cpu/gqa_attention.hpp, on a fused QKV input of NH
// query heads and G key/value heads, head_dim D:
//   inp[b, t, :] = [q (NH D) | k (G D) | v (G D)]; query head h uses K/V head h / (NH / G)
//   att[b, h, t, :] = causal softmax of q_h,t . k_g,t2 / sqrt(D); out = (att o Z) v_g
// (Z: the attention-probability dropout factors of exec/cpu/dropout.hpp's global mask, 1 without
// dropout). Computed as exec/cuda/attention.cu does multi-head attention: permute inp to
// q [B, NH, T, D], k and v [B, G, T, D]; the NH/G query heads of group g are consecutive in q, so
// q_g is one [NH/G T, D] matrix and every product is one strided-batched cuBLAS GEMM over the
// B G groups (scores [NH/G T, T] = q_g k_g^T, y = att_g v_g, dv_g = att_g^T dy_g, dk_g = ds_g^T
// q_g, ...), with the causal softmax of exec/cuda/softmax.hpp and the attention dropout of
// exec/cuda/dropout.hpp between them. fp32 storage and arithmetic; scratch in a caller-provided
// workspace of gqa_attention_workspace_bytes(). Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "exec/cpu/attention.hpp"
#include "exec/cuda/gemm.hpp"

namespace traintwin::exec::cuda {

/// Bytes of device workspace gqa_attention_forward (`backward` false) or gqa_attention_backward
/// (true) needs, in floats: the forward 2 B NH T D + 2 B G T D (q, y; k, v) plus, with active
/// dropout (non-null, p > 0), B NH T T (the dropped-out probabilities); the backward
/// 3 B NH T D + 4 B G T D (q, dy, dq; k, v, dk, dv) plus B NH T T (datt) and, with active
/// dropout, another B NH T T. Throws InvalidArgument as the checks of gqa_attention_forward.
size_t gqa_attention_workspace_bytes(int64_t batch, int64_t seq, int64_t heads,
                                     int64_t query_groups, int64_t head_dim, bool dropout,
                                     bool backward);

/// Forward; overwrites out and att (the undropped causal softmax, exact zeros above the
/// diagonal). `dropout` (may be null) must describe a block of this call's batch, heads and seq.
/// Throws InvalidArgument for a size < 1, query_groups not dividing heads, dropout p outside
/// [0, 1), a dropout block of other sizes, a workspace too small or a null pointer; CudaError if
/// a launch or cuBLAS fails.
void gqa_attention_forward(CublasContext& ctx,
                           float* out,        // [B, T, NH D]
                           float* att,        // [B, NH, T, T]
                           const float* inp,  // [B, T, (NH + 2G) D]
                           void* workspace, size_t workspace_bytes, int64_t batch, int64_t seq,
                           int64_t heads, int64_t query_groups, int64_t head_dim,
                           const cpu::AttentionProbabilityDropout* dropout, cudaStream_t stream);

/// Backward; accumulates (+=) into dinp (q, k and v parts; each K/V head gathers the gradients
/// of its NH/G query heads). Needs the saved att and the forward's `dropout` (its mask is
/// recomputed). Throws as gqa_attention_forward.
void gqa_attention_backward(CublasContext& ctx,
                            float* dinp,        // [B, T, (NH + 2G) D]
                            const float* dout,  // [B, T, NH D]
                            const float* inp,   // [B, T, (NH + 2G) D]
                            const float* att,   // [B, NH, T, T]
                            void* workspace, size_t workspace_bytes, int64_t batch, int64_t seq,
                            int64_t heads, int64_t query_groups, int64_t head_dim,
                            const cpu::AttentionProbabilityDropout* dropout, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
