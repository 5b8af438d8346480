// Counter-based dropout fused with bias and residual; see dropout.hpp.
#include "exec/cuda/dropout.hpp"

#include "exec/cuda/common.cuh"
#include "exec/cuda/dropout_mask.hpp"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "dropout";

// Global element index of local element (row, c) of a HiddenBlock, row = b * T_local + t:
// ((first_sample + b) * T_total + seq_offset + t) * C + c (exec/cpu/dropout.hpp).
struct HiddenIndex {
  int64_t seq_local, channels, first_sample, seq_offset, seq_total;
  __device__ uint64_t operator()(int64_t row, int64_t c) const {
    const int64_t b = row / seq_local;
    const int64_t t = row - b * seq_local;
    return static_cast<uint64_t>(((first_sample + b) * seq_total + seq_offset + t) * channels + c);
  }
};

// Attention: local element i of [B, NH_local, T, T] -> (((first_sample + b) * NH_total +
// head_offset + h) * T + t) * T + t2.
struct AttentionIndex {
  int64_t heads, seq, first_sample, head_offset, heads_total;
  __device__ uint64_t operator()(int64_t i) const {
    const int64_t tt = seq * seq;
    const int64_t bh = i / tt;
    const int64_t within = i - bh * tt;  // t * T + t2
    const int64_t b = bh / heads;
    const int64_t h = bh - b * heads;
    return static_cast<uint64_t>(((first_sample + b) * heads_total + head_offset + h) * tt +
                                 within);
  }
};

struct Mask {
  uint64_t seed, stream, threshold;
  float scale;  // 1 / (1 - p) rounded to float, as the CPU layer's float instantiation
  __device__ float factor(uint64_t global) const {
    return dropout_keep(seed, stream, global, threshold) ? scale : 0.0f;
  }
};

// V consecutive channels of one row per access (common.cuh: packed access; channels % V == 0):
// their global indices are consecutive, index(row, c0) + k.
template <typename T, int V>
__global__ void bias_dropout_add_forward_kernel(T* out, const T* inp, const T* bias,
                                                const T* residual, int64_t rows, Mask mask,
                                                HiddenIndex index) {
  const int64_t row_packs = index.channels / V;
  const int64_t packs = rows * row_packs;
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = p / row_packs;
    const int64_t cp = p - row * row_packs;  // the pack's index within its row
    const uint64_t first = index(row, cp * V);
    const Pack<T, V> x = load_pack<V>(inp, p);
    Pack<T, V> b{}, r{}, y;
    if (bias != nullptr) b = load_pack<V>(bias, cp);
    if (residual != nullptr) r = load_pack<V>(residual, p);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float v = to_float(x.v[k]);
      if (bias != nullptr) v += to_float(b.v[k]);
      float o = v * mask.factor(first + k);
      if (residual != nullptr) o += to_float(r.v[k]);
      y.v[k] = from_float<T>(o);
    }
    store_pack(out, p, y);
  }
}

template <typename T, int V>
__global__ void bias_dropout_add_backward_kernel(T* dinp, T* dresidual, const T* dout,
                                                 int64_t rows, Mask mask, HiddenIndex index) {
  const int64_t row_packs = index.channels / V;
  const int64_t packs = rows * row_packs;
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = p / row_packs;
    const uint64_t first = index(row, (p - row * row_packs) * V);
    const Pack<T, V> dy = load_pack<V>(dout, p);
    Pack<T, V> dx = load_pack<V>(dinp, p);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      dx.v[k] = from_float<T>(to_float(dx.v[k]) + to_float(dy.v[k]) * mask.factor(first + k));
    }
    store_pack(dinp, p, dx);
    if (dresidual != nullptr) {
      Pack<T, V> dr = load_pack<V>(dresidual, p);
#pragma unroll
      for (int k = 0; k < V; ++k) dr.v[k] = from_float<T>(to_float(dr.v[k]) + to_float(dy.v[k]));
      store_pack(dresidual, p, dr);
    }
  }
}

// Block (32, 8): threadIdx.x picks the channel, threadIdx.y and blockIdx.y stride over rows.
template <typename T>
__global__ void dropout_bias_grad_kernel(float* dbias, const T* dout, int64_t rows, Mask mask,
                                         HiddenIndex index) {
  __shared__ float part[8][33];
  const int64_t channels = index.channels;
  const int64_t c = blockIdx.x * int64_t{32} + threadIdx.x;
  float sum = 0.0f;
  if (c < channels) {
    for (int64_t row = blockIdx.y * int64_t{8} + threadIdx.y; row < rows;
         row += int64_t{gridDim.y} * 8) {
      sum += to_float(dout[row * channels + c]) * mask.factor(index(row, c));
    }
  }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int y = 1; y < 8; ++y) sum += part[y][threadIdx.x];
    atomicAdd(&dbias[c], sum);
  }
}

template <typename T>
__global__ void attention_dropout_kernel(T* out, const T* inp, int64_t n, bool accumulate,
                                         Mask mask, AttentionIndex index) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float y = to_float(inp[i]) * mask.factor(index(i));
    out[i] = from_float<T>(accumulate ? to_float(out[i]) + y : y);
  }
}

__global__ void counter_hash_kernel(uint64_t* out, uint64_t seed, uint64_t stream,
                                    uint64_t first_index, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = counter_hash(seed, stream, first_index + static_cast<uint64_t>(i));
  }
}

Mask make_mask(const cpu::DropoutParams& params) {
  if (!(params.p >= 0.0 && params.p < 1.0)) {  // also rejects NaN
    throw InvalidArgument(std::string("cuda ") + kLayer + ": p must be in [0, 1), got " +
                          std::to_string(params.p));
  }
  return Mask{params.seed, params.stream, dropout_keep_threshold(params.p),
              static_cast<float>(1.0 / (1.0 - params.p))};
}

