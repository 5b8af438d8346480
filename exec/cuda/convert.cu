// Storage conversion kernels; see convert.hpp.
#include "exec/cuda/convert.hpp"

#include <cuda_fp8.h>

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "convert";

// dst = src converted, V elements per access (common.cuh: packed access), `packs` = n / V.
template <typename To, typename From, int V>
__global__ void convert_kernel(To* dst, const From* src, int64_t packs) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const Pack<From, V> x = load_pack<V>(src, p);
    Pack<To, V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] = from_float<To>(to_float(x.v[k]));
    store_pack(dst, p, y);
  }
}

// dst += widen(src), V elements per access (the bf16 dgrad's accumulation into fp32).
template <int V>
__global__ void accumulate_widened_kernel(float* dst, const __nv_bfloat16* src, int64_t packs) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const Pack<__nv_bfloat16, V> x = load_pack<V>(src, p);
    Pack<float, V> y = load_pack<V>(dst, p);
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] += __bfloat162float(x.v[k]);
    store_pack(dst, p, y);
  }
}

__global__ void quantize_fp8_kernel(__nv_fp8_interpretation_t kind, uint8_t* dst, const float* src,
                                    int64_t n, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = __nv_cvt_float_to_fp8(scale * src[i], __NV_SATFINITE, kind);
  }
}

}  // namespace

void quantize_fp8(cpu::Fp8Kind kind, uint8_t* dst, const float* src, int64_t n, float scale,
                  cudaStream_t stream) {
  require_positive(kLayer, n, "n");
  require_pointer(kLayer, dst, "dst");
  require_pointer(kLayer, src, "src");
  quantize_fp8_kernel<<<grid_for(n), kBlock, 0, stream>>>(
      kind == cpu::Fp8Kind::kE4M3 ? __NV_E4M3 : __NV_E5M2, dst, src, n, scale);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void convert(DType dst_type, void* dst, DType src_type, const void* src, int64_t n,
             cudaStream_t stream) {
  require_positive(kLayer, n, "n");
  require_pointer(kLayer, dst, "dst");
  require_pointer(kLayer, src, "src");
  dispatch(dst_type, kLayer, [&](auto to_tag) {
    using To = decltype(to_tag);
    dispatch(src_type, kLayer, [&](auto from_tag) {
      using From = decltype(from_tag);
      with_pack_width(n, {{dst, sizeof(To)}, {src, sizeof(From)}}, [&](auto width) {
        constexpr int V = decltype(width)::value;
        convert_kernel<To, From, V><<<grid_for(n / V), kBlock, 0, stream>>>(
            static_cast<To*>(dst), static_cast<const From*>(src), n / V);
        TRAINTWIN_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void accumulate_widened_bf16(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream) {
  require_positive(kLayer, n, "n");
  require_pointer(kLayer, dst, "dst");
  require_pointer(kLayer, src, "src");
  const auto* s16 = reinterpret_cast<const __nv_bfloat16*>(src);
  with_pack_width(n, {{dst, sizeof(float)}, {src, sizeof(uint16_t)}}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    accumulate_widened_kernel<V><<<grid_for(n / V), kBlock, 0, stream>>>(dst, s16, n / V);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace traintwin::exec::cuda
