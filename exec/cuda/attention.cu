// Causal attention through cuBLAS and the fused softmax; see attention.hpp.
#include "exec/cuda/attention.hpp"

#include <cmath>

#include "exec/cuda/common.cuh"
#include "exec/cuda/softmax.hpp"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "attention";

// inp[B, T, 3, NH, hs] -> q, k, v [B, NH, T, hs] (one thread per element of q).
template <typename T>
__global__ void permute_qkv_kernel(T* q, T* k, T* v, const T* inp, int64_t batch, int64_t seq,
                                   int64_t heads, int64_t hs) {
  const int64_t channels = heads * hs;
  const int64_t n = batch * seq * channels;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    // i indexes [B, NH, T, hs]
    const int64_t d = i % hs;
    const int64_t t = (i / hs) % seq;
    const int64_t h = (i / (hs * seq)) % heads;
    const int64_t b = i / (hs * seq * heads);
    const int64_t src = (b * seq + t) * 3 * channels + h * hs + d;
    q[i] = inp[src];
    k[i] = inp[src + channels];
    v[i] = inp[src + 2 * channels];
  }
}

// dinp[B, T, 3, NH, hs] += dq, dk, dv [B, NH, T, hs].
template <typename T>
__global__ void unpermute_qkv_add_kernel(T* dinp, const T* dq, const T* dk, const T* dv,
                                         int64_t batch, int64_t seq, int64_t heads, int64_t hs) {
  const int64_t channels = heads * hs;
  const int64_t n = batch * seq * channels;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % hs;
    const int64_t t = (i / hs) % seq;
    const int64_t h = (i / (hs * seq)) % heads;
    const int64_t b = i / (hs * seq * heads);
    const int64_t dst = (b * seq + t) * 3 * channels + h * hs + d;
    dinp[dst] = from_float<T>(to_float(dinp[dst]) + to_float(dq[i]));
    dinp[dst + channels] = from_float<T>(to_float(dinp[dst + channels]) + to_float(dk[i]));
    dinp[dst + 2 * channels] =
        from_float<T>(to_float(dinp[dst + 2 * channels]) + to_float(dv[i]));
  }
}

// y[B, NH, T, hs] <-> out[B, T, NH, hs]; to_heads = false writes out from y, true writes y
// from out (the backward's permutation of dout).
template <typename T>
__global__ void heads_permute_kernel(T* dst, const T* src, int64_t batch, int64_t seq,
                                     int64_t heads, int64_t hs, bool to_heads) {
  const int64_t channels = heads * hs;
  const int64_t n = batch * seq * channels;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    // i indexes [B, NH, T, hs]
    const int64_t d = i % hs;
    const int64_t t = (i / hs) % seq;
    const int64_t h = (i / (hs * seq)) % heads;
    const int64_t b = i / (hs * seq * heads);
    const int64_t j = (b * seq + t) * channels + h * hs + d;  // [B, T, NH, hs]
    if (to_heads) {
      dst[i] = src[j];
    } else {
      dst[j] = src[i];
    }
  }
}

void check(int64_t batch, int64_t seq, int64_t channels, int64_t heads) {
  require_positive(kLayer, batch, "batch");
  require_positive(kLayer, seq, "seq");
  require_positive(kLayer, channels, "channels");
  require_positive(kLayer, heads, "heads");
  if (channels % heads != 0) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": heads " + std::to_string(heads) +
                          " must divide channels " + std::to_string(channels));
  }
  require_product_fits(kLayer, batch * seq, 7 * channels, "7 * batch * seq * channels");
  require_product_fits(kLayer, batch * heads * seq, seq, "batch * heads * seq * seq");
}

void check_workspace(DType dtype, const void* workspace, size_t workspace_bytes, int64_t batch,
                     int64_t seq, int64_t channels, int64_t heads) {
  require_pointer(kLayer, workspace, "workspace");
  const size_t needed = attention_workspace_bytes(dtype, batch, seq, channels, heads);
  if (workspace_bytes < needed) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": workspace has " +
                          std::to_string(workspace_bytes) + " bytes, needs " +
                          std::to_string(needed) + " (attention_workspace_bytes)");
  }
}

}  // namespace

size_t attention_workspace_bytes(DType dtype, int64_t batch, int64_t seq, int64_t channels,
                                 int64_t heads) {
  check(batch, seq, channels, heads);
  const auto elements = static_cast<size_t>(7 * batch * seq * channels + batch * heads * seq * seq);
  return elements * dtype_size_bytes(dtype);
}

