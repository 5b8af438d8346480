// MoE router kernels (top-k softmax, capacity, Switch aux loss); see moe_router.hpp.
#include "exec/cuda/moe_router.hpp"

#include <cub/device/device_radix_sort.cuh>

#include <climits>

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "moe_router";
constexpr int kWarpsPerBlock = kBlock / 32;

/// exp correctly rounded to fp32 (but for rare double roundings): the CPU's std::exp(float)
/// (glibc expf, < 0.502 ulp), so that the gates the capacity compares are the CPU's.
__device__ __forceinline__ float exact_expf(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

/// Blocks of kWarpsPerBlock warps for one warp per row over `rows` rows (warps loop).
unsigned warp_grid(int64_t rows) { return grid_for(rows, kWarpsPerBlock); }

/// (v, i) ranks before (bv, bi): the larger logit, the smaller index on ties; bi < 0 is "none".
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi));
}

__global__ void topk_softmax_kernel(float* gates, uint8_t* topk_map,
                                    unsigned long long* tokens_per_expert, const float* logits,
                                    int64_t tokens, int experts, int topk) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t n = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32; n < tokens;
       n += warps) {
    const float* row = logits + n * experts;
    float* g = gates + n * experts;
    uint8_t* map = topk_map + n * experts;
    for (int e = lane; e < experts; e += 32) {
      g[e] = 0.0f;
      map[e] = 0;
    }
    __syncwarp();
    // k rounds of a warp arg-max over the experts not yet selected: the CPU's partial_sort
    // order. Lane 0 sums the exponentials in that order (the CPU's float sum).
    float max = 0.0f;
    float sum = 0.0f;
    for (int j = 0; j < topk; ++j) {
      float bv = 0.0f;
      int bi = -1;
      for (int e = lane; e < experts; e += 32) {
        if (!map[e] && better(row[e], e, bv, bi)) {
          bv = row[e];
          bi = e;
        }
      }
      for (int offset = 16; offset > 0; offset >>= 1) {
        const float ov = __shfl_xor_sync(kFullMask, bv, offset);
        const int oi = __shfl_xor_sync(kFullMask, bi, offset);
        if (better(ov, oi, bv, bi)) {
          bv = ov;
          bi = oi;
        }
      }
      if (j == 0) max = bv;
      sum += exact_expf(bv - max);
      if (lane == bi % 32) map[bi] = 1;  // the owning lane: it reads map[bi] next round
      if (lane == 0) atomicAdd(tokens_per_expert + bi, 1ull);
      __syncwarp();
    }
    for (int e = lane; e < experts; e += 32) {
      if (map[e]) g[e] = exact_expf(row[e] - max) / sum;
    }
  }
}

int end_bit_for(int64_t experts) {
  int bits = 0;
  while ((int64_t{1} << bits) < experts) ++bits;
  return 32 + bits;
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t items, int end_bit) {
  size_t bytes = 0;
  TRAINTWIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), items, 0, end_bit));
  return bytes;
}

/// keys[e N + n] = e << 32 | (~bits(gates[n, e])), values = n: ascending keys are experts
/// ascending, gates descending (gates >= 0: bit order = value order).
__global__ void capacity_keys_kernel(uint64_t* keys, int32_t* values, const float* gates,
                                     int64_t tokens, int64_t experts) {
  const int64_t total = tokens * experts;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = i / tokens;
    const int64_t n = i - e * tokens;
    const uint32_t bits = __float_as_uint(gates[n * experts + e]);
    keys[i] = (static_cast<uint64_t>(e) << 32) | static_cast<uint64_t>(~bits);
    values[i] = static_cast<int32_t>(n);
  }
}

/// The first `keep` sorted tokens of every expert stay.
__global__ void capacity_select_kernel(uint8_t* routing_map, const int32_t* sorted_tokens,
                                       const uint8_t* topk_map, int64_t tokens, int64_t experts,
                                       int64_t keep, bool pad) {
  const int64_t total = experts * keep;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = i / keep;
    const int64_t j = i - e * keep;
    const int64_t idx = static_cast<int64_t>(sorted_tokens[e * tokens + j]) * experts + e;
    routing_map[idx] = pad ? uint8_t{1} : topk_map[idx];
  }
}

__global__ void masked_probs_kernel(float* probs, const float* gates, const uint8_t* routing_map,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    probs[i] = routing_map[i] ? gates[i] : 0.0f;
  }
}

__global__ void topk_softmax_backward_kernel(float* dlogits, const float* dprobs,
                                             const float* gates, const uint8_t* topk_map,
                                             const uint8_t* routing_map, int64_t tokens,
                                             int experts) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t n = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32; n < tokens;
       n += warps) {
    const int64_t base = n * experts;
    float dot = 0.0f;
    for (int e = lane; e < experts; e += 32) {
      if (topk_map[base + e] && routing_map[base + e]) dot += gates[base + e] * dprobs[base + e];
    }
    dot = warp_sum(dot);
    for (int e = lane; e < experts; e += 32) {
      if (!topk_map[base + e]) continue;
      const float d = routing_map[base + e] ? dprobs[base + e] : 0.0f;
      dlogits[base + e] += gates[base + e] * (d - dot);
    }
  }
}

