// Blockwise causal attention on the tensor cores (FlashAttention-2 tiles through WMMA); see
// flash_attention_tc.cuh. The softmax runs in base 2 (exp2 of s log2(e), as FlashAttention-2's
// kernels): lse2 = lse log2(e).
#include <cuda_bf16.h>
#include <mma.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "exec/cuda/common.cuh"
#include "exec/cuda/flash_attention_tc.cuh"

namespace traintwin::exec::cuda::detail {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * 32;
constexpr int kRows = 16;                // rows (queries, or keys in dk/dv) per warp
constexpr int kTile = kTcWarps * kRows;  // 64 rows per block; 64 keys (or queries) per step
constexpr int kScratchLd = kTile + 4;    // a warp's fp32 scratch: [16][68]
constexpr int kPad = 8;                  // operand rows of D + 8 and 64 + 8 elements
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// Leading dimension of a warp's operand P (or dS) [16][ld] of T: 72 bf16 (WMMA wants a multiple
/// of 8 for 16-bit types), 68 floats (so that it fits the fp32 scratch it aliases).
template <typename T>
constexpr int kOpLd = std::is_same_v<T, float> ? kScratchLd : kTile + kPad;

/// The WMMA shape of an operand type: bf16 m16n16k16; TF32 m16n16k8 (operands kept as float in
/// shared memory and rounded to TF32 when loaded into a fragment).
template <typename T>
struct Mma;
template <>
struct Mma<__nv_bfloat16> {
  using Elem = __nv_bfloat16;
  static constexpr int kK = 16;
};
template <>
struct Mma<float> {
  using Elem = wmma::precision::tf32;
  static constexpr int kK = 8;
};

template <typename T>
using FragA =
    wmma::fragment<wmma::matrix_a, 16, 16, Mma<T>::kK, typename Mma<T>::Elem, wmma::row_major>;
template <typename T, typename Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, Mma<T>::kK, typename Mma<T>::Elem, Layout>;
template <typename T>
using FragC = wmma::fragment<wmma::accumulator, 16, 16, Mma<T>::kK, float>;

template <typename T, typename Frag>
__device__ __forceinline__ void round_operand(Frag& f) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = wmma::__float_to_tf32(f.x[i]);
  }
}

template <typename T, int kN>
__device__ __forceinline__ void zero(FragC<T> (&acc)[kN]) {
#pragma unroll
  for (int n = 0; n < kN; ++n) wmma::fill_fragment(acc[n], 0.0f);
}

/// One warp: acc[n] += A [16 x kDepth] (row-major, leading dimension lda) times the columns
/// 16 n .. 16 n + 15 of B [kDepth x 16 kN]; B row-major (element (k, n) at b[k ldb + n]) or
/// col-major (at b[n ldb + k]: the rows of b are B's columns).
template <typename T, int kN, int kDepth, typename LayoutB>
__device__ __forceinline__ void warp_mma(FragC<T> (&acc)[kN], const T* a, int lda, const T* b,
                                         int ldb) {
  constexpr int kK = Mma<T>::kK;
  constexpr bool kRowMajorB = std::is_same_v<LayoutB, wmma::row_major>;
#pragma unroll 1
  for (int k = 0; k < kDepth; k += kK) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, a + k, lda);
    round_operand<T>(fa);
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      FragB<T, LayoutB> fb;
      wmma::load_matrix_sync(fb, kRowMajorB ? b + k * ldb + n * 16 : b + n * 16 * ldb + k, ldb);
      round_operand<T>(fb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

/// One warp: acc[n] += A times the columns 16 n .. 16 n + 15 of B col-major (element (k, n) at
/// b[n ldb + k]), A [16 x kDepth] held in fragments (a[k / kK]: its columns k .. k + kK - 1).
template <typename T, int kN, int kDepth>
__device__ __forceinline__ void warp_mma_a(FragC<T> (&acc)[kN],
                                           const FragA<T> (&a)[kDepth / Mma<T>::kK], const T* b,
                                           int ldb) {
  constexpr int kK = Mma<T>::kK;
#pragma unroll
  for (int k = 0; k < kDepth; k += kK) {
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      FragB<T, wmma::col_major> fb;
      wmma::load_matrix_sync(fb, b + n * 16 * ldb + k, ldb);
      round_operand<T>(fb);
      wmma::mma_sync(acc[n], a[k / kK], fb, acc[n]);
    }
  }
}

