// Blockwise causal attention with log-sum-exp statistics; see block_attention.hpp.
#include "exec/cuda/block_attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "exec/cuda/common.cuh"
#include "exec/cuda/block_attention_params.cuh"
#include "exec/cuda/flash_attention_mma.cuh"
#include "exec/cuda/flash_attention_tc.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "block_attention";
constexpr const char* kMerge = "attention_merge";

constexpr int kWarps = 4;                       // warps per block
constexpr int kRowsPerWarp = 4;                 // query (or key) rows per warp
constexpr int kTileRows = kWarps * kRowsPerWarp;  // rows per block: 16
constexpr int kLanes = 32;                      // keys (or queries) streamed per tile
constexpr int kMergeWarps = 8;

__device__ __forceinline__ float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

// Forward: block (query tile of kTileRows rows, b * NH + h); warp w owns rows w * kRowsPerWarp..
// Shared memory: q tile [kTileRows][D + 1], k tile [32][D + 1] (padded: lane j reads row j),
// v tile [32][D].
template <int kDimsPerLane>
__global__ void __launch_bounds__(kWarps * 32)
    block_attention_forward_kernel(float* out, float* lse, const float* q, const float* kv,
                                   Params p) {
  extern __shared__ float smem[];
  const int64_t D = p.d, ld = D + 1;
  float* qs = smem;
  float* ks = qs + kTileRows * ld;
  float* vs = ks + kLanes * ld;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int64_t g = h / (p.heads / p.groups);
  const int64_t qrow = p.heads * D, kvrow = 2 * p.groups * D;
  const int64_t t0 = blockIdx.x * int64_t{kTileRows};
  const int64_t rows = min(int64_t{kTileRows}, p.seq_q - t0);
  for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x) {
    const int64_t r = e / D, c = e - r * D;
    qs[r * ld + c] = q[(b * p.seq_q + t0 + r) * qrow + h * D + c];
  }
  int64_t pos[kRowsPerWarp], visible[kRowsPerWarp];
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t row = t0 + warp * kRowsPerWarp + i;
    pos[i] = row < p.seq_q ? p.qpos.global(row) : -1;
    visible[i] = row < p.seq_q ? p.kpos.count_at_most(p.seq_k, pos[i]) : 0;
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int r = 0; r < kDimsPerLane; ++r) acc[i][r] = 0.0f;
  }
  // Positions increase with the local index: the tile's last row sees the most keys.
  const int64_t keys = p.kpos.count_at_most(p.seq_k, p.qpos.global(t0 + rows - 1));
  const float* kvb = kv + b * p.seq_k * kvrow;
  for (int64_t j0 = 0; j0 < keys; j0 += kLanes) {
    __syncthreads();  // the previous tile is consumed (and the q tile stored)
    const int64_t nk = min(int64_t{kLanes}, keys - j0);
    for (int64_t e = threadIdx.x; e < nk * D; e += blockDim.x) {
      const int64_t r = e / D, c = e - r * D;
      const float* src = kvb + (j0 + r) * kvrow;
      ks[r * ld + c] = src[g * D + c];
      vs[r * D + c] = src[(p.groups + g) * D + c];
    }
    __syncthreads();
    const int64_t j = j0 + lane;
    const int64_t key_pos = j < p.seq_k ? p.kpos.global(j) : 0;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if (j0 >= visible[i]) continue;  // warp-uniform
      const bool vis = j < visible[i];
      const float s =
          vis ? p.scale * dot(qs + (warp * kRowsPerWarp + i) * ld, ks + lane * ld, D) : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s));  // finite: the tile has a visible key
      const float corr = expf(m[i] - m_new);         // 0 for the first tile (m = -inf)
      const float e = vis ? expf(s - m_new) : 0.0f;
      l[i] = l[i] * corr + warp_sum(e);
      const float pz = vis ? e * p.mask.factor(b, h, pos[i], key_pos) : 0.0f;
