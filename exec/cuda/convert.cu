// Storage conversion kernels; see convert.hpp.
#include "exec/cuda/convert.hpp"

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

}  // namespace

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
