// RMSNorm; see rmsnorm.hpp.
#include "exec/cuda/rmsnorm.hpp"

#include "exec/cpu/rmsnorm.hpp"  // kRmsNormEps (header only)
#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "rmsnorm";

// One warp per row: the sum of squares (lanes over strided channels, then a warp sum), then the
// scaled row.
__global__ void rmsnorm_forward_kernel(float* out, float* rrms, const float* inp,
                                       const float* weight, int64_t rows, int64_t channels,
                                       float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kRowWarps} + threadIdx.x / 32;
  if (row >= rows) return;
  const float* x = inp + row * channels;
  float sum_sq = 0.0f;
  for (int64_t c = lane; c < channels; c += 32) sum_sq += x[c] * x[c];
  sum_sq = warp_sum(sum_sq);
  const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(channels) + eps);
  float* y = out + row * channels;
  for (int64_t c = lane; c < channels; c += 32) y[c] = x[c] * r * weight[c];
  if (lane == 0) rrms[row] = r;
}

// One warp per row: dinp += r w dout - r^3 x / C * sum_j dout_j w_j x_j.
__global__ void rmsnorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                              const float* weight, const float* rrms,
                                              int64_t rows, int64_t channels) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kRowWarps} + threadIdx.x / 32;
  if (row >= rows) return;
  const float* x = inp + row * channels;
  const float* g = dout + row * channels;
  float* dx = dinp + row * channels;
  const float r = rrms[row];
  float dot = 0.0f;
  for (int64_t c = lane; c < channels; c += 32) dot += g[c] * weight[c] * x[c];
  dot = warp_sum(dot);
  const float k = r * r * r * dot / static_cast<float>(channels);
  for (int64_t c = lane; c < channels; c += 32) dx[c] += r * weight[c] * g[c] - k * x[c];
}

// Block (32, 8): threadIdx.x picks the channel, threadIdx.y and blockIdx.y stride over rows.
__global__ void rmsnorm_backward_weight_kernel(float* dweight, const float* dout,
                                               const float* inp, const float* rrms, int64_t rows,
                                               int64_t channels) {
  __shared__ float part[8][33];
  const int64_t c = blockIdx.x * int64_t{32} + threadIdx.x;
  float sum = 0.0f;
  if (c < channels) {
    for (int64_t row = blockIdx.y * int64_t{8} + threadIdx.y; row < rows;
         row += int64_t{gridDim.y} * 8) {
      sum += dout[row * channels + c] * inp[row * channels + c] * rrms[row];
    }
  }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int y = 1; y < 8; ++y) sum += part[y][threadIdx.x];
    atomicAdd(&dweight[c], sum);
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rrms, const float* inp, const float* weight,
                     int64_t batch, int64_t seq, int64_t channels, cudaStream_t stream) {
  require_rows_shape(kLayer, batch, seq, channels);
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, rrms, "rrms");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, weight, "weight");
  const int64_t rows = batch * seq;
  rmsnorm_forward_kernel<<<row_blocks(rows), 32 * kRowWarps, 0, stream>>>(
      out, rrms, inp, weight, rows, channels, static_cast<float>(cpu::kRmsNormEps));
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rrms, int64_t batch, int64_t seq,
                      int64_t channels, cudaStream_t stream) {
  require_rows_shape(kLayer, batch, seq, channels);
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, dweight, "dweight");
  require_pointer(kLayer, dout, "dout");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, weight, "weight");
  require_pointer(kLayer, rrms, "rrms");
  const int64_t rows = batch * seq;
  rmsnorm_backward_input_kernel<<<row_blocks(rows), 32 * kRowWarps, 0, stream>>>(
      dinp, dout, inp, weight, rrms, rows, channels);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
  const dim3 grid(static_cast<unsigned>((channels + 31) / 32),
                  static_cast<unsigned>(std::min<int64_t>((rows + 7) / 8, 128)));
  rmsnorm_backward_weight_kernel<<<grid, dim3(32, 8), 0, stream>>>(dweight, dout, inp, rrms, rows,
                                                                   channels);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

}  // namespace traintwin::exec::cuda
