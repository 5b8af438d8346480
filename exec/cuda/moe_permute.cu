// MoE token permutation kernels; see moe_permute.hpp.
#include "exec/cuda/moe_permute.hpp"

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "moe_permute";
constexpr int kMaxRowBlocks = 65536;  ///< blocks of the row kernels (each loops over rows)

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, kMaxRowBlocks));
}

__global__ void gather_rows_kernel(float* out, const float* inp, const int64_t* token,
                                   int64_t rows, int64_t channels) {
  for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
    const float* src = inp + token[m] * channels;
    float* dst = out + m * channels;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) dst[c] = src[c];
  }
}

__global__ void scatter_add_rows_kernel(float* dinp, const float* dout, const int64_t* offsets,
                                        const int64_t* rows_of, int64_t tokens,
                                        int64_t channels) {
  for (int64_t n = blockIdx.x; n < tokens; n += gridDim.x) {
    const int64_t first = offsets[n];
    const int64_t last = offsets[n + 1];
    if (first == last) continue;
    float* dst = dinp + n * channels;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      float acc = dst[c];
      for (int64_t r = first; r < last; ++r) acc += dout[rows_of[r] * channels + c];
      dst[c] = acc;
    }
  }
}

__global__ void unpermute_rows_kernel(float* out, const float* inp, const float* probs,
                                      const int64_t* offsets, const int64_t* rows_of,
                                      const int32_t* expert, int64_t tokens, int64_t experts,
                                      int64_t channels) {
  for (int64_t n = blockIdx.x; n < tokens; n += gridDim.x) {
    const int64_t first = offsets[n];
    const int64_t last = offsets[n + 1];
    float* dst = out + n * channels;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      float acc = 0.0f;
      for (int64_t r = first; r < last; ++r) {
        const int64_t m = rows_of[r];
        acc += probs[n * experts + expert[m]] * inp[m * channels + c];
      }
      dst[c] = acc;
    }
  }
}

__global__ void unpermute_rows_backward_kernel(float* dinp, float* dprobs, const float* dout,
                                               const float* inp, const float* probs,
                                               const int64_t* token, const int32_t* expert,
                                               int64_t rows, int64_t experts, int64_t channels) {
  __shared__ float scratch[32];
  for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
    const int64_t ne = token[m] * experts + expert[m];
    const float w = probs[ne];
    const float* g = dout + token[m] * channels;
    const float* x = inp + m * channels;
    float* dx = dinp + m * channels;
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      dx[c] += w * g[c];
      dot += g[c] * x[c];
    }
    dot = block_sum(dot, scratch);
    if (threadIdx.x == 0) atomicAdd(dprobs + ne, dot);
  }
}

__global__ void sort_chunks_kernel(float* out, const float* inp, const int64_t* out_start,
                                   const int64_t* in_start, int64_t chunks, int64_t rows,
                                   int64_t channels) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    // The last chunk j with out_start[j] <= r (upper bound - 1): it holds r, empty chunks skipped.
    int64_t lo = 0;
    int64_t hi = chunks;
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (out_start[mid] <= r) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const float* src = inp + (in_start[lo] + r - out_start[lo]) * channels;
    float* dst = out + r * channels;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) dst[c] = src[c];
  }
}

}  // namespace

void moe_gather_rows(float* out, const float* inp, const int64_t* token, int64_t rows,
                     int64_t channels, cudaStream_t stream) {
  require_non_negative(kLayer, rows, "rows");
  require_positive(kLayer, channels, "channels");
  if (rows == 0) return;
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, token, "token");
  gather_rows_kernel<<<row_grid(rows), kBlock, 0, stream>>>(out, inp, token, rows, channels);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void moe_scatter_add_rows(float* dinp, const float* dout, const int64_t* offsets,
                          const int64_t* rows_of, int64_t tokens, int64_t channels,
                          cudaStream_t stream) {
  require_positive(kLayer, tokens, "tokens");
  require_positive(kLayer, channels, "channels");
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, offsets, "offsets");
  // dout and rows_of are empty (may be null) when no row was routed.
  scatter_add_rows_kernel<<<row_grid(tokens), kBlock, 0, stream>>>(dinp, dout, offsets, rows_of,
                                                                   tokens, channels);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void moe_unpermute_rows(float* out, const float* inp, const float* probs, const int64_t* offsets,
                        const int64_t* rows_of, const int32_t* expert, int64_t tokens,
                        int64_t experts, int64_t channels, cudaStream_t stream) {
  require_positive(kLayer, tokens, "tokens");
  require_positive(kLayer, experts, "experts");
  require_positive(kLayer, channels, "channels");
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, probs, "probs");
  require_pointer(kLayer, offsets, "offsets");
  unpermute_rows_kernel<<<row_grid(tokens), kBlock, 0, stream>>>(
      out, inp, probs, offsets, rows_of, expert, tokens, experts, channels);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void moe_unpermute_rows_backward(float* dinp, float* dprobs, const float* dout, const float* inp,
                                 const float* probs, const int64_t* token, const int32_t* expert,
                                 int64_t rows, int64_t experts, int64_t channels,
                                 cudaStream_t stream) {
  require_non_negative(kLayer, rows, "rows");
  require_positive(kLayer, experts, "experts");
  require_positive(kLayer, channels, "channels");
  if (rows == 0) return;
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, dprobs, "dprobs");
  require_pointer(kLayer, dout, "dout");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, probs, "probs");
  require_pointer(kLayer, token, "token");
  require_pointer(kLayer, expert, "expert");
  unpermute_rows_backward_kernel<<<row_grid(rows), kBlock, 0, stream>>>(
      dinp, dprobs, dout, inp, probs, token, expert, rows, experts, channels);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void moe_sort_chunks(float* out, const float* inp, const int64_t* out_start,
                     const int64_t* in_start, int64_t chunks, int64_t rows, int64_t channels,
                     cudaStream_t stream) {
  require_non_negative(kLayer, rows, "rows");
  require_positive(kLayer, channels, "channels");
  if (rows == 0) return;
  require_positive(kLayer, chunks, "chunks");
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, out_start, "out_start");
  require_pointer(kLayer, in_start, "in_start");
  sort_chunks_kernel<<<row_grid(rows), kBlock, 0, stream>>>(out, inp, out_start, in_start, chunks,
                                                            rows, channels);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

}  // namespace traintwin::exec::cuda