/// dst [kTile][D + kPad] <- `rows` rows of D floats from src (row stride `stride` floats),
/// converted to T; the rows past `rows` are zero. float4 loads (src 16-byte aligned, D % 4 == 0),
/// issued 8 at a time before their stores so that a tile costs two memory round trips, not 16.
template <typename T, int D>
__device__ __forceinline__ void load_tile(T* dst, const float* src, int64_t rows, int64_t stride) {
  constexpr int kLd = D + kPad, kVec = D / 4;
  constexpr int kIters = kTile * kVec / kTcThreads;  // 16 (D 128) or 8 (D 64)
  constexpr int kBatch = kIters < 8 ? kIters : 8;
#pragma unroll
  for (int i0 = 0; i0 < kIters; i0 += kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int e = threadIdx.x + (i0 + i) * kTcThreads;
      const int r = e / kVec, c = (e - r * kVec) * 4;
      v[i] = r < rows ? *reinterpret_cast<const float4*>(src + r * stride + c)
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int e = threadIdx.x + (i0 + i) * kTcThreads;
      const int r = e / kVec, c = (e - r * kVec) * 4;
      if constexpr (std::is_same_v<T, float>) {
        *reinterpret_cast<float4*>(dst + r * kLd + c) = v[i];
      } else {
        auto* d = reinterpret_cast<__nv_bfloat162*>(dst + r * kLd + c);
        d[0] = __floats2bfloat162_rn(v[i].x, v[i].y);
        d[1] = __floats2bfloat162_rn(v[i].z, v[i].w);
      }
    }
  }
}

/// One warp writes (or adds, kAccumulate) its 16 x D fragments to rows of dst (row stride
/// `stride` floats; `rows` of them valid) through its scratch, 64 columns at a time.
template <typename T, int D, bool kAccumulate>
__device__ __forceinline__ void store_rows(float* dst, int64_t stride, int64_t rows,
                                           FragC<T> (&acc)[D / 16], float* scratch) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c0 = 0; c0 < D; c0 += kTile) {
    __syncwarp();
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::store_matrix_sync(scratch + n * 16, acc[c0 / 16 + n], kScratchLd, wmma::mem_row_major);
    }
    __syncwarp();
    for (int64_t r = 0; r < rows; ++r) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int c = half * 32 + lane;
        float* o = dst + r * stride + c0 + c;
        if constexpr (kAccumulate) {
          *o += scratch[r * kScratchLd + c];
        } else {
          *o = scratch[r * kScratchLd + c];
        }
      }
    }
  }
  __syncwarp();
}

/// The warp's fp32 tile `src` [16][68] as a WMMA operand of T: `src` itself for TF32 (rounded
/// when loaded into fragments), else converted into `op` [16][kOpLd<T>] (another region).
template <typename T>
__device__ __forceinline__ const T* as_operand(float* src, T* op) {
  __syncwarp();
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        op[r * kOpLd<T> + half * 32 + lane] = from_float<T>(src[r * kScratchLd + half * 32 + lane]);
      }
    }
    __syncwarp();
    return op;
  }
}

// Shared memory of a kernel: `operands` tiles [64][D + 8] of T, `scratches` fp32 scratch tiles
// per warp [16][68] (a warp's operand P or dS aliases its last one), `stats` floats per row of a
// tile.
template <typename T, int D>
constexpr size_t smem_bytes(int operands, int scratches, int stats) {
  return static_cast<size_t>(operands) * kTile * (D + kPad) * sizeof(T) +
         static_cast<size_t>(scratches) * kTcWarps * kRows * kScratchLd * sizeof(float) +
         static_cast<size_t>(stats) * kTile * sizeof(float);
}

