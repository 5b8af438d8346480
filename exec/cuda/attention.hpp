// Causal multi-head self-attention on the GPU (llm.c's CUDA attention_forward/backward): the
// same function, shapes and semantics as exec/cpu/attention.hpp, on a fused QKV input
// inp[B, T, 3C] = [q | k | v], head h on channels [h*hs, (h+1)*hs), hs = C / NH. Computed as
//   permute inp -> q, k, v [B, NH, T, hs];  preatt = q k^T / sqrt(hs)   (strided-batched GEMM)
//   att = causal softmax(preatt)  (exec/cuda/softmax.hpp);  y = att v   (strided-batched GEMM)
//   unpermute y [B, NH, T, hs] -> out [B, T, C]
// and the backward with four more batched GEMMs and the softmax backward. Storage in `dtype`,
// fp32 compute. Scratch lives in a caller-provided workspace of attention_workspace_bytes().
// Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/dtype.hpp"
#include "exec/cuda/gemm.hpp"

namespace traintwin::exec::cuda {

/// Bytes of device workspace attention_forward and attention_backward need:
/// (7 B T C + B NH T T) elements of dtype (q, k, v, their gradients, the permuted output or its
/// gradient, and datt). Throws InvalidArgument as attention_forward's size checks.
size_t attention_workspace_bytes(DType dtype, int64_t batch, int64_t seq, int64_t channels,
                                 int64_t heads);

/// Forward. `preatt` receives the scaled scores q.k / sqrt(hs) on and below the diagonal (the
/// entries above it are unspecified, where the CPU layer stores -inf); `att` the softmax with
/// exact zeros above the diagonal (as the CPU layer). Throws InvalidArgument for a size < 1,
/// heads not dividing channels, a workspace smaller than attention_workspace_bytes() or a null
/// pointer; CudaError if a launch or cuBLAS fails.
void attention_forward(CublasContext& ctx, DType dtype,
                       void* out,        // [B, T, C] dtype
                       void* preatt,     // [B, NH, T, T] dtype
                       void* att,        // [B, NH, T, T] dtype
                       const void* inp,  // [B, T, 3C] dtype
                       void* workspace, size_t workspace_bytes, int64_t batch, int64_t seq,
                       int64_t channels, int64_t heads, cudaStream_t stream);

/// Backward; accumulates (+=) into dinp (q, k and v parts), as the CPU layer. Needs only the
/// saved att. Throws as attention_forward.
void attention_backward(CublasContext& ctx, DType dtype,
                        void* dinp,        // [B, T, 3C] dtype
                        const void* dout,  // [B, T, C] dtype
                        const void* inp,   // [B, T, 3C] dtype
                        const void* att,   // [B, NH, T, T] dtype
                        void* workspace, size_t workspace_bytes, int64_t batch, int64_t seq,
                        int64_t channels, int64_t heads, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
