// Private to the exec/cuda/*.cu files: fp32 load/store of the storage types, warp and block
// reductions, the DType dispatch, grid sizes and the host-side argument checks shared by the
// launchers (each throws InvalidArgument before any CUDA call).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.hpp"
#include "exec/cuda/cuda_check.hpp"
#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda::detail {

// --- fp32 load / store of the storage types ----------------------------------------------------

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }

/// Round to nearest even.
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// --- reductions --------------------------------------------------------------------------------

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
/// `scratch` holds 32 values; the call ends with a barrier, so it may be reused at once.
template <typename Acc>
__device__ Acc block_sum(Acc v, Acc* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  Acc total = lane < warps ? scratch[lane] : Acc{0};
  total = warp_sum(total);
  __syncthreads();
  return total;
}

/// Max over the block, as block_sum.
__device__ inline float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : -INFINITY;
  total = warp_max(total);
  __syncthreads();
  return total;
}

// --- dispatch ----------------------------------------------------------------------------------

/// Calls fn(T{}) with T the storage type of `dtype` (float, __nv_bfloat16, __half); the caller
/// writes `[&](auto tag) { using T = decltype(tag); ... }`. Throws InvalidArgument naming
/// `layer` for a value outside the enum.
template <typename Fn>
void dispatch(DType dtype, const char* layer, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(float{}); return;
    case DType::kBFloat16: fn(__nv_bfloat16{}); return;
    case DType::kFloat16: fn(__half{}); return;
  }
  throw InvalidArgument(std::string("cuda ") + layer + ": unknown DType " +
                        std::to_string(static_cast<int>(dtype)) +
                        " (allowed: kFloat32, kBFloat16, kFloat16)");
}

// --- launch geometry ---------------------------------------------------------------------------

constexpr int kBlock = 256;  ///< threads per block of the elementwise kernels

/// Blocks for a grid-stride loop over n elements: ceil(n / threads), at most 65536 (each thread
/// then loops).
inline unsigned grid_for(int64_t n, int threads = kBlock) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65536));
}

/// Warps (rows) per block of the row-per-warp kernels (LayerNorm, RMSNorm, softmax).
constexpr int kRowWarps = 8;

/// Blocks for `rows` rows at one warp per row, kRowWarps per block.
inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
}

// --- packed (vectorized) elementwise access ----------------------------------------------------
// A memory-bound elementwise kernel moves its bytes at full HBM bandwidth only when each thread
// has several bytes in flight: one 4-byte load per thread keeps about a third of what an H100 or
// H200 needs outstanding (Little's law: bandwidth x latency, about 3 MB there), which capped the
// scalar kernels at 0.6-2 TB/s (train --timeline on an H200). The packed kernels read and write
// kPack consecutive elements per access (16 bytes of fp32, 8 of bf16). Each element's arithmetic
// is the scalar kernel's, so both widths give bit-identical results.

constexpr int kPack = 4;  ///< elements per access of the packed elementwise kernels

/// V consecutive elements of T aligned to their total size: one 8- or 16-byte access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

/// Pack `p` of `base` (elements [p * V, p * V + V)); base must be aligned to the pack's size.
template <int V, typename T>
__device__ __forceinline__ Pack<std::remove_const_t<T>, V> load_pack(const T* base, int64_t p) {
  return reinterpret_cast<const Pack<std::remove_const_t<T>, V>*>(base)[p];
}
template <int V, typename T>
__device__ __forceinline__ void store_pack(T* base, int64_t p, const Pack<T, V>& x) {
  reinterpret_cast<Pack<T, V>*>(base)[p] = x;
}

/// Whether device pointer `p` (nullptr counts as aligned: an absent operand) is aligned to
/// `bytes`.
inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

/// Calls launch(std::integral_constant<int, V>{}) with V = kPack when `n` is a multiple of kPack
/// and every (pointer, element size) in `operands` is aligned to a pack of kPack elements, else
/// V = 1 (the scalar kernel: spans at odd offsets, odd sizes).
template <typename Launch>
void with_pack_width(int64_t n, std::initializer_list<std::pair<const void*, size_t>> operands,
                     Launch&& launch) {
  bool packed = n % kPack == 0;
  for (const auto& [ptr, elem_bytes] : operands) {
    packed = packed && aligned_to(ptr, elem_bytes * kPack);
  }
  if (packed) {
    launch(std::integral_constant<int, kPack>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

// --- host-side argument checks (before any CUDA call) ------------------------------------------

/// Throws InvalidArgument "cuda <layer>: <name> must be >= 1, got <v>".
inline void require_positive(const char* layer, int64_t value, const char* name) {
  if (value < 1) {
    throw InvalidArgument(std::string("cuda ") + layer + ": " + name + " must be >= 1, got " +
                          std::to_string(value));
  }
}

/// Throws InvalidArgument "cuda <layer>: <name> must be >= 0, got <v>".
inline void require_non_negative(const char* layer, int64_t value, const char* name) {
  if (value < 0) {
    throw InvalidArgument(std::string("cuda ") + layer + ": " + name + " must be >= 0, got " +
                          std::to_string(value));
  }
}

/// Throws InvalidArgument "cuda <layer>: <name> is a null device pointer".
inline void require_pointer(const char* layer, const void* ptr, const char* name) {
  if (ptr == nullptr) {
    throw InvalidArgument(std::string("cuda ") + layer + ": " + name +
                          " is a null device pointer");
  }
}

/// Throws InvalidArgument when [vocab_start, vocab_start + vocab_local) is not inside
/// [0, vocab_total) or a count is < 1.
inline void require_vocab_shard(const char* layer, int64_t vocab_start, int64_t vocab_local,
                                int64_t vocab_total) {
  require_positive(layer, vocab_local, "vocab_local");
  require_positive(layer, vocab_total, "vocab_total");
  if (vocab_start < 0 || vocab_start > vocab_total - vocab_local) {
    throw InvalidArgument(std::string("cuda ") + layer + ": shard [vocab_start " +
                          std::to_string(vocab_start) + ", + vocab_local " +
                          std::to_string(vocab_local) + ") is not inside [0, vocab_total " +
                          std::to_string(vocab_total) + ")");
  }
}

/// Throws InvalidArgument when the product of the sizes would overflow int64 (a few huge sizes).
inline void require_product_fits(const char* layer, int64_t a, int64_t b, const char* what) {
  if (a > 0 && b > INT64_MAX / a) {
    throw InvalidArgument(std::string("cuda ") + layer + ": " + what + " overflows int64");
  }
}

/// The shape checks of a per-row layer over [batch, seq, channels]: sizes >= 1 and a product that
/// fits int64 (LayerNorm, RMSNorm).
inline void require_rows_shape(const char* layer, int64_t batch, int64_t seq, int64_t channels) {
  require_positive(layer, batch, "batch");
  require_positive(layer, seq, "seq");
  require_positive(layer, channels, "channels");
  require_product_fits(layer, batch * seq, channels, "batch * seq * channels");
}

}  // namespace traintwin::exec::cuda::detail