__global__ void softmax_rows_kernel(float* scores, const float* logits, int64_t tokens,
                                    int experts) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t n = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32; n < tokens;
       n += warps) {
    const float* row = logits + n * experts;
    float* s = scores + n * experts;
    float max = -INFINITY;
    for (int e = lane; e < experts; e += 32) max = fmaxf(max, row[e]);
    max = warp_max(max);
    float sum = 0.0f;
    for (int e = lane; e < experts; e += 32) {
      const float x = exact_expf(row[e] - max);
      s[e] = x;
      sum += x;
    }
    sum = warp_sum(sum);
    for (int e = lane; e < experts; e += 32) s[e] /= sum;
  }
}

constexpr int kColumns = 32;  ///< experts per block of the column sums
constexpr int kRowGroups = 8;

/// sums[e] += sum over rows of x[n, e] (fp64), blockDim (32, 8): 32 columns x 8 row groups,
/// blocks along y split the rows; fp64 atomicAdd of the block partials.
__global__ void column_sums_kernel(double* sums, const float* x, int64_t rows, int64_t cols) {
  __shared__ double partial[kRowGroups][kColumns];
  const int64_t col = blockIdx.x * int64_t{kColumns} + threadIdx.x;
  double acc = 0.0;
  if (col < cols) {
    for (int64_t r = blockIdx.y * int64_t{kRowGroups} + threadIdx.y; r < rows;
         r += int64_t{gridDim.y} * kRowGroups) {
      acc += static_cast<double>(x[r * cols + col]);
    }
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (int y = 1; y < kRowGroups; ++y) acc += partial[y][threadIdx.x];
    atomicAdd(sums + col, acc);
  }
}

__global__ void aux_loss_backward_kernel(float* dlogits, float daux, const float* scores,
                                         const float* c, int64_t tokens, int experts) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t n = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32; n < tokens;
       n += warps) {
    const float* s = scores + n * experts;
    float* d = dlogits + n * experts;
    float dot = 0.0f;
    for (int e = lane; e < experts; e += 32) dot += s[e] * c[e];
    dot = warp_sum(dot);
    for (int e = lane; e < experts; e += 32) d[e] += daux * s[e] * (c[e] - dot);
  }
}

/// Experts fit an int (one warp loops over them) and N x E an int64.
void check_shape(int64_t tokens, int64_t experts) {
  require_positive(kLayer, tokens, "tokens");
  require_positive(kLayer, experts, "experts");
  if (experts > INT_MAX) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": experts " + std::to_string(experts) +
                          " exceeds INT_MAX");
  }
  require_product_fits(kLayer, tokens, experts, "tokens x experts");
}

}  // namespace

void moe_topk_softmax_forward(float* gates, uint8_t* topk_map, int64_t* tokens_per_expert,
                              const float* logits, int64_t tokens, int64_t experts, int64_t topk,
                              cudaStream_t stream) {
  check_shape(tokens, experts);
  require_positive(kLayer, topk, "topk");
  if (topk > experts) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": topk " + std::to_string(topk) +
                          " exceeds experts " + std::to_string(experts));
  }
  require_pointer(kLayer, gates, "gates");
  require_pointer(kLayer, topk_map, "topk_map");
  require_pointer(kLayer, tokens_per_expert, "tokens_per_expert");
  require_pointer(kLayer, logits, "logits");
  static_assert(sizeof(int64_t) == sizeof(unsigned long long));
  TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(tokens_per_expert, 0,
                                       static_cast<size_t>(experts) * sizeof(int64_t), stream));
  topk_softmax_kernel<<<warp_grid(tokens), kBlock, 0, stream>>>(
      gates, topk_map, reinterpret_cast<unsigned long long*>(tokens_per_expert), logits, tokens,
      static_cast<int>(experts), static_cast<int>(topk));
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

size_t moe_capacity_workspace_bytes(int64_t tokens, int64_t experts) {
  check_shape(tokens, experts);
  if (tokens > INT32_MAX) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": tokens " + std::to_string(tokens) +
                          " exceed the sort's int32 token values");
  }
  const auto items = static_cast<size_t>(tokens * experts);
  return 2 * align_up(items * sizeof(uint64_t)) + 2 * align_up(items * sizeof(int32_t)) +
         align_up(sort_temp_bytes(tokens * experts, end_bit_for(experts)));
}

