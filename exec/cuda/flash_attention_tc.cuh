// Private to exec/cuda/block_attention.cu: blockwise causal attention on the tensor cores
// (FlashAttention-2, Dao 2023, Algorithms 1 and 2), the path block_attention_forward/backward
// take when float32_matmul_precision allows TF32 (high) or bf16 (medium) products. Same
// functions, semantics, CP positions, GQA and dropout as the fp32 kernels of block_attention.cu
// (exec/cuda/block_attention.hpp); what differs is the arithmetic of the two products of each
// tile: operands rounded to TF32 (10-bit mantissa) or bf16 (7-bit), fp32 accumulation, the
// softmax and its statistics in fp32. Storage stays fp32.
//
// Tiles: 64 query rows x 64 keys per step, 4 warps of 16 rows, WMMA 16x16 fragments (the tile's
// Q, K, V (and dO) converted once into shared memory). Forward: two passes over the visible key
// tiles, the first for each row's max and sum (lse), the second for out = sum P V with P =
// exp(s - lse) exact, so the output accumulates in fragments without rescaling. Backward as the
// fp32 kernels: one kernel per query tile for dq (S, P, dP = dO V^T, dS recomputed), one per key
// tile of a K/V head for dk and dv over the group's heads (nothing atomic). head_dim 64 or 128.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "core/scenario.hpp"
#include "exec/cuda/block_attention_params.cuh"

namespace traintwin::exec::cuda::detail {

/// Whether the tensor-core kernels take this call: precision high or medium, head_dim 64 or
/// 128, sequences below 2^31 positions, and every pointer 16-byte aligned (the tiles are loaded
/// as float4).
bool tensor_core_attention_applies(const Params& p, Float32MatmulPrecision precision,
                                   std::initializer_list<const void*> pointers);

/// Forward of one block on the tensor cores: out [B, Tq, NH D] and lse [B, NH, Tq] overwritten.
/// Requires tensor_core_attention_applies(); CudaError if a launch fails.
void tensor_core_attention_forward(float* out, float* lse, const float* q, const float* kv,
                                   const Params& p, Float32MatmulPrecision precision,
                                   cudaStream_t stream);

/// Backward of one block on the tensor cores: dq [B, Tq, NH D] and dkv [B, Tk, 2 G D] +=, from
/// the final lse and dsum [B, NH, Tq] = rowsum(dout o out). Requires
/// tensor_core_attention_applies(); CudaError if a launch fails.
void tensor_core_attention_backward(float* dq, float* dkv, const float* dout, const float* q,
                                    const float* kv, const float* lse, const float* dsum,
                                    const Params& p, Float32MatmulPrecision precision,
                                    cudaStream_t stream);

}  // namespace traintwin::exec::cuda::detail
