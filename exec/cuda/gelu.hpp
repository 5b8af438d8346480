// GELU (tanh approximation, GPT-2 / llm.c) on the GPU: the same function and semantics as
// exec/cpu/gelu.hpp, elementwise over N values in `dtype` with fp32 arithmetic
// (tanhf, coshf). Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda {

/// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); out may alias inp. Throws
/// InvalidArgument for n < 1 or a null pointer; CudaError if the launch fails.
void gelu_forward(DType dtype, void* out, const void* inp, int64_t n, cudaStream_t stream);

/// dinp += gelu'(inp) dout (accumulates, as the CPU layer). Throws as gelu_forward.
void gelu_backward(DType dtype, void* dinp, const void* inp, const void* dout, int64_t n,
                   cudaStream_t stream);

}  // namespace traintwin::exec::cuda
