// LayerNorm over the channels on the GPU: the same function, shapes and semantics as
// exec/cpu/layernorm.hpp (llm.c layernorm_forward/backward, eps = 1e-5, biased variance), with
// activations and the affine parameters in `dtype`, mean/rstd and the parameter gradients in
// fp32. Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda {

/// out = (inp - mean) * rstd * weight + bias per row of C, one warp per row, two passes over the
/// row in fp32 (mean, then the variance of the centred values, as the CPU layer); saves mean and
/// rstd. Throws InvalidArgument for a size < 1 or a null pointer; CudaError if the launch fails.
void layernorm_forward(DType dtype,
                       void* out,           // [B, T, C] dtype
                       float* mean,         // [B, T] fp32
                       float* rstd,         // [B, T] fp32
                       const void* inp,     // [B, T, C] dtype
                       const void* weight,  // [C] dtype
                       const void* bias,    // [C] dtype
                       int64_t batch, int64_t seq, int64_t channels, cudaStream_t stream);

/// Accumulates (+=) dinp (one warp per row), dweight and dbias (a second kernel: 32 channels x
/// 8 row groups per block, partial sums combined with fp32 atomicAdd, so their summation order
/// is unspecified). Throws as layernorm_forward.
void layernorm_backward(DType dtype,
                        void* dinp,          // [B, T, C] dtype
                        float* dweight,      // [C] fp32
                        float* dbias,        // [C] fp32
                        const void* dout,    // [B, T, C] dtype
                        const void* inp,     // [B, T, C] dtype
                        const void* weight,  // [C] dtype
                        const float* mean,   // [B, T] fp32
                        const float* rstd,   // [B, T] fp32
                        int64_t batch, int64_t seq, int64_t channels, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
