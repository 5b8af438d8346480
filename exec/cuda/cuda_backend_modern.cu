// CudaBackend's "modern" kernels (exec/cuda/cuda_backend.hpp): RMSNorm, RoPE, SwiGLU, squared
// ReLU, grouped-query attention, blockwise attention (FlashAttention tile / CP ring-attention
// block), its merge and add_in_place, and the fused attention (cuDNN,
// exec/cuda/cudnn_attention.hpp, on bf16 copies of the QKV rows). Each override checks its spans
// against its shape (check_size: InvalidArgument naming the kernel and the operand, before any
// launch), takes its scratch from the stream-ordered pool (Scratch) and calls the fp32 launcher
// of its layer
// (exec/cuda/rmsnorm.hpp, rope.hpp, swiglu.hpp, squared_relu.hpp, gqa_attention.hpp,
// block_attention.hpp) on the backend's stream; nothing here synchronizes. Semantics are those
// of exec/backend.hpp and the CPU layers of exec/cpu/ (which outputs are overwritten and which
// accumulate).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "exec/cuda/block_attention.hpp"
#include "exec/cuda/common.cuh"
#include "exec/cuda/cuda_backend.hpp"
#include "exec/cuda/gqa_attention.hpp"
#include "exec/cuda/rmsnorm.hpp"
#include "exec/cuda/rope.hpp"
#include "exec/cuda/squared_relu.hpp"
#include "exec/cuda/swiglu.hpp"

namespace traintwin::exec::cuda {
namespace {

// dst[i] += src[i], V elements per access (common.cuh: packed access), `packs` = n / V.
template <int V>
__global__ void add_in_place_kernel(float* dst, const float* src, int64_t packs) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
       p += int64_t{gridDim.x} * blockDim.x) {
    detail::Pack<float, V> d = detail::load_pack<V>(dst, p);
    const detail::Pack<float, V> s = detail::load_pack<V>(src, p);
#pragma unroll
    for (int k = 0; k < V; ++k) d.v[k] += s.v[k];
    detail::store_pack(dst, p, d);
  }
}

/// At least one byte (a Scratch of a degenerate shape that the launcher then rejects).
size_t at_least_one(int64_t bytes) { return static_cast<size_t>(std::max<int64_t>(bytes, 1)); }

/// Whether `dropout` asks for any dropping (the launchers validate it further).
bool dropout_on(const cpu::AttentionProbabilityDropout* dropout) {
  return dropout != nullptr && dropout->params.p > 0;
}

}  // namespace

/// RMSNorm forward (exec/cpu/rmsnorm.hpp): out [B, T, C] and rrms [B, T] overwritten; one warp
/// per row.
void CudaBackend::rmsnorm_forward(FSpan out, FSpan rrms, CFSpan inp, CFSpan weight, int64_t batch,
                                  int64_t seq, int64_t channels) {
  constexpr const char* kWho = "rmsnorm_forward";
  check_size(kWho, "out", out.size(), batch * seq * channels);
  check_size(kWho, "rrms", rrms.size(), batch * seq);
  check_size(kWho, "inp", inp.size(), batch * seq * channels);
  check_size(kWho, "weight", weight.size(), channels);
  cuda::rmsnorm_forward(out.data(), rrms.data(), inp.data(), weight.data(), batch, seq, channels,
                        stream_);
}

/// RMSNorm backward: dinp [B, T, C] and dweight [C] +=.
void CudaBackend::rmsnorm_backward(FSpan dinp, FSpan dweight, CFSpan dout, CFSpan inp,
                                   CFSpan weight, CFSpan rrms, int64_t batch, int64_t seq,
                                   int64_t channels) {
  constexpr const char* kWho = "rmsnorm_backward";
  check_size(kWho, "dinp", dinp.size(), batch * seq * channels);
  check_size(kWho, "dweight", dweight.size(), channels);
  check_size(kWho, "dout", dout.size(), batch * seq * channels);
  check_size(kWho, "inp", inp.size(), batch * seq * channels);
  check_size(kWho, "weight", weight.size(), channels);
  check_size(kWho, "rrms", rrms.size(), batch * seq);
  cuda::rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(),
                         rrms.data(), batch, seq, channels, stream_);
}

