// Squared ReLU; see squared_relu.hpp.
#include "exec/cuda/squared_relu.hpp"

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "squared_relu";

__global__ void squared_relu_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const float r = fmaxf(inp[k], 0.0f);
    out[k] = r * r;
  }
}

__global__ void squared_relu_backward_kernel(float* dinp, const float* inp, const float* dout,
                                             int64_t n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    dinp[k] += 2.0f * fmaxf(inp[k], 0.0f) * dout[k];
  }
}

}  // namespace

void squared_relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  require_non_negative(kLayer, n, "n");
  if (n == 0) return;
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, inp, "inp");
  squared_relu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, inp, n);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void squared_relu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                           cudaStream_t stream) {
  require_non_negative(kLayer, n, "n");
  if (n == 0) return;
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, dout, "dout");
  squared_relu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dinp, inp, dout, n);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

}  // namespace traintwin::exec::cuda