/// Pointers into a kernel's shared memory (smem_bytes' layout).
template <typename T, int D>
struct Smem {
  T* tile[4];
  float* scratch[2];  // this warp's [16][68] each
  T* op;              // this warp's [16][kOpLd<T>], over scratch[scratches - 1]
  float* stats;       // [stats][64]

  __device__ Smem(unsigned char* base, int operands, int scratches) {
    static_assert(kRows * kOpLd<T> * sizeof(T) <= kRows * kScratchLd * sizeof(float));
    constexpr int kLd = D + kPad;
    T* t = reinterpret_cast<T*>(base);
    for (int i = 0; i < 4; ++i) tile[i] = t + (i < operands ? i : 0) * kTile * kLd;
    float* all_scratch = reinterpret_cast<float*>(t + operands * kTile * kLd);
    const int warp = threadIdx.x / 32;
    for (int i = 0; i < 2; ++i) {
      scratch[i] = all_scratch + ((i < scratches ? i : 0) * kTcWarps + warp) * kRows * kScratchLd;
    }
    op = reinterpret_cast<T*>(scratch[scratches - 1]);
    stats = all_scratch + scratches * kTcWarps * kRows * kScratchLd;
  }
};

// ---- forward ---------------------------------------------------------------------------------
// Block (query tile of 64 rows, b NH + h), heaviest tiles first; warp w owns rows 16 w ... Lane
// elements of the warp's 16 x 64 score tile: row r, columns lane and 32 + lane.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads)
    tc_forward_kernel(float* out, float* lse, const float* q, const float* kv, Params p) {
  constexpr int kLd = D + kPad, kPld = kOpLd<T>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const Smem<T, D> sm(smem_raw, 2, 2);
  T* ks = sm.tile[0];
  T* vs = sm.tile[1];
  float* row_lse2 = sm.stats;  // [64], base 2
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int64_t g = h / (p.heads / p.groups);
  const int64_t qrow = p.heads * D, kvrow = 2 * p.groups * D;
  const int64_t t0 = (gridDim.x - 1 - blockIdx.x) * int64_t{kTile};
  const int64_t rows = min(int64_t{kTile}, p.seq_q - t0);
  // The warp's 16 query rows as A fragments, staged through the V tile (unused by pass 1).
  load_tile<T, D>(vs, q + (b * p.seq_q + t0) * qrow + h * D, rows, qrow);
  __syncthreads();
  FragA<T> qf[D / Mma<T>::kK];
#pragma unroll
  for (int k = 0; k < D / Mma<T>::kK; ++k) {
    wmma::load_matrix_sync(qf[k], vs + warp * kRows * kLd + k * Mma<T>::kK, kLd);
    round_operand<T>(qf[k]);
  }
  const int64_t w0 = t0 + warp * kRows;
  const int64_t wrows = max(int64_t{0}, min(int64_t{kRows}, p.seq_q - w0));
  // Positions increase with the local index: a tile's last row sees the most keys.
  const int64_t warp_keys =
      wrows > 0 ? p.kpos.count_at_most(p.seq_k, p.qpos.global(w0 + wrows - 1)) : 0;
  const int64_t keys = p.kpos.count_at_most(p.seq_k, p.qpos.global(t0 + rows - 1));
  const float* kvb = kv + b * p.seq_k * kvrow;
  const float scale2 = p.scale * kLog2e;
  int qp[kRows];  // global positions (below 2^31: tensor_core_attention_applies)
#pragma unroll
  for (int r = 0; r < kRows; ++r) qp[r] = r < wrows ? static_cast<int>(p.qpos.global(w0 + r)) : -1;

  // Pass 1: each row's max m and sum l of exp2(s - m), per lane over its two columns.
  float m[kRows], l[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed
    load_tile<T, D>(ks, kvb + j0 * kvrow + g * D, min(int64_t{kTile}, p.seq_k - j0), kvrow);
    __syncthreads();
    if (j0 >= warp_keys) continue;  // warp-uniform
    FragC<T> acc[kTile / 16];
    zero<T>(acc);
    warp_mma_a<T, kTile / 16, D>(acc, qf, ks, kLd);
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::store_matrix_sync(sm.scratch[0] + n * 16, acc[n], kScratchLd, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t j = j0 + half * 32 + lane;
      const int kp = j < p.seq_k ? static_cast<int>(p.kpos.global(j)) : INT_MAX;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (kp <= qp[r]) {
          const float s = sm.scratch[0][r * kScratchLd + half * 32 + lane] * scale2;
          if (s > m[r]) {
            l[r] = l[r] * exp2f(m[r] - s) + 1.0f;
            m[r] = s;
          } else {
            l[r] += exp2f(s - m[r]);
          }
        }
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float mx = warp_max(m[r]);
    const float sum = warp_sum(m[r] == -INFINITY ? 0.0f : l[r] * exp2f(m[r] - mx));
    const float lse2 = mx == -INFINITY ? -INFINITY : mx + log2f(sum);
    if (lane == 0) {
      row_lse2[warp * kRows + r] = lse2;
      if (r < wrows) lse[(b * p.heads + h) * p.seq_q + w0 + r] = lse2 * kLn2;  // -inf stays
    }
  }
  __syncwarp();

  // Pass 2: out = sum_j z_j P_j v_j with P_j = exp2(s_j - lse2) final.
  FragC<T> o[D / 16];
  zero<T>(o);
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    const int64_t nk = min(int64_t{kTile}, p.seq_k - j0);
    load_tile<T, D>(ks, kvb + j0 * kvrow + g * D, nk, kvrow);
    load_tile<T, D>(vs, kvb + j0 * kvrow + (p.groups + g) * D, nk, kvrow);
    __syncthreads();
    if (j0 >= warp_keys) continue;
    FragC<T> acc[kTile / 16];
    zero<T>(acc);
    warp_mma_a<T, kTile / 16, D>(acc, qf, ks, kLd);
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::store_matrix_sync(sm.scratch[0] + n * 16, acc[n], kScratchLd, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = half * 32 + lane;
      const int64_t j = j0 + c;
      const int kp = j < p.seq_k ? static_cast<int>(p.kpos.global(j)) : INT_MAX;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float& e = sm.scratch[0][r * kScratchLd + c];  // S, then z P in place
        e = kp <= qp[r]
                ? exp2f(e * scale2 - row_lse2[warp * kRows + r]) * p.mask.factor(b, h, qp[r], kp)
                : 0.0f;
      }
    }
    const T* pz = as_operand<T>(sm.scratch[0], sm.op);
    warp_mma<T, D / 16, kTile, wmma::row_major>(o, pz, kPld, vs, kLd);
  }
  store_rows<T, D, false>(out + (b * p.seq_q + w0) * qrow + h * D, qrow, wrows, o, sm.scratch[0]);
}