/// Causal GQA forward (exec/cpu/gqa_attention.hpp): out [B, T, NH D] and att [B, NH, T, T]
/// overwritten; permutes + strided-batched cuBLAS GEMMs per K/V group + causal softmax, scratch
/// from the pool.
void CudaBackend::gqa_attention_forward(FSpan out, FSpan att, CFSpan inp, int64_t batch,
                                        int64_t seq, int64_t heads, int64_t query_groups,
                                        int64_t head_dim,
                                        const cpu::AttentionProbabilityDropout* dropout) {
  constexpr const char* kWho = "gqa_attention_forward";
  check_size(kWho, "inp", inp.size(), batch * seq * (heads + 2 * query_groups) * head_dim);
  check_size(kWho, "out", out.size(), batch * seq * heads * head_dim);
  check_size(kWho, "att", att.size(), batch * heads * seq * seq);
  const size_t bytes = gqa_attention_workspace_bytes(batch, seq, heads, query_groups, head_dim,
                                                     dropout_on(dropout), false);
  Scratch workspace(*this, bytes);
  cuda::gqa_attention_forward(cublas_, out.data(), att.data(), inp.data(), workspace.get(),
                              workspace.bytes(), batch, seq, heads, query_groups, head_dim,
                              dropout, stream_);
}

/// Causal GQA backward: dinp [B, T, (NH + 2G) D] +=.
void CudaBackend::gqa_attention_backward(FSpan dinp, CFSpan dout, CFSpan inp, CFSpan att,
                                         int64_t batch, int64_t seq, int64_t heads,
                                         int64_t query_groups, int64_t head_dim,
                                         const cpu::AttentionProbabilityDropout* dropout) {
  constexpr const char* kWho = "gqa_attention_backward";
  const int64_t fused = batch * seq * (heads + 2 * query_groups) * head_dim;
  check_size(kWho, "dinp", dinp.size(), fused);
  check_size(kWho, "dout", dout.size(), batch * seq * heads * head_dim);
  check_size(kWho, "inp", inp.size(), fused);
  check_size(kWho, "att", att.size(), batch * heads * seq * seq);
  const size_t bytes = gqa_attention_workspace_bytes(batch, seq, heads, query_groups, head_dim,
                                                     dropout_on(dropout), true);
  Scratch workspace(*this, bytes);
  cuda::gqa_attention_backward(cublas_, dinp.data(), dout.data(), inp.data(), att.data(),
                               workspace.get(), workspace.bytes(), batch, seq, heads,
                               query_groups, head_dim, dropout, stream_);
}

/// One block of blockwise causal attention (exec/cpu/block_attention.hpp): out [B, Tq, NH D] and
/// lse [B, NH, Tq] overwritten; tiled online-softmax kernels with global CP positions (on the
/// tensor cores under float32_matmul_precision high or medium, block_attention.hpp).
void CudaBackend::block_attention_forward(FSpan out, FSpan lse, CFSpan q, CFSpan kv,
                                          const CpSequence& q_positions,
                                          const CpSequence& k_positions,
                                          const cpu::BlockAttentionShape& shape,
                                          const cpu::AttentionProbabilityDropout* dropout) {
  constexpr const char* kWho = "block_attention_forward";
  const cpu::BlockAttentionShape& s = shape;
  check_size(kWho, "q", q.size(), s.batch * s.seq_q * s.heads * s.head_dim);
  check_size(kWho, "kv", kv.size(), s.batch * s.seq_k * 2 * s.groups * s.head_dim);
  check_size(kWho, "out", out.size(), s.batch * s.seq_q * s.heads * s.head_dim);
  check_size(kWho, "lse", lse.size(), s.batch * s.heads * s.seq_q);
  cuda::block_attention_forward(out.data(), lse.data(), q.data(), kv.data(), q_positions,
                                k_positions, shape, dropout,
                                cublas_.float32_matmul_precision(), stream_);
}