#pragma unroll
      for (int r = 0; r < kDimsPerLane; ++r) acc[i][r] *= corr;
      const int64_t nj = min(int64_t{kLanes}, visible[i] - j0);
      for (int64_t jj = 0; jj < nj; ++jj) {
        const float w = __shfl_sync(kFullMask, pz, static_cast<int>(jj));
#pragma unroll
        for (int r = 0; r < kDimsPerLane; ++r) {
          const int64_t c = lane + 32 * r;
          if (c < D) acc[i][r] += w * vs[jj * D + c];
        }
      }
      m[i] = m_new;
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t row = t0 + warp * kRowsPerWarp + i;
    if (row >= p.seq_q) continue;
    float* o = out + (b * p.seq_q + row) * qrow + h * D;
    const bool any = visible[i] > 0;
    const float inv = any ? 1.0f / l[i] : 0.0f;
#pragma unroll
    for (int r = 0; r < kDimsPerLane; ++r) {
      const int64_t c = lane + 32 * r;
      if (c < D) o[c] = any ? acc[i][r] * inv : 0.0f;
    }
    if (lane == 0) lse[(b * p.heads + h) * p.seq_q + row] = any ? m[i] + logf(l[i]) : -INFINITY;
  }
}

// dsum[b, h, t] = dout[b, t, h] . out[b, t, h]: one warp per row (b, t, h) of D.
__global__ void row_dot_kernel(float* dsum, const float* dout, const float* out, int64_t batch,
                               int64_t seq, int64_t heads, int64_t d) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kMergeWarps} + threadIdx.x / 32;  // (b T + t) NH + h
  if (row >= batch * seq * heads) return;
  float s = 0.0f;
  for (int64_t c = lane; c < d; c += 32) s += dout[row * d + c] * out[row * d + c];
  s = warp_sum(s);
  const int64_t h = row % heads, bt = row / heads;
  const int64_t t = bt % seq, b = bt / seq;
  if (lane == 0) dsum[(b * heads + h) * seq + t] = s;
}

