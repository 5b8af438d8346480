// Causal (upper-triangular masked) scaled softmax over attention scores [B, NH, T, T] on the
// GPU, as Megatron-LM's ScaledUpperTriangMaskedSoftmax (megatron/core/fusions/
// fused_softmax.py) and the softmax inside exec/cpu/attention.hpp:
//   att[r, t, t2]  = exp(scale x[t2] - max) / sum over t2' <= t of exp(scale x[t2'] - max)
//                    for t2 <= t, and exactly 0 for t2 > t (the mask)
//   dx[r, t, t2]   = scale att[t2] (datt[t2] - sum over t2' <= t of att[t2'] datt[t2'])
//                    for t2 <= t, and 0 for t2 > t
// with r = b * NH + h. One warp per row of T, fp32 arithmetic, `dtype` storage. Entries of the
// input above the diagonal are never read. Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda {

/// Forward; `att` may alias `preatt` (in place). Throws InvalidArgument for a size < 1, a
/// scale that is not finite and > 0 or a null pointer; CudaError if the launch fails.
void causal_softmax_forward(DType dtype,
                            void* att,           // [BNH, T, T] dtype
                            const void* preatt,  // [BNH, T, T] dtype
                            int64_t batch_heads, int64_t seq, float scale, cudaStream_t stream);

/// Backward; overwrites dpreatt (which may alias datt). Throws as causal_softmax_forward.
void causal_softmax_backward(DType dtype,
                             void* dpreatt,     // [BNH, T, T] dtype
                             const void* datt,  // [BNH, T, T] dtype
                             const void* att,   // [BNH, T, T] dtype (the forward's output)
                             int64_t batch_heads, int64_t seq, float scale, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
