// GELU; see gelu.hpp.
#include "exec/cuda/gelu.hpp"

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "gelu";
constexpr float kScaling = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = to_float(inp[i]);
    const float cube = kCubic * x * x * x;
    out[i] = from_float<T>(0.5f * x * (1.0f + tanhf(kScaling * (x + cube))));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = to_float(inp[i]);
    const float cube = kCubic * x * x * x;
    const float tanh_arg = kScaling * (x + cube);
    const float tanh_out = tanhf(tanh_arg);
    const float cosh_out = coshf(tanh_arg);
    const float sech_out = 1.0f / (cosh_out * cosh_out);
    const float local_grad =
        0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * kScaling * (1.0f + 3.0f * kCubic * x * x);
    dinp[i] = from_float<T>(to_float(dinp[i]) + local_grad * to_float(dout[i]));
  }
}

}  // namespace

void gelu_forward(DType dtype, void* out, const void* inp, int64_t n, cudaStream_t stream) {
  require_positive(kLayer, n, "n");
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, inp, "inp");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(out),
                                                              static_cast<const T*>(inp), n);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void gelu_backward(DType dtype, void* dinp, const void* inp, const void* dout, int64_t n,
                   cudaStream_t stream) {
  require_positive(kLayer, n, "n");
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, dout, "dout");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), n);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace traintwin::exec::cuda