// ---- backward: dq ----------------------------------------------------------------------------
// The forward's blocks and warps; per key tile: S and P again, dP = dO V^T, dS = P (z dP - dsum)
// scale, dq += dS K.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads)
    tc_backward_dq_kernel(float* dq, const float* dout, const float* q, const float* kv,
                          const float* lse, const float* dsum, Params p) {
  constexpr int kLd = D + kPad, kPld = kOpLd<T>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const Smem<T, D> sm(smem_raw, 4, 2);
  T* qs = sm.tile[0];
  T* dos = sm.tile[1];
  T* ks = sm.tile[2];
  T* vs = sm.tile[3];
  float* row_lse2 = sm.stats;
  float* row_dsum = sm.stats + kTile;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int64_t g = h / (p.heads / p.groups);
  const int64_t qrow = p.heads * D, kvrow = 2 * p.groups * D;
  const int64_t t0 = (gridDim.x - 1 - blockIdx.x) * int64_t{kTile};
  const int64_t rows = min(int64_t{kTile}, p.seq_q - t0);
  const int64_t at = (b * p.seq_q + t0) * qrow + h * D;
  load_tile<T, D>(qs, q + at, rows, qrow);
  load_tile<T, D>(dos, dout + at, rows, qrow);
  for (int r = threadIdx.x; r < kTile; r += kTcThreads) {
    const int64_t stat = (b * p.heads + h) * p.seq_q + t0 + r;
    row_lse2[r] = r < rows ? lse[stat] * kLog2e : -INFINITY;
    row_dsum[r] = r < rows ? dsum[stat] : 0.0f;
  }
  const int64_t w0 = t0 + warp * kRows;
  const int64_t wrows = max(int64_t{0}, min(int64_t{kRows}, p.seq_q - w0));
  const int64_t warp_keys =
      wrows > 0 ? p.kpos.count_at_most(p.seq_k, p.qpos.global(w0 + wrows - 1)) : 0;
  const int64_t keys = p.kpos.count_at_most(p.seq_k, p.qpos.global(t0 + rows - 1));
  const float* kvb = kv + b * p.seq_k * kvrow;
  const float scale2 = p.scale * kLog2e;
  int qp[kRows];  // global positions (below 2^31: tensor_core_attention_applies)
#pragma unroll
  for (int r = 0; r < kRows; ++r) qp[r] = r < wrows ? static_cast<int>(p.qpos.global(w0 + r)) : -1;

  FragC<T> dq_acc[D / 16];
  zero<T>(dq_acc);
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    const int64_t nk = min(int64_t{kTile}, p.seq_k - j0);
    load_tile<T, D>(ks, kvb + j0 * kvrow + g * D, nk, kvrow);
    load_tile<T, D>(vs, kvb + j0 * kvrow + (p.groups + g) * D, nk, kvrow);
    __syncthreads();
    if (j0 >= warp_keys) continue;
    FragC<T> acc[kTile / 16];
    zero<T>(acc);
    warp_mma<T, kTile / 16, D, wmma::col_major>(acc, qs + warp * kRows * kLd, kLd, ks, kLd);
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::store_matrix_sync(sm.scratch[0] + n * 16, acc[n], kScratchLd, wmma::mem_row_major);
    }
    __syncwarp();
    zero<T>(acc);
    warp_mma<T, kTile / 16, D, wmma::col_major>(acc, dos + warp * kRows * kLd, kLd, vs, kLd);
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::store_matrix_sync(sm.scratch[1] + n * 16, acc[n], kScratchLd, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = half * 32 + lane;
      const int64_t j = j0 + c;
      const int kp = j < p.seq_k ? static_cast<int>(p.kpos.global(j)) : INT_MAX;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float& e = sm.scratch[0][r * kScratchLd + c];  // S, then dS in place
        float ds = 0.0f;
        if (kp <= qp[r]) {
          const float pr = exp2f(e * scale2 - row_lse2[warp * kRows + r]);
          const float dp = sm.scratch[1][r * kScratchLd + c] * p.mask.factor(b, h, qp[r], kp);
          ds = pr * (dp - row_dsum[warp * kRows + r]) * p.scale;
        }
        e = ds;
      }
    }
    const T* ds = as_operand<T>(sm.scratch[0], sm.op);  // bf16: over dP
    warp_mma<T, D / 16, kTile, wmma::row_major>(dq_acc, ds, kPld, ks, kLd);
  }
  store_rows<T, D, true>(dq + (b * p.seq_q + w0) * qrow + h * D, qrow, wrows, dq_acc,
                         sm.scratch[0]);
}