namespace {

/// Throws UnsupportedError naming what cuDNN's fused attention needs that this call lacks, or
/// that the build has no cuDNN.
void check_fused_attention(const cpu::BlockAttentionShape& s,
                           const cpu::AttentionProbabilityDropout* dropout,
                           Float32MatmulPrecision precision) {
  std::string gap;
  if (s.groups != s.heads) {
    gap = "multi-head attention (model.num_query_groups = num_attention_heads; here " +
          std::to_string(s.groups) + " K/V heads for " + std::to_string(s.heads) +
          " query heads): use attention_backend flash for grouped-query attention";
  } else if (dropout != nullptr && dropout->params.p > 0) {
    gap = "no attention dropout (model.attention_dropout 0; here " +
          std::to_string(dropout->params.p) + ")";
  } else if (precision != Float32MatmulPrecision::kMedium) {
    gap = "bf16 products (training.precision bf16, or float32_matmul_precision medium)";
  } else if (s.seq_q != s.seq_k) {
    gap = "one block of queries and keys (CP = 1)";
  }
  if (!gap.empty()) {
    throw UnsupportedError("cuda backend: attention_backend fused (cuDNN) needs " + gap);
  }
#if !TRAINTWIN_HAVE_CUDNN
  throw UnsupportedError(
      "cuda backend: attention_backend fused needs cuDNN (9.11 or later), which this build lacks "
      "(CMake found no cudnn.h and libcudnn beside the CUDA toolkit)");
#endif
}

#if TRAINTWIN_HAVE_CUDNN
CudnnAttentionShape cudnn_shape(const cpu::BlockAttentionShape& s) {
  return {s.batch, s.seq_q, s.heads, s.head_dim,
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)))};
}
#endif

}  // namespace

#if TRAINTWIN_HAVE_CUDNN
CudnnAttention& CudaBackend::cudnn_attention() {
  if (!cudnn_attention_) cudnn_attention_ = std::make_unique<CudnnAttention>(stream_);
  return *cudnn_attention_;
}
#endif

void CudaBackend::fused_attention_forward(FSpan out, FSpan lse, CFSpan qkv,
                                          const cpu::BlockAttentionShape& shape,
                                          const cpu::AttentionProbabilityDropout* dropout) {
  constexpr const char* kWho = "fused_attention_forward";
  const cpu::BlockAttentionShape& s = shape;
  const int64_t rows = s.batch * s.seq_q;
  check_size(kWho, "qkv", qkv.size(), rows * (s.heads + 2 * s.groups) * s.head_dim);
  check_size(kWho, "out", out.size(), rows * s.heads * s.head_dim);
  check_size(kWho, "lse", lse.size(), s.batch * s.heads * s.seq_q);
  check_fused_attention(s, dropout, cublas_.float32_matmul_precision());
#if TRAINTWIN_HAVE_CUDNN
  Bf16Tensor qkv16(*this, static_cast<int64_t>(qkv.size()), kUninitialized);
  Bf16Tensor out16(*this, static_cast<int64_t>(out.size()), kUninitialized);
  convert_to_bf16(qkv16, qkv);
  cudnn_attention().forward(cudnn_shape(s), qkv16.data(), out16.data(), lse.data());
  convert_from_bf16(out, out16);
#endif
}

void CudaBackend::fused_attention_backward(FSpan d_qkv, CFSpan dout, CFSpan qkv, CFSpan out,
                                           CFSpan lse, const cpu::BlockAttentionShape& shape,
                                           const cpu::AttentionProbabilityDropout* dropout) {
  constexpr const char* kWho = "fused_attention_backward";
  const cpu::BlockAttentionShape& s = shape;
  const int64_t rows = s.batch * s.seq_q;
  const int64_t width = (s.heads + 2 * s.groups) * s.head_dim;
  check_size(kWho, "qkv", qkv.size(), rows * width);
  check_size(kWho, "d_qkv", d_qkv.size(), rows * width);
  check_size(kWho, "out", out.size(), rows * s.heads * s.head_dim);
  check_size(kWho, "dout", dout.size(), rows * s.heads * s.head_dim);
  check_size(kWho, "lse", lse.size(), s.batch * s.heads * s.seq_q);
  check_fused_attention(s, dropout, cublas_.float32_matmul_precision());
#if TRAINTWIN_HAVE_CUDNN
  Bf16Tensor qkv16(*this, static_cast<int64_t>(qkv.size()), kUninitialized);
  Bf16Tensor out16(*this, static_cast<int64_t>(out.size()), kUninitialized);
  Bf16Tensor dout16(*this, static_cast<int64_t>(dout.size()), kUninitialized);
  Bf16Tensor dqkv16(*this, static_cast<int64_t>(d_qkv.size()), kUninitialized);
  convert_to_bf16(qkv16, qkv);
  convert_to_bf16(out16, out);  // exact: out was widened from bf16
  convert_to_bf16(dout16, dout);
  cudnn_attention().backward(cudnn_shape(s), qkv16.data(), out16.data(), dout16.data(),
                             lse.data(), dqkv16.data());
  convert_from_bf16(d_qkv, dqkv16);
#endif
}