// dq: the forward's blocks and tiles; shared memory q and dout tiles [kTileRows][D + 1], k and v
// tiles [32][D + 1].
template <int kDimsPerLane>
__global__ void __launch_bounds__(kWarps * 32)
    block_attention_backward_dq_kernel(float* dq, const float* dout, const float* q,
                                       const float* kv, const float* lse, const float* dsum,
                                       Params p) {
  extern __shared__ float smem[];
  const int64_t D = p.d, ld = D + 1;
  float* qs = smem;
  float* dos = qs + kTileRows * ld;
  float* ks = dos + kTileRows * ld;
  float* vs = ks + kLanes * ld;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int64_t g = h / (p.heads / p.groups);
  const int64_t qrow = p.heads * D, kvrow = 2 * p.groups * D;
  const int64_t t0 = blockIdx.x * int64_t{kTileRows};
  const int64_t rows = min(int64_t{kTileRows}, p.seq_q - t0);
  for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x) {
    const int64_t r = e / D, c = e - r * D;
    const int64_t at = (b * p.seq_q + t0 + r) * qrow + h * D + c;
    qs[r * ld + c] = q[at];
    dos[r * ld + c] = dout[at];
  }
  int64_t pos[kRowsPerWarp], visible[kRowsPerWarp];
  float row_lse[kRowsPerWarp], row_dsum[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t row = t0 + warp * kRowsPerWarp + i;
    const int64_t stat = (b * p.heads + h) * p.seq_q + row;
    row_lse[i] = row < p.seq_q ? lse[stat] : -INFINITY;
    row_dsum[i] = row < p.seq_q ? dsum[stat] : 0.0f;
    pos[i] = row < p.seq_q ? p.qpos.global(row) : -1;
    visible[i] = row_lse[i] == -INFINITY ? 0 : p.kpos.count_at_most(p.seq_k, pos[i]);
#pragma unroll
    for (int r = 0; r < kDimsPerLane; ++r) acc[i][r] = 0.0f;
  }
  const int64_t keys = p.kpos.count_at_most(p.seq_k, p.qpos.global(t0 + rows - 1));
  const float* kvb = kv + b * p.seq_k * kvrow;
  for (int64_t j0 = 0; j0 < keys; j0 += kLanes) {
    __syncthreads();
    const int64_t nk = min(int64_t{kLanes}, keys - j0);
    for (int64_t e = threadIdx.x; e < nk * D; e += blockDim.x) {
      const int64_t r = e / D, c = e - r * D;
      const float* src = kvb + (j0 + r) * kvrow;
      ks[r * ld + c] = src[g * D + c];
      vs[r * ld + c] = src[(p.groups + g) * D + c];
    }
    __syncthreads();
    const int64_t j = j0 + lane;
    const int64_t key_pos = j < p.seq_k ? p.kpos.global(j) : 0;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if (j0 >= visible[i]) continue;  // warp-uniform
      float ds = 0.0f;
      if (j < visible[i]) {
        const int64_t r = warp * kRowsPerWarp + i;
        const float pj = expf(p.scale * dot(qs + r * ld, ks + lane * ld, D) - row_lse[i]);
        const float dp = dot(dos + r * ld, vs + lane * ld, D) *
                         p.mask.factor(b, h, pos[i], key_pos);
        ds = pj * (dp - row_dsum[i]) * p.scale;
      }
      const int64_t nj = min(int64_t{kLanes}, visible[i] - j0);
      for (int64_t jj = 0; jj < nj; ++jj) {
        const float w = __shfl_sync(kFullMask, ds, static_cast<int>(jj));
#pragma unroll
        for (int r = 0; r < kDimsPerLane; ++r) {
          const int64_t c = lane + 32 * r;
          if (c < D) acc[i][r] += w * ks[jj * ld + c];
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t row = t0 + warp * kRowsPerWarp + i;
    if (row >= p.seq_q || visible[i] == 0) continue;
    float* o = dq + (b * p.seq_q + row) * qrow + h * D;
#pragma unroll
    for (int r = 0; r < kDimsPerLane; ++r) {
      const int64_t c = lane + 32 * r;
      if (c < D) o[c] += acc[i][r];
    }
  }
}

// dk, dv: block (key tile of kTileRows keys, b * G + g); warp w owns keys w * kRowsPerWarp..;
// the query rows of the group's NH / G heads that see the tile's first key stream through
// shared memory 32 at a time (lane t owns query t of the tile for the scores). Shared memory:
// k and v tiles [kTileRows][D + 1], q and dout tiles [32][D + 1].
template <int kDimsPerLane>
__global__ void __launch_bounds__(kWarps * 32)
    block_attention_backward_dkv_kernel(float* dkv, const float* dout, const float* q,
                                        const float* kv, const float* lse, const float* dsum,
                                        Params p) {
  extern __shared__ float smem[];
  const int64_t D = p.d, ld = D + 1;
  float* ks = smem;
  float* vs = ks + kTileRows * ld;
  float* qs = vs + kTileRows * ld;
  float* dos = qs + kLanes * ld;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y / p.groups, g = blockIdx.y % p.groups;
  const int64_t per_group = p.heads / p.groups;
  const int64_t qrow = p.heads * D, kvrow = 2 * p.groups * D;
  const int64_t k0 = blockIdx.x * int64_t{kTileRows};
  const int64_t nkeys = min(int64_t{kTileRows}, p.seq_k - k0);
  for (int64_t e = threadIdx.x; e < nkeys * D; e += blockDim.x) {
    const int64_t r = e / D, c = e - r * D;
    const float* src = kv + (b * p.seq_k + k0 + r) * kvrow;
    ks[r * ld + c] = src[g * D + c];
    vs[r * ld + c] = src[(p.groups + g) * D + c];
  }
  int64_t key_pos[kRowsPerWarp];
  float dk[kRowsPerWarp][kDimsPerLane], dv[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t key = k0 + warp * kRowsPerWarp + i;
    key_pos[i] = key < p.seq_k ? p.kpos.global(key) : -1;
#pragma unroll
    for (int r = 0; r < kDimsPerLane; ++r) dk[i][r] = dv[i][r] = 0.0f;
  }
  // The first query row that sees the tile's first (earliest) key.
  const int64_t first = p.qpos.count_below(p.seq_q, p.kpos.global(k0));
  for (int64_t hh = 0; hh < per_group; ++hh) {
    const int64_t h = g * per_group + hh;
    for (int64_t t0 = first; t0 < p.seq_q; t0 += kLanes) {
      const int64_t nq = min(int64_t{kLanes}, p.seq_q - t0);
      __syncthreads();  // the previous tile is consumed (and the k, v tiles stored)
      for (int64_t e = threadIdx.x; e < nq * D; e += blockDim.x) {
        const int64_t r = e / D, c = e - r * D;
        const int64_t at = (b * p.seq_q + t0 + r) * qrow + h * D + c;
        qs[r * ld + c] = q[at];
        dos[r * ld + c] = dout[at];
      }
      __syncthreads();
      const int64_t t = t0 + lane;
      const bool query = t < p.seq_q;
      const int64_t stat = (b * p.heads + h) * p.seq_q + t;
      const float row_lse = query ? lse[stat] : -INFINITY;
      const float row_dsum = query ? dsum[stat] : 0.0f;
      const int64_t qpos = query ? p.qpos.global(t) : -1;
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        if (key_pos[i] < 0) continue;  // warp-uniform: past the last key
        const bool vis = row_lse != -INFINITY && key_pos[i] <= qpos;
        if (!__any_sync(kFullMask, vis)) continue;
        float ds = 0.0f, pz = 0.0f;
        if (vis) {
          const int64_t r = warp * kRowsPerWarp + i;
          const float pj = expf(p.scale * dot(qs + lane * ld, ks + r * ld, D) - row_lse);
          const float z = p.mask.factor(b, h, qpos, key_pos[i]);
          const float dp = dot(dos + lane * ld, vs + r * ld, D) * z;
          ds = pj * (dp - row_dsum) * p.scale;
          pz = pj * z;
        }
        for (int64_t tt = 0; tt < nq; ++tt) {
          const float wk = __shfl_sync(kFullMask, ds, static_cast<int>(tt));
          const float wv = __shfl_sync(kFullMask, pz, static_cast<int>(tt));
#pragma unroll
          for (int r = 0; r < kDimsPerLane; ++r) {
            const int64_t c = lane + 32 * r;
            if (c < D) {
              dk[i][r] += wk * qs[tt * ld + c];
              dv[i][r] += wv * dos[tt * ld + c];
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    if (key_pos[i] < 0) continue;
    float* dst = dkv + (b * p.seq_k + k0 + warp * kRowsPerWarp + i) * kvrow;
#pragma unroll
    for (int r = 0; r < kDimsPerLane; ++r) {
      const int64_t c = lane + 32 * r;
      if (c < D) {
        dst[g * D + c] += dk[i][r];
        dst[(p.groups + g) * D + c] += dv[i][r];
      }
    }
  }
}

// One warp per row (b, h, t) of lse: every lane reads both lse before lane 0 rewrites them.
__global__ void attention_merge_kernel(float* out, float* lse, const float* block_out,
                                       const float* block_lse, int64_t batch, int64_t seq,
                                       int64_t heads, int64_t d) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kMergeWarps} + threadIdx.x / 32;  // (b NH + h) T + t
  if (row >= batch * heads * seq) return;
  const float l1 = lse[row], l2 = block_lse[row];
  const float m = fmaxf(l1, l2);
  if (m == -INFINITY) return;  // neither block sees a key
  const float l = m + logf(expf(l1 - m) + expf(l2 - m));
  const float w1 = expf(l1 - l), w2 = expf(l2 - l);
  const int64_t t = row % seq, bh = row / seq;
  const int64_t h = bh % heads, b = bh / heads;
  const int64_t at = ((b * seq + t) * heads + h) * d;
  for (int64_t c = lane; c < d; c += 32) out[at + c] = w1 * out[at + c] + w2 * block_out[at + c];
  __syncwarp();
  if (lane == 0) lse[row] = l;
}

/// Calls fn(std::integral_constant<int, N>{}) with N the fewest channels per lane (1, 2, 4, 8)
/// that cover head_dim (at most 256, checked by make_params).
template <typename Fn>
void dispatch_dims(int64_t head_dim, Fn&& fn) {
  const int64_t per_lane = (head_dim + 31) / 32;
  if (per_lane <= 1) {
    fn(std::integral_constant<int, 1>{});
  } else if (per_lane <= 2) {
    fn(std::integral_constant<int, 2>{});
  } else if (per_lane <= 4) {
    fn(std::integral_constant<int, 4>{});
  } else {
    fn(std::integral_constant<int, 8>{});
  }
}

unsigned tiles(int64_t n) { return tiles_of(n, kTileRows); }

}  // namespace

namespace detail {

Params make_params(const CpSequence& q_positions, const CpSequence& k_positions,
                   const cpu::BlockAttentionShape& s,
                   const cpu::AttentionProbabilityDropout* dropout) {
  require_positive(kLayer, s.batch, "batch");
  require_positive(kLayer, s.seq_q, "seq_q");
  require_positive(kLayer, s.seq_k, "seq_k");
  require_positive(kLayer, s.heads, "heads");
  require_positive(kLayer, s.groups, "groups");
  require_positive(kLayer, s.head_dim, "head_dim");
  if (s.heads % s.groups != 0) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": groups " + std::to_string(s.groups) +
                          " must divide heads " + std::to_string(s.heads));
  }
  if (s.head_dim > kBlockAttentionMaxHeadDim) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": head_dim " +
                          std::to_string(s.head_dim) + " is above the kernels' " +
                          std::to_string(kBlockAttentionMaxHeadDim));
  }
  if (s.seq_q != q_positions.local() || s.seq_k != k_positions.local()) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": seq_q " + std::to_string(s.seq_q) +
                          " and seq_k " + std::to_string(s.seq_k) +
                          " must be the local positions of q_positions (" +
                          std::to_string(q_positions.local()) + ") and k_positions (" +
                          std::to_string(k_positions.local()) + ")");
  }
  if (s.batch * s.heads > 65535) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": batch * heads " +
                          std::to_string(s.batch * s.heads) + " is above the grid's 65535");
  }
  require_product_fits(kLayer, s.batch * s.seq_q, s.heads * s.head_dim, "q elements");
  require_product_fits(kLayer, s.batch * s.seq_k, 2 * s.groups * s.head_dim, "kv elements");
  Params p{s.batch, s.seq_q, s.seq_k, s.heads, s.groups, s.head_dim,
           1.0f / std::sqrt(static_cast<float>(s.head_dim)), CpPositions::of(q_positions),
           CpPositions::of(k_positions), AttentionMask{}};
  if (dropout == nullptr) return p;
  const double prob = dropout->params.p;
  if (!(prob >= 0 && prob < 1)) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": dropout p must be in [0, 1), got " +
                          std::to_string(prob));
  }
  if (prob == 0) return p;
  const cpu::AttentionBlock& k = dropout->block;
  const int64_t end =
      std::max(q_positions.global(s.seq_q - 1), k_positions.global(s.seq_k - 1)) + 1;
  if (k.seq < end) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": position " + std::to_string(end - 1) +
                          " is outside the dropout block's " + std::to_string(k.seq) +
                          " positions");
  }
  if (k.batch != s.batch || k.heads != s.heads || k.first_sample < 0 || k.head_offset < 0 ||
      k.head_offset + s.heads > k.heads_total) {
    throw InvalidArgument(std::string("cuda ") + kLayer +
                          ": the dropout block does not match the call (batch " +
                          std::to_string(s.batch) + ", heads " + std::to_string(s.heads) +
                          ", seq " + std::to_string(k.seq) + ")");
  }
  require_product_fits(kLayer, (k.first_sample + k.batch) * k.heads_total, k.seq * k.seq,
                       "global dropout index");
  p.mask = AttentionMask{true,
                         dropout->params.seed,
                         dropout->params.stream,
                         dropout_keep_threshold(prob),
                         static_cast<float>(1.0 / (1.0 - prob)),
                         k.first_sample,
                         k.heads_total,
                         k.head_offset,
                         k.seq};
  return p;
}

}  // namespace detail