// Checks the block (as exec/cpu/dropout) and returns its rows B * T_local.
int64_t check_block(const cpu::HiddenBlock& k) {
  require_positive(kLayer, k.batch, "batch");
  require_positive(kLayer, k.seq_local, "seq_local");
  require_positive(kLayer, k.channels, "channels");
  require_non_negative(kLayer, k.first_sample, "first_sample");
  require_non_negative(kLayer, k.seq_offset, "seq_offset");
  if (k.seq_total < k.seq_offset + k.seq_local) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": seq_total " +
                          std::to_string(k.seq_total) + " must be >= seq_offset + seq_local = " +
                          std::to_string(k.seq_offset + k.seq_local));
  }
  require_product_fits(kLayer, (k.first_sample + k.batch) * k.seq_total, k.channels,
                       "global element index");
  return k.batch * k.seq_local;
}

int64_t check_block(const cpu::AttentionBlock& k) {
  require_positive(kLayer, k.batch, "batch");
  require_positive(kLayer, k.heads, "heads");
  require_positive(kLayer, k.seq, "seq");
  require_non_negative(kLayer, k.first_sample, "first_sample");
  require_non_negative(kLayer, k.head_offset, "head_offset");
  if (k.heads_total < k.head_offset + k.heads) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": heads_total " +
                          std::to_string(k.heads_total) + " must be >= head_offset + heads = " +
                          std::to_string(k.head_offset + k.heads));
  }
  require_product_fits(kLayer, (k.first_sample + k.batch) * k.heads_total, k.seq * k.seq,
                       "global element index");
  return k.batch * k.heads * k.seq * k.seq;
}

HiddenIndex hidden_index(const cpu::HiddenBlock& k) {
  return HiddenIndex{k.seq_local, k.channels, k.first_sample, k.seq_offset, k.seq_total};
}

AttentionIndex attention_index(const cpu::AttentionBlock& k) {
  return AttentionIndex{k.heads, k.seq, k.first_sample, k.head_offset, k.heads_total};
}

}  // namespace

void bias_dropout_add_forward(DType dtype, void* out, const void* inp, const void* bias,
                              const void* residual, const cpu::DropoutParams& params,
                              const cpu::HiddenBlock& block, cudaStream_t stream) {
  const Mask mask = make_mask(params);
  const int64_t rows = check_block(block);
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, inp, "inp");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    with_pack_width(block.channels,
                    {{out, sizeof(T)}, {inp, sizeof(T)}, {bias, sizeof(T)}, {residual, sizeof(T)}},
                    [&](auto width) {
                      constexpr int V = decltype(width)::value;
                      bias_dropout_add_forward_kernel<T, V>
                          <<<grid_for(rows * block.channels / V), kBlock, 0, stream>>>(
                              static_cast<T*>(out), static_cast<const T*>(inp),
                              static_cast<const T*>(bias), static_cast<const T*>(residual), rows,
                              mask, hidden_index(block));
                      TRAINTWIN_CUDA_CHECK_LAUNCH();
                    });
  });
}

void bias_dropout_add_backward(DType dtype, void* dinp, float* dbias, void* dresidual,
                               const void* dout, const cpu::DropoutParams& params,
                               const cpu::HiddenBlock& block, cudaStream_t stream) {
  const Mask mask = make_mask(params);
  const int64_t rows = check_block(block);
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, dout, "dout");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    with_pack_width(block.channels,
                    {{dinp, sizeof(T)}, {dresidual, sizeof(T)}, {dout, sizeof(T)}},
                    [&](auto width) {
                      constexpr int V = decltype(width)::value;
                      bias_dropout_add_backward_kernel<T, V>
                          <<<grid_for(rows * block.channels / V), kBlock, 0, stream>>>(
                              static_cast<T*>(dinp), static_cast<T*>(dresidual),
                              static_cast<const T*>(dout), rows, mask, hidden_index(block));
                      TRAINTWIN_CUDA_CHECK_LAUNCH();
                    });
    if (dbias != nullptr) {
      const dim3 grid(static_cast<unsigned>((block.channels + 31) / 32),
                      static_cast<unsigned>(std::min<int64_t>((rows + 7) / 8, 128)));
      dropout_bias_grad_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(
          dbias, static_cast<const T*>(dout), rows, mask, hidden_index(block));
      TRAINTWIN_CUDA_CHECK_LAUNCH();
    }
  });
}

void attention_dropout_forward(DType dtype, void* out, const void* inp,
                               const cpu::DropoutParams& params,
                               const cpu::AttentionBlock& block, cudaStream_t stream) {
  const Mask mask = make_mask(params);
  const int64_t n = check_block(block);
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, inp, "inp");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    attention_dropout_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(inp), n, false, mask, attention_index(block));
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void attention_dropout_backward(DType dtype, void* dinp, const void* dout,
                                const cpu::DropoutParams& params,
                                const cpu::AttentionBlock& block, cudaStream_t stream) {
  const Mask mask = make_mask(params);
  const int64_t n = check_block(block);
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, dout, "dout");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    attention_dropout_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(dout), n, true, mask,
        attention_index(block));
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void counter_hash_fill(uint64_t* out, uint64_t seed, uint64_t stream_id, uint64_t first_index,
                       int64_t n, cudaStream_t stream) {
  require_positive("counter_hash_fill", n, "n");
  require_pointer("counter_hash_fill", out, "out");
  counter_hash_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, seed, stream_id, first_index, n);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

}  // namespace traintwin::exec::cuda
