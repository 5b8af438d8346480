// Squared ReLU on the GPU (So et al. 2021, "Primer"; Nemotron-4, Megatron --squared-relu): the
// same function and semantics as exec/cpu/squared_relu.hpp, elementwise over N values:
//   out = max(inp, 0)^2,   dinp += 2 max(inp, 0) dout
// fp32 storage and arithmetic, one thread per element (grid-stride). Device pointers;
// asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace traintwin::exec::cuda {

/// Forward; overwrites out (which may alias inp). n == 0 launches nothing. Throws
/// InvalidArgument for n < 0 or a null pointer (n > 0); CudaError if the launch fails.
void squared_relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);  // [N]

/// Backward; accumulates (+=) into dinp. Throws as squared_relu_forward.
void squared_relu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                           cudaStream_t stream);  // [N]

}  // namespace traintwin::exec::cuda
