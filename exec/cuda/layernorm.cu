// LayerNorm; see layernorm.hpp.
#include "exec/cuda/layernorm.hpp"

#include "exec/cpu/layernorm.hpp"  // kLayerNormEps (header only)
#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "layernorm";

// One warp per row; lanes read V consecutive channels per access (common.cuh: packed access;
// channels % V == 0 and rows aligned to a pack), three passes over the row (L1-resident).
template <typename T, int V>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* weight, const T* bias, int64_t rows,
                                         int64_t channels, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kRowWarps} + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t packs = channels / V;
  const T* x = inp + row * channels;
  const float inv_c = 1.0f / static_cast<float>(channels);
  float sum = 0.0f;
  for (int64_t p = lane; p < packs; p += 32) {
    const Pack<T, V> xv = load_pack<V>(x, p);
#pragma unroll
    for (int k = 0; k < V; ++k) sum += to_float(xv.v[k]);
  }
  const float m = warp_sum(sum) * inv_c;
  float sq = 0.0f;
  for (int64_t p = lane; p < packs; p += 32) {
    const Pack<T, V> xv = load_pack<V>(x, p);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float d = to_float(xv.v[k]) - m;
      sq += d * d;
    }
  }
  const float s = rsqrtf(warp_sum(sq) * inv_c + eps);
  T* o = out + row * channels;
  for (int64_t p = lane; p < packs; p += 32) {
    const Pack<T, V> xv = load_pack<V>(x, p), w = load_pack<V>(weight, p),
                     b = load_pack<V>(bias, p);
    Pack<T, V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      y.v[k] = from_float<T>((to_float(xv.v[k]) - m) * s * to_float(w.v[k]) + to_float(b.v[k]));
    }
    store_pack(o, p, y);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <typename T, int V>
__global__ void layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp,
                                                const T* weight, const float* mean,
                                                const float* rstd, int64_t rows,
                                                int64_t channels) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kRowWarps} + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t packs = channels / V;
  const T* dy = dout + row * channels;
  const T* x = inp + row * channels;
  T* dx = dinp + row * channels;
  const float m = mean[row];
  const float s = rstd[row];
  float dnorm_sum = 0.0f;
  float dnorm_norm_sum = 0.0f;
  // dnorm is rounded to fp32 (__fmul_rn, never contracted into an FMA) in both loops, so that
  // dnorm - dnorm_mean is exactly 0 where it should be (a row of one channel, where rstd is
  // 1/sqrt(eps) and would amplify the product's rounding error a few hundred times).
  for (int64_t p = lane; p < packs; p += 32) {
    const Pack<T, V> xv = load_pack<V>(x, p), w = load_pack<V>(weight, p),
                     g = load_pack<V>(dy, p);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float norm = (to_float(xv.v[k]) - m) * s;
      const float dnorm = __fmul_rn(to_float(w.v[k]), to_float(g.v[k]));
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm;
    }
  }
  const float inv_c = 1.0f / static_cast<float>(channels);
  const float dnorm_mean = warp_sum(dnorm_sum) * inv_c;
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) * inv_c;
  for (int64_t p = lane; p < packs; p += 32) {
    const Pack<T, V> xv = load_pack<V>(x, p), w = load_pack<V>(weight, p),
                     g = load_pack<V>(dy, p);
    Pack<T, V> d = load_pack<V>(dx, p);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float norm = (to_float(xv.v[k]) - m) * s;
      const float dnorm = __fmul_rn(to_float(w.v[k]), to_float(g.v[k]));
      d.v[k] = from_float<T>(to_float(d.v[k]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
    }
    store_pack(dx, p, d);
  }
}

// Block (32, 8): threadIdx.x picks the channel, threadIdx.y and blockIdx.y stride over rows.
template <typename T>
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const T* dout,
                                                 const T* inp, const float* mean,
                                                 const float* rstd, int64_t rows,
                                                 int64_t channels) {
  __shared__ float dw_part[8][33];
  __shared__ float db_part[8][33];
  const int64_t c = blockIdx.x * int64_t{32} + threadIdx.x;
  float dw = 0.0f;
  float db = 0.0f;
  if (c < channels) {
    for (int64_t row = blockIdx.y * int64_t{8} + threadIdx.y; row < rows;
         row += int64_t{gridDim.y} * 8) {
      const float dy = to_float(dout[row * channels + c]);
      const float norm = (to_float(inp[row * channels + c]) - mean[row]) * rstd[row];
      dw += norm * dy;
      db += dy;
    }
  }
  dw_part[threadIdx.y][threadIdx.x] = dw;
  db_part[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int y = 1; y < 8; ++y) {
      dw += dw_part[y][threadIdx.x];
      db += db_part[y][threadIdx.x];
    }
    atomicAdd(&dweight[c], dw);
    atomicAdd(&dbias[c], db);
  }
}

}  // namespace

void layernorm_forward(DType dtype, void* out, float* mean, float* rstd, const void* inp,
                       const void* weight, const void* bias, int64_t batch, int64_t seq,
                       int64_t channels, cudaStream_t stream) {
  require_rows_shape(kLayer, batch, seq, channels);
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, mean, "mean");
  require_pointer(kLayer, rstd, "rstd");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, weight, "weight");
  require_pointer(kLayer, bias, "bias");
  const int64_t rows = batch * seq;
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    with_pack_width(
        channels, {{out, sizeof(T)}, {inp, sizeof(T)}, {weight, sizeof(T)}, {bias, sizeof(T)}},
        [&](auto width) {
          constexpr int V = decltype(width)::value;
          layernorm_forward_kernel<T, V><<<row_blocks(rows), 32 * kRowWarps, 0, stream>>>(
              static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp),
              static_cast<const T*>(weight), static_cast<const T*>(bias), rows, channels,
              static_cast<float>(cpu::kLayerNormEps));
          TRAINTWIN_CUDA_CHECK_LAUNCH();
        });
  });
}

void layernorm_backward(DType dtype, void* dinp, float* dweight, float* dbias, const void* dout,
                        const void* inp, const void* weight, const float* mean, const float* rstd,
                        int64_t batch, int64_t seq, int64_t channels, cudaStream_t stream) {
  require_rows_shape(kLayer, batch, seq, channels);
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, dweight, "dweight");
  require_pointer(kLayer, dbias, "dbias");
  require_pointer(kLayer, dout, "dout");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, weight, "weight");
  require_pointer(kLayer, mean, "mean");
  require_pointer(kLayer, rstd, "rstd");
  const int64_t rows = batch * seq;
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    with_pack_width(
        channels, {{dinp, sizeof(T)}, {dout, sizeof(T)}, {inp, sizeof(T)}, {weight, sizeof(T)}},
        [&](auto width) {
          constexpr int V = decltype(width)::value;
          layernorm_backward_input_kernel<T, V><<<row_blocks(rows), 32 * kRowWarps, 0, stream>>>(
              static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp),
              static_cast<const T*>(weight), mean, rstd, rows, channels);
          TRAINTWIN_CUDA_CHECK_LAUNCH();
        });
    const dim3 grid(static_cast<unsigned>((channels + 31) / 32),
                    static_cast<unsigned>(std::min<int64_t>((rows + 7) / 8, 128)));
    layernorm_backward_params_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(
        dweight, dbias, static_cast<const T*>(dout), static_cast<const T*>(inp), mean, rstd,
        rows, channels);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace traintwin::exec::cuda
