// SwiGLU; see swiglu.hpp.
#include "exec/cuda/swiglu.hpp"

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "swiglu";

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_forward_kernel(float* out, const float* inp, int64_t rows, int64_t width) {
  const int64_t n = rows * width;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = k / width;
    const int64_t i = k - r * width;
    const float gate = inp[r * 2 * width + i];
    const float up = inp[r * 2 * width + width + i];
    out[k] = gate * sigmoid(gate) * up;
  }
}

__global__ void swiglu_backward_kernel(float* dinp, const float* dout, const float* inp,
                                       int64_t rows, int64_t width) {
  const int64_t n = rows * width;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = k / width;
    const int64_t i = k - r * width;
    const int64_t at = r * 2 * width + i;
    const float gate = inp[at];
    const float up = inp[at + width];
    const float s = sigmoid(gate);
    const float g = dout[k];
    dinp[at] += g * up * (s + gate * s * (1.0f - s));
    dinp[at + width] += g * gate * s;
  }
}

void check(int64_t rows, int64_t width) {
  require_positive(kLayer, rows, "rows");
  require_positive(kLayer, width, "width");
  require_product_fits(kLayer, rows, 2 * width, "rows * 2 * width");
}

}  // namespace

void swiglu_forward(float* out, const float* inp, int64_t rows, int64_t width,
                    cudaStream_t stream) {
  check(rows, width);
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, inp, "inp");
  swiglu_forward_kernel<<<grid_for(rows * width), kBlock, 0, stream>>>(out, inp, rows, width);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(float* dinp, const float* dout, const float* inp, int64_t rows,
                     int64_t width, cudaStream_t stream) {
  check(rows, width);
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, dout, "dout");
  require_pointer(kLayer, inp, "inp");
  swiglu_backward_kernel<<<grid_for(rows * width), kBlock, 0, stream>>>(dinp, dout, inp, rows,
                                                                        width);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

}  // namespace traintwin::exec::cuda
