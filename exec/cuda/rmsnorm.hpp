// RMSNorm over the channels on the GPU (Zhang & Sennrich 2019; Llama, Megatron --normalization
// RMSNorm): the same function, shapes and semantics as exec/cpu/rmsnorm.hpp,
//   out = inp * rrms * weight,  rrms = 1 / sqrt(mean over C of inp^2 + eps),  eps = 1e-5
// fp32 storage and arithmetic. One warp per row of C for the forward and the input gradient; the
// weight gradient is a column reduction (32 channels x 8 row groups per block, fp32 atomicAdd of
// the partial sums: unspecified summation order). Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace traintwin::exec::cuda {

/// Forward; overwrites out and rrms (1 / rms per row). Throws InvalidArgument for a size < 1 or
/// a null pointer; CudaError if the launch fails.
void rmsnorm_forward(float* out,           // [B, T, C]
                     float* rrms,          // [B, T]
                     const float* inp,     // [B, T, C]
                     const float* weight,  // [C]
                     int64_t batch, int64_t seq, int64_t channels, cudaStream_t stream);

/// Backward; accumulates (+=) into dinp and dweight:
///   dweight_i += dout_i inp_i rrms;
///   dinp_i += rrms weight_i dout_i - rrms^3 inp_i / C * sum_j dout_j weight_j inp_j.
/// Throws as rmsnorm_forward.
void rmsnorm_backward(float* dinp,          // [B, T, C]
                      float* dweight,       // [C]
                      const float* dout,    // [B, T, C]
                      const float* inp,     // [B, T, C]
                      const float* weight,  // [C]
                      const float* rrms,    // [B, T]
                      int64_t batch, int64_t seq, int64_t channels, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
