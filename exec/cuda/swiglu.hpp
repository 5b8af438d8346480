// SwiGLU on the GPU (Shazeer 2020, "GLU Variants Improve Transformer"; Llama, Megatron --swiglu):
// the same function, shapes and semantics as exec/cpu/swiglu.hpp, on the fused FC1 output whose
// rows hold [gate (F) | up (F)]:
//   out[r, i] = silu(gate[r, i]) * up[r, i],  silu(x) = x sigmoid(x)
// One thread per output element, fp32 storage and arithmetic. Device pointers; asynchronous on
// `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace traintwin::exec::cuda {

/// Forward; overwrites out. Throws InvalidArgument for a size < 1 or a null pointer; CudaError
/// if the launch fails.
void swiglu_forward(float* out,        // [R, F]
                    const float* inp,  // [R, 2F]
                    int64_t rows, int64_t width, cudaStream_t stream);

/// Backward; accumulates (+=) into dinp: dgate += dout up silu'(gate), dup += dout silu(gate),
/// silu'(x) = s + x s (1 - s), s = sigmoid(x). Throws as swiglu_forward.
void swiglu_backward(float* dinp,        // [R, 2F]
                     const float* dout,  // [R, F]
                     const float* inp,   // [R, 2F]
                     int64_t rows, int64_t width, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