void moe_capacity_routing(uint8_t* routing_map, const float* gates, const uint8_t* topk_map,
                          int64_t tokens, int64_t experts, int64_t capacity, bool pad_to_capacity,
                          void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  check_shape(tokens, experts);
  require_positive(kLayer, capacity, "capacity");
  require_pointer(kLayer, routing_map, "routing_map");
  require_pointer(kLayer, gates, "gates");
  require_pointer(kLayer, topk_map, "topk_map");
  const int64_t items = tokens * experts;
  const auto map_bytes = static_cast<size_t>(items);
  if (capacity >= tokens) {
    // Every token stays: padding takes them all, else the routed ones.
    if (pad_to_capacity) {
      TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(routing_map, 1, map_bytes, stream));
    } else {
      TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(routing_map, topk_map, map_bytes,
                                           cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  const size_t needed = moe_capacity_workspace_bytes(tokens, experts);
  require_pointer(kLayer, workspace, "workspace");
  if (workspace_bytes < needed) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": capacity workspace has " +
                          std::to_string(workspace_bytes) + " bytes, needs " +
                          std::to_string(needed));
  }
  auto* base = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<uint64_t*>(base);
  base += align_up(map_bytes * sizeof(uint64_t));
  auto* keys_out = reinterpret_cast<uint64_t*>(base);
  base += align_up(map_bytes * sizeof(uint64_t));
  auto* values_in = reinterpret_cast<int32_t*>(base);
  base += align_up(map_bytes * sizeof(int32_t));
  auto* values_out = reinterpret_cast<int32_t*>(base);
  base += align_up(map_bytes * sizeof(int32_t));
  const int end_bit = end_bit_for(experts);
  size_t temp_bytes = sort_temp_bytes(items, end_bit);

  capacity_keys_kernel<<<grid_for(items), kBlock, 0, stream>>>(keys_in, values_in, gates, tokens,
                                                               experts);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
  // Radix sort is stable: equal gates keep the ascending token order (the CPU's tie-break).
  TRAINTWIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base, temp_bytes, keys_in, keys_out,
                                                       values_in, values_out, items, 0, end_bit,
                                                       stream));
  TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(routing_map, 0, map_bytes, stream));
  capacity_select_kernel<<<grid_for(experts * capacity), kBlock, 0, stream>>>(
      routing_map, values_out, topk_map, tokens, experts, capacity, pad_to_capacity);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void moe_masked_probs(float* probs, const float* gates, const uint8_t* routing_map, int64_t n,
                      cudaStream_t stream) {
  require_positive(kLayer, n, "n");
  require_pointer(kLayer, probs, "probs");
  require_pointer(kLayer, gates, "gates");
  require_pointer(kLayer, routing_map, "routing_map");
  masked_probs_kernel<<<grid_for(n), kBlock, 0, stream>>>(probs, gates, routing_map, n);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void moe_topk_softmax_backward(float* dlogits, const float* dprobs, const float* gates,
                               const uint8_t* topk_map, const uint8_t* routing_map,
                               int64_t tokens, int64_t experts, cudaStream_t stream) {
  check_shape(tokens, experts);
  require_pointer(kLayer, dlogits, "dlogits");
  require_pointer(kLayer, dprobs, "dprobs");
  require_pointer(kLayer, gates, "gates");
  require_pointer(kLayer, topk_map, "topk_map");
  require_pointer(kLayer, routing_map, "routing_map");
  topk_softmax_backward_kernel<<<warp_grid(tokens), kBlock, 0, stream>>>(
      dlogits, dprobs, gates, topk_map, routing_map, tokens, static_cast<int>(experts));
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void moe_aux_scores(float* scores, double* score_sums, const float* logits, int64_t tokens,
                    int64_t experts, cudaStream_t stream) {
  check_shape(tokens, experts);
  require_pointer(kLayer, scores, "scores");
  require_pointer(kLayer, score_sums, "score_sums");
  require_pointer(kLayer, logits, "logits");
  softmax_rows_kernel<<<warp_grid(tokens), kBlock, 0, stream>>>(scores, logits, tokens,
                                                                static_cast<int>(experts));
  TRAINTWIN_CUDA_CHECK_LAUNCH();
  TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(score_sums, 0, static_cast<size_t>(experts) * sizeof(double),
                                       stream));
  const dim3 block(kColumns, kRowGroups);
  // About 64 rows per thread; at most 1024 row blocks.
  const int64_t row_blocks = std::clamp<int64_t>(tokens / (kRowGroups * 64), 1, 1024);
  const dim3 grid(static_cast<unsigned>((experts + kColumns - 1) / kColumns),
                  static_cast<unsigned>(row_blocks));
  column_sums_kernel<<<grid, block, 0, stream>>>(score_sums, scores, tokens, experts);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void moe_aux_loss_backward(float* dlogits, float daux, const float* scores, const float* c,
                           int64_t tokens, int64_t experts, cudaStream_t stream) {
  check_shape(tokens, experts);
  require_pointer(kLayer, dlogits, "dlogits");
  require_pointer(kLayer, scores, "scores");
  require_pointer(kLayer, c, "c");
  aux_loss_backward_kernel<<<warp_grid(tokens), kBlock, 0, stream>>>(
      dlogits, daux, scores, c, tokens, static_cast<int>(experts));
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

}  // namespace traintwin::exec::cuda
