// Storage conversion kernels; see convert.hpp.
#include "exec/cuda/convert.hpp"

#include <cuda_fp8.h>

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "convert";

template <typename To, typename From>
__global__ void convert_kernel(To* dst, const From* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = from_float<To>(to_float(src[i]));
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
      convert_kernel<To, From><<<grid_for(n), kBlock, 0, stream>>>(
          static_cast<To*>(dst), static_cast<const From*>(src), n);
      TRAINTWIN_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace traintwin::exec::cuda