/// Ring attention's merge of (block_out, block_lse) into (out, lse), in place; one warp per row.
void CudaBackend::attention_merge(FSpan out, FSpan lse, CFSpan block_out, CFSpan block_lse,
                                  int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  constexpr const char* kWho = "attention_merge";
  check_size(kWho, "out", out.size(), batch * seq * heads * head_dim);
  check_size(kWho, "block_out", block_out.size(), batch * seq * heads * head_dim);
  check_size(kWho, "lse", lse.size(), batch * heads * seq);
  check_size(kWho, "block_lse", block_lse.size(), batch * heads * seq);
  cuda::attention_merge(out.data(), lse.data(), block_out.data(), block_lse.data(), batch, seq,
                        heads, head_dim, stream_);
}

/// dst [N] += src [N]; packed accesses where sizes and alignment allow.
void CudaBackend::add_in_place(FSpan dst, CFSpan src) {
  check_size("add_in_place", "src", src.size(), static_cast<int64_t>(dst.size()));
  const auto n = static_cast<int64_t>(dst.size());
  if (n == 0) return;
  detail::with_pack_width(
      n, {{dst.data(), sizeof(float)}, {src.data(), sizeof(float)}}, [&](auto width) {
        constexpr int V = decltype(width)::value;
        add_in_place_kernel<V><<<detail::grid_for(n / V), detail::kBlock, 0, stream_>>>(
            dst.data(), src.data(), n / V);
        TRAINTWIN_CUDA_CHECK_LAUNCH();
      });
}

/// One block's backward: dq [B, Tq, NH D] and dkv [B, Tk, 2 G D] +=, from the final out and lse;
/// a row-dot kernel, a dq kernel per query tile and a dk/dv kernel per key tile (no atomics).
void CudaBackend::block_attention_backward(FSpan dq, FSpan dkv, CFSpan dout, CFSpan q, CFSpan kv,
                                           CFSpan out, CFSpan lse, const CpSequence& q_positions,
                                           const CpSequence& k_positions,
                                           const cpu::BlockAttentionShape& shape,
                                           const cpu::AttentionProbabilityDropout* dropout) {
  constexpr const char* kWho = "block_attention_backward";
  const cpu::BlockAttentionShape& s = shape;
  const int64_t q_elems = s.batch * s.seq_q * s.heads * s.head_dim;
  const int64_t kv_elems = s.batch * s.seq_k * 2 * s.groups * s.head_dim;
  check_size(kWho, "dq", dq.size(), q_elems);
  check_size(kWho, "dkv", dkv.size(), kv_elems);
  check_size(kWho, "dout", dout.size(), q_elems);
  check_size(kWho, "q", q.size(), q_elems);
  check_size(kWho, "kv", kv.size(), kv_elems);
  check_size(kWho, "out", out.size(), q_elems);
  check_size(kWho, "lse", lse.size(), s.batch * s.heads * s.seq_q);
  Scratch workspace(*this, block_attention_backward_workspace_bytes(shape));
  cuda::block_attention_backward(dq.data(), dkv.data(), dout.data(), q.data(), kv.data(),
                                 out.data(), lse.data(), q_positions, k_positions, shape, dropout,
                                 workspace.get(), workspace.bytes(),
                                 cublas_.float32_matmul_precision(), stream_);
}

