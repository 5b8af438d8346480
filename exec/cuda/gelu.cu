// GELU; see gelu.hpp.
#include "exec/cuda/gelu.hpp"

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "gelu";
constexpr float kScaling = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;

// The tanh approximation and its derivative, one element (exec/cpu/gelu.hpp's formulas).
__device__ __forceinline__ float gelu(float x) {
  const float cube = kCubic * x * x * x;
  return 0.5f * x * (1.0f + tanhf(kScaling * (x + cube)));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float cube = kCubic * x * x * x;
  const float tanh_arg = kScaling * (x + cube);
  const float tanh_out = tanhf(tanh_arg);
  const float cosh_out = coshf(tanh_arg);
  const float sech_out = 1.0f / (cosh_out * cosh_out);
  return 0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * kScaling * (1.0f + 3.0f * kCubic * x * x);
}

// V elements per access (common.cuh: packed access), `packs` = n / V.
template <typename T, int V>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t packs) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const Pack<T, V> x = load_pack<V>(inp, p);
    Pack<T, V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] = from_float<T>(gelu(to_float(x.v[k])));
    store_pack(out, p, y);
  }
}

template <typename T, int V>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t packs) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const Pack<T, V> x = load_pack<V>(inp, p), dy = load_pack<V>(dout, p);
    Pack<T, V> dx = load_pack<V>(dinp, p);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      dx.v[k] = from_float<T>(to_float(dx.v[k]) + gelu_grad(to_float(x.v[k])) * to_float(dy.v[k]));
    }
    store_pack(dinp, p, dx);
  }
}

}  // namespace

void gelu_forward(DType dtype, void* out, const void* inp, int64_t n, cudaStream_t stream) {
  require_positive(kLayer, n, "n");
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, inp, "inp");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    with_pack_width(n, {{out, sizeof(T)}, {inp, sizeof(T)}}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      gelu_forward_kernel<T, V><<<grid_for(n / V), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), n / V);
      TRAINTWIN_CUDA_CHECK_LAUNCH();
    });
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
    with_pack_width(n, {{dinp, sizeof(T)}, {inp, sizeof(T)}, {dout, sizeof(T)}}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      gelu_backward_kernel<T, V><<<grid_for(n / V), kBlock, 0, stream>>>(
          static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), n / V);
      TRAINTWIN_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace traintwin::exec::cuda