// ---- backward: dk, dv ------------------------------------------------------------------------
// Block (key tile of 64 keys, b G + g); warp w owns keys 16 w ..; the query rows of the group's
// NH / G heads that see the tile's first key stream through shared memory 64 at a time. Lane
// elements of the warp's 16 x 64 transposed tiles (keys x queries): key r, queries lane and
// 32 + lane. dv += (z P)^T dO, dS^T = P^T (z dP^T - dsum) scale with dP^T = V dO^T, dk += dS^T Q.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads)
    tc_backward_dkv_kernel(float* dkv, const float* dout, const float* q, const float* kv,
                           const float* lse, const float* dsum, Params p) {
  constexpr int kLd = D + kPad, kPld = kOpLd<T>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const Smem<T, D> sm(smem_raw, 4, 2);
  T* ks = sm.tile[0];
  T* vs = sm.tile[1];
  T* qs = sm.tile[2];
  T* dos = sm.tile[3];
  float* col_lse2 = sm.stats;
  float* col_dsum = sm.stats + kTile;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.y / p.groups, g = blockIdx.y % p.groups;
  const int64_t per_group = p.heads / p.groups;
  const int64_t qrow = p.heads * D, kvrow = 2 * p.groups * D;
  const int64_t k0 = blockIdx.x * int64_t{kTile};
  const int64_t nkeys = min(int64_t{kTile}, p.seq_k - k0);
  const float* kvt = kv + (b * p.seq_k + k0) * kvrow;
  load_tile<T, D>(ks, kvt + g * D, nkeys, kvrow);
  load_tile<T, D>(vs, kvt + (p.groups + g) * D, nkeys, kvrow);
  const int64_t wk0 = k0 + warp * kRows;
  const int64_t wkeys = max(int64_t{0}, min(int64_t{kRows}, p.seq_k - wk0));
  const int64_t first_key_pos = wkeys > 0 ? p.kpos.global(wk0) : INT64_MAX;
  const float scale2 = p.scale * kLog2e;
  int kp[kRows];  // global positions (below 2^31: tensor_core_attention_applies)
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    kp[r] = r < wkeys ? static_cast<int>(p.kpos.global(wk0 + r)) : INT_MAX;

  FragC<T> dk_acc[D / 16], dv_acc[D / 16];
  zero<T>(dk_acc);
  zero<T>(dv_acc);
  // The first query row that sees the tile's first (earliest) key.
  const int64_t first = p.qpos.count_below(p.seq_q, p.kpos.global(k0));
  for (int64_t hh = 0; hh < per_group; ++hh) {
    const int64_t h = g * per_group + hh;
    for (int64_t t0 = first; t0 < p.seq_q; t0 += kTile) {
      const int64_t nq = min(int64_t{kTile}, p.seq_q - t0);
      __syncthreads();  // the previous tiles are consumed (and the k, v tiles stored)
      const int64_t at = (b * p.seq_q + t0) * qrow + h * D;
      load_tile<T, D>(qs, q + at, nq, qrow);
      load_tile<T, D>(dos, dout + at, nq, qrow);
      for (int c = threadIdx.x; c < kTile; c += kTcThreads) {
        const int64_t stat = (b * p.heads + h) * p.seq_q + t0 + c;
        col_lse2[c] = c < nq ? lse[stat] * kLog2e : -INFINITY;
        col_dsum[c] = c < nq ? dsum[stat] : 0.0f;
      }
      __syncthreads();
      if (p.qpos.global(t0 + nq - 1) < first_key_pos) continue;  // warp-uniform: sees none
      FragC<T> acc[kTile / 16];
      zero<T>(acc);
      warp_mma<T, kTile / 16, D, wmma::col_major>(acc, ks + warp * kRows * kLd, kLd, qs, kLd);
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n) {
        wmma::store_matrix_sync(sm.scratch[0] + n * 16, acc[n], kScratchLd, wmma::mem_row_major);
      }
      __syncwarp();
      // P^T in place of S^T (each lane its own elements); z P^T as the operand over scratch[1].
      int qpos[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int c = half * 32 + lane;
        qpos[half] =
            c < nq && col_lse2[c] != -INFINITY ? static_cast<int>(p.qpos.global(t0 + c)) : -1;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float& e = sm.scratch[0][r * kScratchLd + c];
          float pz = 0.0f;
          if (kp[r] <= qpos[half]) {
            e = exp2f(e * scale2 - col_lse2[c]);
            pz = e * p.mask.factor(b, h, qpos[half], kp[r]);
          }
          sm.op[r * kPld + c] = from_float<T>(pz);
        }
      }
      __syncwarp();
      warp_mma<T, D / 16, kTile, wmma::row_major>(dv_acc, sm.op, kPld, dos, kLd);
      zero<T>(acc);
      warp_mma<T, kTile / 16, D, wmma::col_major>(acc, vs + warp * kRows * kLd, kLd, dos, kLd);
      __syncwarp();  // the operand is consumed: dP^T goes over it
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n) {
        wmma::store_matrix_sync(sm.scratch[1] + n * 16, acc[n], kScratchLd, wmma::mem_row_major);
      }
      __syncwarp();
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int c = half * 32 + lane;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float& e = sm.scratch[0][r * kScratchLd + c];  // P^T, then dS^T in place
          float ds = 0.0f;
          if (kp[r] <= qpos[half]) {
            const float dp =
                sm.scratch[1][r * kScratchLd + c] * p.mask.factor(b, h, qpos[half], kp[r]);
            ds = e * (dp - col_dsum[c]) * p.scale;
          }
          e = ds;
        }
      }
      const T* ds = as_operand<T>(sm.scratch[0], sm.op);  // bf16: over dP^T
      warp_mma<T, D / 16, kTile, wmma::row_major>(dk_acc, ds, kPld, qs, kLd);
    }
  }
  float* dst = dkv + (b * p.seq_k + wk0) * kvrow;
  store_rows<T, D, true>(dst + g * D, kvrow, wkeys, dk_acc, sm.scratch[0]);
  store_rows<T, D, true>(dst + (p.groups + g) * D, kvrow, wkeys, dv_acc, sm.scratch[0]);
}