/// RoPE forward (exec/cpu/rope.hpp): out [B, T, H, D] overwritten; a cos/sin table of the
/// global positions (double, rounded to float) then one thread per rotated pair.
void CudaBackend::rope_forward(FSpan out, CFSpan inp, int64_t batch, int64_t seq, int64_t heads,
                               int64_t head_dim, const CpSequence& positions,
                               double rotary_base) {
  constexpr const char* kWho = "rope_forward";
  check_size(kWho, "out", out.size(), batch * seq * heads * head_dim);
  check_size(kWho, "inp", inp.size(), batch * seq * heads * head_dim);
  const int64_t table = seq > 0 && head_dim > 0 ? rope_table_floats(seq, head_dim) : 1;
  Scratch scratch(*this, at_least_one(table * static_cast<int64_t>(sizeof(float))));
  cuda::rope_forward(out.data(), inp.data(), scratch.as<float>(), batch, seq, heads, head_dim,
                     positions, rotary_base, stream_);
}

/// RoPE backward: dinp [B, T, H, D] += the inverse rotation of dout.
void CudaBackend::rope_backward(FSpan dinp, CFSpan dout, int64_t batch, int64_t seq, int64_t heads,
                                int64_t head_dim, const CpSequence& positions,
                                double rotary_base) {
  constexpr const char* kWho = "rope_backward";
  check_size(kWho, "dinp", dinp.size(), batch * seq * heads * head_dim);
  check_size(kWho, "dout", dout.size(), batch * seq * heads * head_dim);
  const int64_t table = seq > 0 && head_dim > 0 ? rope_table_floats(seq, head_dim) : 1;
  Scratch scratch(*this, at_least_one(table * static_cast<int64_t>(sizeof(float))));
  cuda::rope_backward(dinp.data(), dout.data(), scratch.as<float>(), batch, seq, heads, head_dim,
                      positions, rotary_base, stream_);
}

/// SwiGLU forward (exec/cpu/swiglu.hpp): out [R, F] = silu(gate) up, overwritten.
void CudaBackend::swiglu_forward(FSpan out, CFSpan inp, int64_t rows, int64_t width) {
  constexpr const char* kWho = "swiglu_forward";
  check_size(kWho, "inp", inp.size(), rows * 2 * width);
  check_size(kWho, "out", out.size(), rows * width);
  cuda::swiglu_forward(out.data(), inp.data(), rows, width, stream_);
}

/// SwiGLU backward: dinp [R, 2F] +=.
void CudaBackend::swiglu_backward(FSpan dinp, CFSpan dout, CFSpan inp, int64_t rows,
                                  int64_t width) {
  constexpr const char* kWho = "swiglu_backward";
  check_size(kWho, "inp", inp.size(), rows * 2 * width);
  check_size(kWho, "dout", dout.size(), rows * width);
  check_size(kWho, "dinp", dinp.size(), rows * 2 * width);
  cuda::swiglu_backward(dinp.data(), dout.data(), inp.data(), rows, width, stream_);
}

/// Squared ReLU forward (exec/cpu/squared_relu.hpp): out [N] = max(inp, 0)^2, overwritten.
void CudaBackend::squared_relu_forward(FSpan out, CFSpan inp) {
  check_size("squared_relu_forward", "out", out.size(), static_cast<int64_t>(inp.size()));
  cuda::squared_relu_forward(out.data(), inp.data(), static_cast<int64_t>(inp.size()), stream_);
}

/// Squared ReLU backward: dinp [N] += 2 max(inp, 0) dout.
void CudaBackend::squared_relu_backward(FSpan dinp, CFSpan inp, CFSpan dout) {
  constexpr const char* kWho = "squared_relu_backward";
  check_size(kWho, "dinp", dinp.size(), static_cast<int64_t>(inp.size()));
  check_size(kWho, "dout", dout.size(), static_cast<int64_t>(inp.size()));
  cuda::squared_relu_backward(dinp.data(), inp.data(), dout.data(),
                              static_cast<int64_t>(inp.size()), stream_);
}

}  // namespace traintwin::exec::cuda
