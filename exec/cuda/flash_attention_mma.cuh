// Private to exec/cuda/block_attention.cu: blockwise causal attention in bf16 arithmetic on the
// tensor cores through mma.sync (FlashAttention-2, Dao 2023, Algorithms 1 and 2, with its
// register-level softmax), the path block_attention_forward/backward take under
// float32_matmul_precision medium (training.precision bf16 sets it) without attention dropout.
// Same functions, semantics, CP positions and GQA as the fp32 kernels of block_attention.cu; the
// two products of each tile take operands rounded to bf16 and accumulate in fp32, the softmax and
// its statistics are fp32, storage stays fp32. flash_attention_tc.cuh (WMMA) keeps TF32 and
// dropout.
//
// Tiles: 64 query rows x 64 keys per step, 4 warps of 16 rows, mma.sync.m16n8k16 with the score
// tile held in registers: the forward is one pass with the online softmax (running max and sum,
// the output rescaled), its P fed to the second product straight from the accumulators; V, and
// in the backward Q, dO and K, are read as transposed operands by ldmatrix.trans. Each call
// rounds q, kv (and dout) to bf16 copies once (stream-ordered allocations, freed when the call's
// kernels are done), which the kernels copy into shared memory with cp.async, the next K/V (or
// Q/dO) tile in flight while the current one is used. Backward in one kernel (FlashAttention-2's
// Algorithm 2): a block per key tile of a K/V head computes dk and dv over the group's heads and
// adds each query tile's dq share with fp32 atomics (dq's summation order varies run to run).
// head_dim 64 or 128.
#pragma once

#include <cuda_runtime_api.h>

#include <initializer_list>

#include "core/scenario.hpp"
#include "exec/cuda/block_attention_params.cuh"

namespace traintwin::exec::cuda::detail {

/// Whether these kernels take this call: precision medium, no attention dropout, head_dim 64 or
/// 128, sequences below 2^31 positions, every pointer 16-byte aligned.
bool mma_attention_applies(const Params& p, Float32MatmulPrecision precision,
                           std::initializer_list<const void*> pointers);

/// Forward of one block: out [B, Tq, NH D] and lse [B, NH, Tq] (natural log) overwritten.
/// Requires mma_attention_applies(); CudaError if a launch fails.
void mma_attention_forward(float* out, float* lse, const float* q, const float* kv,
                           const Params& p, cudaStream_t stream);

/// Backward of one block: dq [B, Tq, NH D] and dkv [B, Tk, 2 G D] +=, from the final lse and
/// dsum [B, NH, Tq] = rowsum(dout o out). Requires mma_attention_applies(); CudaError if a
/// launch fails.
void mma_attention_backward(float* dq, float* dkv, const float* dout, const float* q,
                            const float* kv, const float* lse, const float* dsum, const Params& p,
                            cudaStream_t stream);

}  // namespace traintwin::exec::cuda::detail