unsigned tiles(int64_t n) { return tiles_of(n, kTile); }

/// Calls fn(T{}, std::integral_constant<int, D>{}) for the call's operand type and head_dim.
template <typename Fn>
void dispatch(const Params& p, Float32MatmulPrecision precision, Fn&& fn) {
  auto by_dim = [&](auto type) {
    if (p.d == 64) {
      fn(type, std::integral_constant<int, 64>{});
    } else {
      fn(type, std::integral_constant<int, 128>{});
    }
  };
  if (precision == Float32MatmulPrecision::kMedium) {
    by_dim(__nv_bfloat16{});
  } else {
    by_dim(float{});
  }
}

}  // namespace

bool tensor_core_attention_applies(const Params& p, Float32MatmulPrecision precision,
                                   std::initializer_list<const void*> pointers) {
  if (precision == Float32MatmulPrecision::kHighest) return false;
  if (p.d != 64 && p.d != 128) return false;
  if (p.qpos.seq_total >= INT_MAX || p.kpos.seq_total >= INT_MAX) return false;  // int positions
  for (const void* ptr : pointers) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  }
  return true;
}

void tensor_core_attention_forward(float* out, float* lse, const float* q, const float* kv,
                                   const Params& p, Float32MatmulPrecision precision,
                                   cudaStream_t stream) {
  dispatch(p, precision, [&](auto type, auto dim) {
    using T = decltype(type);
    constexpr int D = decltype(dim)::value;
    launch_blocks(tc_forward_kernel<T, D>,
                  dim3(tiles(p.seq_q), static_cast<unsigned>(p.batch * p.heads)),
                  kTcThreads, smem_bytes<T, D>(2, 2, 1), stream, out, lse, q, kv, p);
  });
}

void tensor_core_attention_backward(float* dq, float* dkv, const float* dout, const float* q,
                                    const float* kv, const float* lse, const float* dsum,
                                    const Params& p, Float32MatmulPrecision precision,
                                    cudaStream_t stream) {
  dispatch(p, precision, [&](auto type, auto dim) {
    using T = decltype(type);
    constexpr int D = decltype(dim)::value;
    const size_t smem = smem_bytes<T, D>(4, 2, 2);
    launch_blocks(tc_backward_dq_kernel<T, D>,
                  dim3(tiles(p.seq_q), static_cast<unsigned>(p.batch * p.heads)), kTcThreads, smem,
                  stream, dq, dout, q, kv, lse, dsum, p);
    launch_blocks(tc_backward_dkv_kernel<T, D>,
                  dim3(tiles(p.seq_k), static_cast<unsigned>(p.batch * p.groups)), kTcThreads, smem,
                  stream, dkv, dout, q, kv, lse, dsum, p);
  });
}

}  // namespace traintwin::exec::cuda::detail