void block_attention_forward(float* out, float* lse, const float* q, const float* kv,
                             const CpSequence& q_positions, const CpSequence& k_positions,
                             const cpu::BlockAttentionShape& shape,
                             const cpu::AttentionProbabilityDropout* dropout,
                             Float32MatmulPrecision precision, cudaStream_t stream) {
  const Params p = make_params(q_positions, k_positions, shape, dropout);
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, lse, "lse");
  require_pointer(kLayer, q, "q");
  require_pointer(kLayer, kv, "kv");
  if (mma_attention_applies(p, precision, {out, q, kv})) {
    mma_attention_forward(out, lse, q, kv, p, stream);
    return;
  }
  if (tensor_core_attention_applies(p, precision, {out, q, kv})) {
    tensor_core_attention_forward(out, lse, q, kv, p, precision, stream);
    return;
  }
  const int64_t ld = p.d + 1;
  const auto smem = static_cast<size_t>((kTileRows * ld + kLanes * ld + kLanes * p.d)) *
                    sizeof(float);
  const dim3 grid(tiles(p.seq_q), static_cast<unsigned>(p.batch * p.heads));
  dispatch_dims(p.d, [&](auto dims) {
    launch_blocks(block_attention_forward_kernel<decltype(dims)::value>, grid, kWarps * 32, smem,
                  stream, out, lse, q, kv, p);
  });
}