void attention_forward(CublasContext& ctx, DType dtype, void* out, void* preatt, void* att,
                       const void* inp, void* workspace, size_t workspace_bytes, int64_t batch,
                       int64_t seq, int64_t channels, int64_t heads, cudaStream_t stream) {
  check(batch, seq, channels, heads);
  check_workspace(dtype, workspace, workspace_bytes, batch, seq, channels, heads);
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, preatt, "preatt");
  require_pointer(kLayer, att, "att");
  require_pointer(kLayer, inp, "inp");
  const int64_t hs = channels / heads;
  const int64_t btc = batch * seq * channels;
  const int64_t bh = batch * heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    T* q = static_cast<T*>(workspace);
    T* k = q + btc;
    T* v = k + btc;
    T* y = v + btc;
    permute_qkv_kernel<T><<<grid_for(btc), kBlock, 0, stream>>>(
        q, k, v, static_cast<const T*>(inp), batch, seq, heads, hs);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
    // preatt[T, T] = scale q[T, hs] k[T, hs]^T per (b, h)
    batched_matmul(ctx, dtype, false, true, seq, seq, hs, scale, q, hs, seq * hs, k, hs, seq * hs,
                   0.0f, preatt, seq, seq * seq, bh, stream);
    causal_softmax_forward(dtype, att, preatt, bh, seq, 1.0f, stream);
    // y[T, hs] = att[T, T] v[T, hs]
    batched_matmul(ctx, dtype, false, false, seq, hs, seq, 1.0f, att, seq, seq * seq, v, hs,
                   seq * hs, 0.0f, y, hs, seq * hs, bh, stream);
    heads_permute_kernel<T><<<grid_for(btc), kBlock, 0, stream>>>(static_cast<T*>(out), y, batch,
                                                                  seq, heads, hs, false);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void attention_backward(CublasContext& ctx, DType dtype, void* dinp, const void* dout,
                        const void* inp, const void* att, void* workspace, size_t workspace_bytes,
                        int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                        cudaStream_t stream) {
  check(batch, seq, channels, heads);
  check_workspace(dtype, workspace, workspace_bytes, batch, seq, channels, heads);
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, dout, "dout");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, att, "att");
  const int64_t hs = channels / heads;
  const int64_t btc = batch * seq * channels;
  const int64_t bh = batch * heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    T* q = static_cast<T*>(workspace);
    T* k = q + btc;
    T* v = k + btc;
    T* dy = v + btc;
    T* dq = dy + btc;
    T* dk = dq + btc;
    T* dv = dk + btc;
    T* datt = dv + btc;  // [B, NH, T, T], then dpreatt in place
    permute_qkv_kernel<T><<<grid_for(btc), kBlock, 0, stream>>>(
        q, k, v, static_cast<const T*>(inp), batch, seq, heads, hs);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
    heads_permute_kernel<T><<<grid_for(btc), kBlock, 0, stream>>>(
        dy, static_cast<const T*>(dout), batch, seq, heads, hs, true);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
    // datt[T, T] = dy[T, hs] v[T, hs]^T
    batched_matmul(ctx, dtype, false, true, seq, seq, hs, 1.0f, dy, hs, seq * hs, v, hs, seq * hs,
                   0.0f, datt, seq, seq * seq, bh, stream);
    // dv[T, hs] = att[T, T]^T dy[T, hs]
    batched_matmul(ctx, dtype, true, false, seq, hs, seq, 1.0f, att, seq, seq * seq, dy, hs,
                   seq * hs, 0.0f, dv, hs, seq * hs, bh, stream);
    // dpreatt = scale att (datt - rowsum(att datt)), zero above the diagonal
    causal_softmax_backward(dtype, datt, datt, att, bh, seq, scale, stream);
    // dq[T, hs] = dpreatt[T, T] k[T, hs];  dk[T, hs] = dpreatt^T q
    batched_matmul(ctx, dtype, false, false, seq, hs, seq, 1.0f, datt, seq, seq * seq, k, hs,
                   seq * hs, 0.0f, dq, hs, seq * hs, bh, stream);
    batched_matmul(ctx, dtype, true, false, seq, hs, seq, 1.0f, datt, seq, seq * seq, q, hs,
                   seq * hs, 0.0f, dk, hs, seq * hs, bh, stream);
    unpermute_qkv_add_kernel<T><<<grid_for(btc), kBlock, 0, stream>>>(
        static_cast<T*>(dinp), dq, dk, dv, batch, seq, heads, hs);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace traintwin::exec::cuda
