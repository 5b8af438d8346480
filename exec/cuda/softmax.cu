// Causal scaled softmax; see softmax.hpp.
#include "exec/cuda/softmax.hpp"

#include <cmath>

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "causal_softmax";

// One warp per row (r, t). Pass 1: online max and sum of exp over t2 <= t (each lane over its
// strided columns, then the lanes' (max, sum) pairs are merged). Pass 2: write.
template <typename T>
__global__ void causal_softmax_forward_kernel(T* att, const T* preatt, int64_t rows, int64_t seq,
                                              float scale) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kRowWarps} + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t t = row % seq;
  const T* x = preatt + row * seq;
  T* y = att + row * seq;
  float maxval = -INFINITY;
  float sum = 0.0f;
  for (int64_t t2 = lane; t2 <= t; t2 += 32) {
    const float v = scale * to_float(x[t2]);
    const float new_max = fmaxf(maxval, v);
    sum = sum * expf(maxval - new_max) + expf(v - new_max);
    maxval = new_max;
  }
  const float row_max = warp_max(maxval);
  // Lanes with no column (t < lane) hold maxval = -inf, sum = 0: they contribute 0.
  sum = maxval == -INFINITY ? 0.0f : sum * expf(maxval - row_max);
  const float inv_sum = 1.0f / warp_sum(sum);
  for (int64_t t2 = lane; t2 < seq; t2 += 32) {
    const float v = t2 <= t ? expf(scale * to_float(x[t2]) - row_max) * inv_sum : 0.0f;
    y[t2] = from_float<T>(v);
  }
}

template <typename T>
__global__ void causal_softmax_backward_kernel(T* dx, const T* dy, const T* y, int64_t rows,
                                               int64_t seq, float scale) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kRowWarps} + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t t = row % seq;
  const T* dy_row = dy + row * seq;
  const T* y_row = y + row * seq;
  T* dx_row = dx + row * seq;
  float dot = 0.0f;
  for (int64_t t2 = lane; t2 <= t; t2 += 32) dot += to_float(y_row[t2]) * to_float(dy_row[t2]);
  dot = warp_sum(dot);
  for (int64_t t2 = lane; t2 < seq; t2 += 32) {
    const float v =
        t2 <= t ? scale * to_float(y_row[t2]) * (to_float(dy_row[t2]) - dot) : 0.0f;
    dx_row[t2] = from_float<T>(v);
  }
}

void check(int64_t batch_heads, int64_t seq, float scale) {
  require_positive(kLayer, batch_heads, "batch_heads");
  require_positive(kLayer, seq, "seq");
  require_product_fits(kLayer, batch_heads * seq, seq, "batch_heads * seq * seq");
  if (!(std::isfinite(scale) && scale > 0.0f)) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": scale must be finite and > 0, got " +
                          std::to_string(scale));
  }
}

}  // namespace

void causal_softmax_forward(DType dtype, void* att, const void* preatt, int64_t batch_heads,
                            int64_t seq, float scale, cudaStream_t stream) {
  check(batch_heads, seq, scale);
  require_pointer(kLayer, att, "att");
  require_pointer(kLayer, preatt, "preatt");
  const int64_t rows = batch_heads * seq;
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    causal_softmax_forward_kernel<T><<<row_blocks(rows), 32 * kRowWarps, 0, stream>>>(
        static_cast<T*>(att), static_cast<const T*>(preatt), rows, seq, scale);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void causal_softmax_backward(DType dtype, void* dpreatt, const void* datt, const void* att,
                             int64_t batch_heads, int64_t seq, float scale, cudaStream_t stream) {
  check(batch_heads, seq, scale);
  require_pointer(kLayer, dpreatt, "dpreatt");
  require_pointer(kLayer, datt, "datt");
  require_pointer(kLayer, att, "att");
  const int64_t rows = batch_heads * seq;
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    causal_softmax_backward_kernel<T><<<row_blocks(rows), 32 * kRowWarps, 0, stream>>>(
        static_cast<T*>(dpreatt), static_cast<const T*>(datt), static_cast<const T*>(att), rows,
        seq, scale);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace traintwin::exec::cuda