void attention_merge(float* out, float* lse, const float* block_out, const float* block_lse,
                     int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                     cudaStream_t stream) {
  require_positive(kMerge, batch, "batch");
  require_positive(kMerge, seq, "seq");
  require_positive(kMerge, heads, "heads");
  require_positive(kMerge, head_dim, "head_dim");
  require_product_fits(kMerge, batch * seq, heads * head_dim, "batch * seq * heads * head_dim");
  require_pointer(kMerge, out, "out");
  require_pointer(kMerge, lse, "lse");
  require_pointer(kMerge, block_out, "block_out");
  require_pointer(kMerge, block_lse, "block_lse");
  const int64_t rows = batch * heads * seq;
  attention_merge_kernel<<<static_cast<unsigned>((rows + kMergeWarps - 1) / kMergeWarps),
                           32 * kMergeWarps, 0, stream>>>(out, lse, block_out, block_lse, batch,
                                                          seq, heads, head_dim);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

size_t block_attention_backward_workspace_bytes(const cpu::BlockAttentionShape& shape) {
  return static_cast<size_t>(std::max<int64_t>(shape.batch * shape.heads * shape.seq_q, 1)) *
         sizeof(float);
}

void block_attention_backward(float* dq, float* dkv, const float* dout, const float* q,
                              const float* kv, const float* out, const float* lse,
                              const CpSequence& q_positions, const CpSequence& k_positions,
                              const cpu::BlockAttentionShape& shape,
                              const cpu::AttentionProbabilityDropout* dropout, void* workspace,
                              size_t workspace_bytes, Float32MatmulPrecision precision,
                              cudaStream_t stream) {
  const Params p = make_params(q_positions, k_positions, shape, dropout);
  require_pointer(kLayer, dq, "dq");
  require_pointer(kLayer, dkv, "dkv");
  require_pointer(kLayer, dout, "dout");
  require_pointer(kLayer, q, "q");
  require_pointer(kLayer, kv, "kv");
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, lse, "lse");
  require_pointer(kLayer, workspace, "workspace");
  const size_t needed = block_attention_backward_workspace_bytes(shape);
  if (workspace_bytes < needed) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": workspace has " +
                          std::to_string(workspace_bytes) + " bytes, needs " +
                          std::to_string(needed) + " (block_attention_backward_workspace_bytes)");
  }
  if (p.batch * p.groups > 65535) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": batch * groups is above 65535");
  }
  float* dsum = static_cast<float*>(workspace);
  const int64_t rows = p.batch * p.seq_q * p.heads;
  row_dot_kernel<<<static_cast<unsigned>((rows + kMergeWarps - 1) / kMergeWarps),
                   32 * kMergeWarps, 0, stream>>>(dsum, dout, out, p.batch, p.seq_q, p.heads,
                                                  p.d);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
  if (mma_attention_applies(p, precision, {dq, dkv, dout, q, kv})) {
    mma_attention_backward(dq, dkv, dout, q, kv, lse, dsum, p, stream);
    return;
  }
  if (tensor_core_attention_applies(p, precision, {dq, dkv, dout, q, kv})) {
    tensor_core_attention_backward(dq, dkv, dout, q, kv, lse, dsum, p, precision, stream);
    return;
  }
  const int64_t ld = p.d + 1;
  const auto smem = static_cast<size_t>(2 * (kTileRows + kLanes) * ld) * sizeof(float);
  dispatch_dims(p.d, [&](auto dims) {
    constexpr int kDims = decltype(dims)::value;
    launch_blocks(block_attention_backward_dq_kernel<kDims>,
                  dim3(tiles(p.seq_q), static_cast<unsigned>(p.batch * p.heads)), kWarps * 32, smem,
                  stream, dq, dout, q, kv, lse, static_cast<const float*>(dsum), p);
    launch_blocks(block_attention_backward_dkv_kernel<kDims>,
                  dim3(tiles(p.seq_k), static_cast<unsigned>(p.batch * p.groups)), kWarps * 32,
                  smem, stream, dkv, dout, q, kv, lse, static_cast<const float*>(dsum), p);
  });
}

}  // namespace traintwin::exec::cuda
