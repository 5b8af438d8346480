// Blockwise causal attention in bf16 arithmetic through mma.sync; see flash_attention_mma.cuh.
// The softmax runs in base 2 (exp2 of s log2(e), as FlashAttention-2's kernels): lse2 = lse
// log2(e).
//
// Fragments of mma.sync.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4 g + t:
//   A [16 x 16] row-major: a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 8 + 2t..), a3 (g + 8, 8 + 2t..)
//   B [16 x 8]:            b0 (k 2t..2t+1, n g), b1 (k 8 + 2t.., n g)
//   C [16 x 8] fp32:       c0, c1 (g, 2t and 2t + 1), c2, c3 (g + 8, 2t and 2t + 1)
// so the C fragments of two adjacent n-tiles, rounded to bf16 pairs, are the A fragment of the
// next product (the score tile never leaves the registers). Tiles live in shared memory as
// [64][D + 8] bf16 (rows of 16-byte-aligned, bank-conflict-free 272 or 144 bytes): a B operand
// whose rows are the product's n index ([n][k]) is read by ldmatrix, one whose rows are its k
// index ([k][n]) by ldmatrix.trans, two n-tiles per instruction. The causal mask is tested only
// in tiles that straddle the diagonal (or the block's end): a tile every row of the warp sees
// whole skips it.
#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "exec/cuda/common.cuh"
#include "exec/cuda/convert.hpp"
#include "exec/cuda/dtype.hpp"
#include "exec/cuda/flash_attention_mma.cuh"

namespace traintwin::exec::cuda::detail {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16;                // rows (queries, or keys in dk/dv) per warp
constexpr int kTile = kWarps * kRows;    // 64 rows per block; 64 keys (or queries) per step
constexpr int kPad = 8;                  // tile rows of D + 8 bf16
constexpr int kDsLd = kTile + kPad;      // the backward's dS^T tile: rows of 64 + 8 bf16
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t ld32(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

/// c += a b (bf16 operands, fp32 accumulation).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// The A fragment of rows r0 .. r0 + 15, columns k0 .. k0 + 15 of a [64][L] tile.
template <int L>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* s, int r0, int k0,
                                       int lane) {
  const int g = lane >> 2, t2 = (lane & 3) * 2;
  a[0] = ld32(s + (r0 + g) * L + k0 + t2);
  a[1] = ld32(s + (r0 + g + 8) * L + k0 + t2);
  a[2] = ld32(s + (r0 + g) * L + k0 + 8 + t2);
  a[3] = ld32(s + (r0 + g + 8) * L + k0 + 8 + t2);
}

/// The B fragments of two n-tiles (n n0 .. n0 + 7 in b[0], b[1] and n0 + 8 .. n0 + 15 in b[2],
/// b[3]; k k0 .. k0 + 15) of a tile stored [n][k], by one ldmatrix (load_b's values for n-tiles
/// n0 and n0 + 8 in a quarter of the instructions): lane l gives the address of row l % 8 of
/// 8 x 8 matrix l / 8 ((n0, k0), (n0, k0 + 8), (n0 + 8, k0), (n0 + 8, k0 + 8)).
template <int L>
__device__ __forceinline__ void load_b_pair(uint32_t (&b)[4], const bf16* s, int n0, int k0,
                                            int lane) {
  const int m = lane >> 3, r = lane & 7;
  const bf16* row = s + (n0 + r + (m >> 1) * 8) * L + k0 + (m & 1) * 8;
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(addr));
}

/// The B fragments of two n-tiles (k k0 .. k0 + 15; n n0 .. n0 + 7 in b[0], b[1] and n0 + 8 ..
/// n0 + 15 in b[2], b[3]) of a tile stored [k][n], by ldmatrix.trans: lane l gives the address
/// of row l % 8 of 8 x 8 matrix l / 8 ((k0, n0), (k0 + 8, n0), (k0, n0 + 8), (k0 + 8, n0 + 8)).
template <int L>
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], const bf16* s, int k0, int n0,
                                             int lane) {
  const int m = lane >> 3, r = lane & 7;
  const bf16* row = s + (k0 + r + (m & 1) * 8) * L + n0 + (m >> 1) * 8;
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(addr));
}

/// The A fragment of rows m0 .. m0 + 15, columns k0 .. k0 + 15 of a matrix stored transposed,
/// [k][m] with rows of LD, by ldmatrix.trans: lane l gives the address of row l % 8 of 8 x 8
/// matrix l / 8 ((k0, m0), (k0, m0 + 8), (k0 + 8, m0), (k0 + 8, m0 + 8) in storage), which
/// arrive transposed as a0 .. a3.
template <int LD>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const bf16* s, int m0, int k0,
                                             int lane) {
  const int m = lane >> 3, r = lane & 7;
  const bf16* row = s + (k0 + r + (m >> 1) * 8) * LD + m0 + (m & 1) * 8;
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr));
}

/// dst[0] += x, dst[1] += y atomically (one 8-byte atomic on Hopper; dst 8-byte aligned).
__device__ __forceinline__ void atomic_add_pair(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

/// The A fragment of 16 keys (or queries) kk .. kk + 15 from fp32 C fragments c[2 kk / 8] and
/// c[2 kk / 8 + 1] (two n-tiles), rounded to bf16.
__device__ __forceinline__ void to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack(lo[0], lo[1]);
  a[1] = pack(lo[2], lo[3]);
  a[2] = pack(hi[0], hi[1]);
  a[3] = pack(hi[2], hi[3]);
}

/// Starts copying `rows` rows of D bf16 from src (row stride `stride` elements, 16-byte
/// aligned) into dst [kTile][D + kPad] with cp.async, 16 bytes per copy; the rows past `rows`
/// are filled with zeros (a copy of source size 0). The caller commits the group and waits.
template <int D>
__device__ __forceinline__ void load_tile_async(bf16* dst, const bf16* src, int64_t rows,
                                                int64_t stride) {
  constexpr int kLd = D + kPad, kChunks = D / 8;  // 8 bf16 = 16 bytes per copy
  constexpr int kIters = kTile * kChunks / kThreads;  // 8 (D 128) or 4 (D 64)
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int e = threadIdx.x + i * kThreads;
    const int r = e / kChunks, c = (e - r * kChunks) * 8;
    const bool valid = r < rows;
    const bf16* from = valid ? src + r * stride + c : src;
    const auto to = static_cast<unsigned>(__cvta_generic_to_shared(dst + r * kLd + c));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from),
                 "r"(valid ? 16 : 0));
  }
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }

/// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <int D>
constexpr size_t smem_bytes(int tiles, int stats) {
  return static_cast<size_t>(tiles) * kTile * (D + kPad) * sizeof(bf16) +
         static_cast<size_t>(stats) * kTile * sizeof(float);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/// Global position of local key j, INT_MAX past the block (never visible).
__device__ __forceinline__ int key_position(const CpPositions& kpos, int64_t j, int64_t n) {
  return j < n ? static_cast<int>(kpos.global(j)) : INT_MAX;
}

/// Whether every key of the tile at j0 (64 keys, all inside the block) is visible to every query
/// from local row w0 on (positions increase with the local index: w0's is the smallest).
/// Warp-uniform.
__device__ __forceinline__ bool tile_visible(const Params& p, int64_t j0, int64_t w0) {
  return j0 + kTile <= p.seq_k && p.kpos.global(j0 + kTile - 1) <= p.qpos.global(w0);
}

// ---- forward ---------------------------------------------------------------------------------
// Block (query tile of 64 rows, b NH + h), heaviest tiles first; warp w owns rows 16 w ...; lane
// 4 g + t holds rows g and g + 8 of the warp's score tile, columns 8 n + 2 t and 8 n + 2 t + 1.
template <int D>
__global__ void __launch_bounds__(kThreads)
    mma_forward_kernel(float* out, float* lse, const bf16* q, const bf16* kv, Params p) {
  constexpr int L = D + kPad;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* ks[2] = {qs + kTile * L, qs + 3 * kTile * L};
  bf16* vs[2] = {qs + 2 * kTile * L, qs + 4 * kTile * L};
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, t2 = (lane & 3) * 2;
  const int64_t b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int64_t grp = h / (p.heads / p.groups);
  const int64_t qrow = p.heads * D, kvrow = 2 * p.groups * D;
  const int64_t t0 = (gridDim.x - 1 - blockIdx.x) * int64_t{kTile};
  const int64_t rows = min(int64_t{kTile}, p.seq_q - t0);
  const int64_t w0 = t0 + warp * kRows;
  const int64_t wrows = max(int64_t{0}, min(int64_t{kRows}, p.seq_q - w0));
  // Positions increase with the local index: a tile's last row sees the most keys.
  const int64_t warp_keys =
      wrows > 0 ? p.kpos.count_at_most(p.seq_k, p.qpos.global(w0 + wrows - 1)) : 0;
  const int64_t keys = p.kpos.count_at_most(p.seq_k, p.qpos.global(t0 + rows - 1));
  const bf16* kvb = kv + b * p.seq_k * kvrow;
  auto load_kv = [&](int buf, int64_t j0) {
    const int64_t nk = min(int64_t{kTile}, p.seq_k - j0);
    load_tile_async<D>(ks[buf], kvb + j0 * kvrow + grp * D, nk, kvrow);
    load_tile_async<D>(vs[buf], kvb + j0 * kvrow + (p.groups + grp) * D, nk, kvrow);
    commit();
  };
  load_tile_async<D>(qs, q + (b * p.seq_q + t0) * qrow + h * D, rows, qrow);
  commit();
  if (keys > 0) {
    load_kv(0, 0);
    wait_groups<1>();  // the Q tile (the first K/V tile may still be in flight)
  } else {
    wait_groups<0>();
  }
  __syncthreads();
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) load_a<L>(qa[kk], qs, warp * kRows, kk * 16, lane);
  const float scale2 = p.scale * kLog2e;
  const int qp0 = g < wrows ? static_cast<int>(p.qpos.global(w0 + g)) : -1;
  const int qp1 = g + 8 < wrows ? static_cast<int>(p.qpos.global(w0 + g + 8)) : -1;

  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  int buf = 0;
  for (int64_t j0 = 0; j0 < keys; j0 += kTile, buf ^= 1) {
    // Prefetch the next K/V tile into the other buffer (last read in the previous step, whose
    // closing barrier every warp has passed), then wait for this one.
    if (j0 + kTile < keys) {
      load_kv(buf ^ 1, j0 + kTile);
      wait_groups<1>();
    } else {
      wait_groups<0>();
    }
    __syncthreads();
    if (j0 < warp_keys) {  // warp-uniform
      const bf16* kt = ks[buf];
      const bf16* vt = vs[buf];
      float s[kTile / 8][4];
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int n = 0; n < kTile / 8; n += 2) {
          uint32_t kb[4];
          load_b_pair<L>(kb, kt, n * 8, kk * 16, lane);
          mma(s[n], qa[kk], kb[0], kb[1]);
          mma(s[n + 1], qa[kk], kb[2], kb[3]);
        }
      }
      // Scale, mask (causal on global positions; a tile whose last key the warp's first row
      // sees is whole for every row: no test), and the running max of each row.
      const bool whole = tile_visible(p, j0, w0);
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int kp = whole ? INT_MIN : key_position(p.kpos, j0 + n * 8 + t2 + e, p.seq_k);
          s[n][e] = kp <= qp0 ? s[n][e] * scale2 : -INFINITY;
          s[n][2 + e] = kp <= qp1 ? s[n][2 + e] * scale2 : -INFINITY;
          mx0 = fmaxf(mx0, s[n][e]);
          mx1 = fmaxf(mx1, s[n][2 + e]);
        }
      }
      const float mn0 = fmaxf(m0, quad_max(mx0)), mn1 = fmaxf(m1, quad_max(mx1));
      const float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1;
      const float alpha0 = exp2f(m0 - base0), alpha1 = exp2f(m1 - base1);
      m0 = mn0;
      m1 = mn1;
      float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          s[n][e] = exp2f(s[n][e] - base0);
          s[n][2 + e] = exp2f(s[n][2 + e] - base1);
          rs0 += s[n][e];
          rs1 += s[n][2 + e];
        }
      }
      l0 = l0 * alpha0 + rs0;
      l1 = l1 * alpha1 + rs1;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= alpha0;
        o[n][1] *= alpha0;
        o[n][2] *= alpha1;
        o[n][3] *= alpha1;
      }
      // o += P V: P's A fragments from the score registers, V [key][dim] by ldmatrix.trans.
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        uint32_t pa[4];
        to_a(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
          uint32_t bv[4];
          load_b_trans<L>(bv, vt, kk * 16, n * 8, lane);
          mma(o[n], pa, bv[0], bv[1]);
          mma(o[n + 1], pa, bv[2], bv[3]);
        }
      }
    }
    __syncthreads();  // this buffer is consumed: the next step's prefetch may overwrite it
  }
  l0 = quad_sum(l0);
  l1 = quad_sum(l1);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  if (g < wrows) {
    float* dst = out + (b * p.seq_q + w0 + g) * qrow + h * D + t2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][0] * inv0, o[n][1] * inv0);
    }
    if ((lane & 3) == 0) {
      lse[(b * p.heads + h) * p.seq_q + w0 + g] =
          m0 == -INFINITY ? -INFINITY : (m0 + log2f(l0)) * kLn2;
    }
  }
  if (g + 8 < wrows) {
    float* dst = out + (b * p.seq_q + w0 + g + 8) * qrow + h * D + t2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][2] * inv1, o[n][3] * inv1);
    }
    if ((lane & 3) == 0) {
      lse[(b * p.heads + h) * p.seq_q + w0 + g + 8] =
          m1 == -INFINITY ? -INFINITY : (m1 + log2f(l1)) * kLn2;
    }
  }
}

// ---- backward ----------------------------------------------------------------------------------
// FlashAttention-2's Algorithm 2 in one kernel. Block (key tile of 64, b G + g) over the query
// tiles that see it, for each query head of the group; warp w owns keys 16 w ...: S^T = K Q^T,
// P^T = exp2(S^T scale2 - lse2[col]), dv += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - dsum[col])
// scale, dk += dS^T Q; dS^T goes to shared memory (bf16, the operand dk used), and after a barrier
// warp w computes dq rows 16 w ... of the query tile, dS K over the block's 64 keys, and adds them
// to dq with fp32 atomics (the order of the key tiles' additions is unspecified, as in
// FlashAttention-2: dq is not bitwise deterministic run to run).
template <int D>
__global__ void __launch_bounds__(kThreads)
    mma_backward_kernel(float* dq, float* dkv, const bf16* dout, const bf16* q, const bf16* kv,
                        const float* lse, const float* dsum, Params p) {
  constexpr int L = D + kPad;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);
  bf16* vs = ks + kTile * L;
  bf16* qs[2] = {ks + 2 * kTile * L, ks + 4 * kTile * L};
  bf16* dos[2] = {ks + 3 * kTile * L, ks + 5 * kTile * L};
  bf16* dss = ks + 6 * kTile * L;                                // dS^T [key][query], kDsLd
  float* stats = reinterpret_cast<float*>(dss + kTile * kDsLd);  // [2][lse2, dsum][64]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, t2 = (lane & 3) * 2;
  const int64_t b = blockIdx.y / p.groups, grp = blockIdx.y % p.groups;
  const int64_t per_group = p.heads / p.groups;
  const int64_t qrow = p.heads * D, kvrow = 2 * p.groups * D;
  const int64_t k0 = blockIdx.x * int64_t{kTile};
  const int64_t nkeys = min(int64_t{kTile}, p.seq_k - k0);
  const bf16* kvt = kv + (b * p.seq_k + k0) * kvrow;
  load_tile_async<D>(ks, kvt + grp * D, nkeys, kvrow);
  load_tile_async<D>(vs, kvt + (p.groups + grp) * D, nkeys, kvrow);
  commit();
  const int64_t wk0 = k0 + warp * kRows;
  const int64_t wkeys = max(int64_t{0}, min(int64_t{kRows}, p.seq_k - wk0));
  const int64_t first_key_pos = wkeys > 0 ? p.kpos.global(wk0) : INT64_MAX;
  const float scale2 = p.scale * kLog2e;
  const int kp0 = key_position(p.kpos, wk0 + g, wk0 + wkeys);
  const int kp1 = key_position(p.kpos, wk0 + g + 8, wk0 + wkeys);
  // The (head of the group, query tile) steps, heads outer: step i is head i / tiles, query
  // tile first + (i % tiles) x 64.
  const int64_t first = p.qpos.count_below(p.seq_q, p.kpos.global(k0));
  const int64_t tiles = (p.seq_q - first + kTile - 1) / kTile;
  const int64_t steps = per_group * tiles;
  auto load_step = [&](int buf, int64_t i) {
    const int64_t h = grp * per_group + i / tiles;
    const int64_t t0 = first + (i % tiles) * kTile;
    const int64_t nq = min(int64_t{kTile}, p.seq_q - t0);
    const int64_t at = (b * p.seq_q + t0) * qrow + h * D;
    load_tile_async<D>(qs[buf], q + at, nq, qrow);
    load_tile_async<D>(dos[buf], dout + at, nq, qrow);
    commit();
    float* st = stats + buf * 2 * kTile;
    for (int c = threadIdx.x; c < kTile; c += kThreads) {
      const int64_t stat = (b * p.heads + h) * p.seq_q + t0 + c;
      st[c] = c < nq ? lse[stat] * kLog2e : -INFINITY;
      st[kTile + c] = c < nq ? dsum[stat] : 0.0f;
    }
  };

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.0f;
    dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
  }
  if (steps > 0) load_step(0, 0);
  int buf = 0;
  for (int64_t i = 0; i < steps; ++i, buf ^= 1) {
    if (i + 1 < steps) {
      load_step(buf ^ 1, i + 1);
      wait_groups<1>();
    } else {
      wait_groups<0>();
    }
    __syncthreads();
    const int64_t t0 = first + (i % tiles) * kTile;
    const int64_t nq = min(int64_t{kTile}, p.seq_q - t0);
    const int r0 = warp * kRows;  // the warp's keys in dS^T, its queries in dq
    if (p.qpos.global(t0 + nq - 1) >= first_key_pos) {  // warp-uniform: sees some
      const bf16* qt = qs[buf];
      const bf16* dt = dos[buf];
      const float* col_lse2 = stats + buf * 2 * kTile;
      const float* col_dsum = col_lse2 + kTile;
      float st[kTile / 8][4], dpt[kTile / 8][4];
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
        st[n][0] = st[n][1] = st[n][2] = st[n][3] = 0.0f;
        dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4], va[4];
        load_a<L>(a, ks, warp * kRows, kk * 16, lane);
        load_a<L>(va, vs, warp * kRows, kk * 16, lane);
#pragma unroll
        for (int n = 0; n < kTile / 8; n += 2) {
          uint32_t bb[4];
          load_b_pair<L>(bb, qt, n * 8, kk * 16, lane);
          mma(st[n], a, bb[0], bb[1]);
          mma(st[n + 1], a, bb[2], bb[3]);
          load_b_pair<L>(bb, dt, n * 8, kk * 16, lane);
          mma(dpt[n], va, bb[0], bb[1]);
          mma(dpt[n + 1], va, bb[2], bb[3]);
        }
      }
      // Whole (no test): a full query tile whose first query sees the warp's last key (and
      // every query row has a finite lse: it sees that key).
      const bool whole = nq == kTile && wkeys == kRows &&
                         p.kpos.global(wk0 + kRows - 1) <= p.qpos.global(t0);
      // P^T and dS^T; column c = query t0 + c.
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = n * 8 + t2 + e;
          const float cl = col_lse2[c];
          const int qp = whole                           ? INT_MAX
                         : c < nq && cl != -INFINITY ? static_cast<int>(p.qpos.global(t0 + c))
                                                     : -1;
          const float cd = col_dsum[c];
          const float p0 = kp0 <= qp ? exp2f(st[n][e] * scale2 - cl) : 0.0f;
          const float p1 = kp1 <= qp ? exp2f(st[n][2 + e] * scale2 - cl) : 0.0f;
          st[n][e] = p0;
          st[n][2 + e] = p1;
          dpt[n][e] = p0 * (dpt[n][e] - cd) * p.scale;
          dpt[n][2 + e] = p1 * (dpt[n][2 + e] - cd) * p.scale;
        }
      }
      // dv += P^T dO and dk += dS^T Q: dO and Q [query][dim] by ldmatrix.trans. dS^T's bf16
      // fragments also go to shared memory for the block's dq product.
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        uint32_t pa[4], da[4];
        to_a(pa, st[2 * kk], st[2 * kk + 1]);
        to_a(da, dpt[2 * kk], dpt[2 * kk + 1]);
        uint32_t* ds_lo = reinterpret_cast<uint32_t*>(dss + (r0 + g) * kDsLd + kk * 16 + t2);
        uint32_t* ds_hi = reinterpret_cast<uint32_t*>(dss + (r0 + g + 8) * kDsLd + kk * 16 + t2);
        ds_lo[0] = da[0];  // (key g, queries 16 kk + 2 t ..), as to_a packs them
        ds_hi[0] = da[1];
        ds_lo[4] = da[2];  // queries 16 kk + 8 + 2 t ..
        ds_hi[4] = da[3];
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
          uint32_t bb[4];
          load_b_trans<L>(bb, dt, kk * 16, n * 8, lane);
          mma(dv[n], pa, bb[0], bb[1]);
          mma(dv[n + 1], pa, bb[2], bb[3]);
          load_b_trans<L>(bb, qt, kk * 16, n * 8, lane);
          mma(dk[n], da, bb[0], bb[1]);
          mma(dk[n + 1], da, bb[2], bb[3]);
        }
      }
    } else {  // keys the tile does not see: no gradient
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dss + (r0 + g) * kDsLd + n * 8 + t2) = 0u;
        *reinterpret_cast<uint32_t*>(dss + (r0 + g + 8) * kDsLd + n * 8 + t2) = 0u;
      }
    }
    __syncthreads();  // dS^T whole
    // dq [queries r0 ..] += dS [query][key] K [key][dim]: dS from dS^T and K by ldmatrix.trans,
    // the head's dim in chunks of 32 columns (16 accumulator registers).
    {
      const int64_t h = grp * per_group + i / tiles;
      constexpr int kChunk = 32;
#pragma unroll
      for (int c0 = 0; c0 < D; c0 += kChunk) {
        float acc[kChunk / 8][4];
#pragma unroll
        for (int n = 0; n < kChunk / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kTile / 16; ++kk) {
          uint32_t da[4];
          load_a_trans<kDsLd>(da, dss, r0, kk * 16, lane);
#pragma unroll
          for (int n = 0; n < kChunk / 8; n += 2) {
            uint32_t bk[4];
            load_b_trans<L>(bk, ks, kk * 16, c0 + n * 8, lane);
            mma(acc[n], da, bk[0], bk[1]);
            mma(acc[n + 1], da, bk[2], bk[3]);
          }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = r0 + g + half * 8;
          if (r >= nq) continue;
          float* dst = dq + (b * p.seq_q + t0 + r) * qrow + h * D + c0 + t2;
#pragma unroll
          for (int n = 0; n < kChunk / 8; ++n) {
            atomic_add_pair(dst + n * 8, acc[n][2 * half], acc[n][2 * half + 1]);
          }
        }
      }
    }
    __syncthreads();  // the buffers of this step (and dS^T) are consumed
  }
  wait_groups<0>();  // no copy outlives the block (no steps: the K and V tiles)
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = g + half * 8;
    if (r >= wkeys) continue;
    float* row = dkv + (b * p.seq_k + wk0 + r) * kvrow + t2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      float2* kd = reinterpret_cast<float2*>(row + grp * D + n * 8);
      float2* vd = reinterpret_cast<float2*>(row + (p.groups + grp) * D + n * 8);
      float2 x = *kd, y = *vd;
      x.x += dk[n][2 * half];
      x.y += dk[n][2 * half + 1];
      y.x += dv[n][2 * half];
      y.y += dv[n][2 * half + 1];
      *kd = x;
      *vd = y;
    }
  }
}

unsigned tiles(int64_t n) { return tiles_of(n, kTile); }

template <typename Fn>
void by_dim(int64_t d, Fn&& fn) {
  if (d == 64) {
    fn(std::integral_constant<int, 64>{});
  } else {
    fn(std::integral_constant<int, 128>{});
  }
}

}  // namespace

bool mma_attention_applies(const Params& p, Float32MatmulPrecision precision,
                           std::initializer_list<const void*> pointers) {
  if (precision != Float32MatmulPrecision::kMedium || p.mask.active) return false;
  if (p.d != 64 && p.d != 128) return false;
  if (p.qpos.seq_total >= INT_MAX || p.kpos.seq_total >= INT_MAX) return false;  // int positions
  for (const void* ptr : pointers) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  }
  return true;
}

namespace {

/// A stream-ordered device buffer of n bf16 holding `src` [n] fp32 rounded (freed on the
/// stream when it goes out of scope, after the kernels queued before).
class Bf16Copy {
 public:
  Bf16Copy(const float* src, int64_t n, cudaStream_t stream) : stream_(stream) {
    TRAINTWIN_CUDA_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&data_), static_cast<size_t>(n) * sizeof(bf16),
                        stream));
    convert(DType::kBFloat16, data_, DType::kFloat32, src, n, stream);
  }
  ~Bf16Copy() { cudaFreeAsync(data_, stream_); }
  Bf16Copy(const Bf16Copy&) = delete;
  Bf16Copy& operator=(const Bf16Copy&) = delete;
  const bf16* get() const { return data_; }

 private:
  bf16* data_ = nullptr;
  cudaStream_t stream_;
};

int64_t q_elements(const Params& p) { return p.batch * p.seq_q * p.heads * p.d; }
int64_t kv_elements(const Params& p) { return p.batch * p.seq_k * 2 * p.groups * p.d; }

}  // namespace

void mma_attention_forward(float* out, float* lse, const float* q, const float* kv,
                           const Params& p, cudaStream_t stream) {
  const Bf16Copy qb(q, q_elements(p), stream), kvb(kv, kv_elements(p), stream);
  by_dim(p.d, [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    launch_blocks(mma_forward_kernel<D>,
                  dim3(tiles(p.seq_q), static_cast<unsigned>(p.batch * p.heads)),
                  kThreads, smem_bytes<D>(5, 0), stream, out, lse, qb.get(), kvb.get(), p);
  });
}

void mma_attention_backward(float* dq, float* dkv, const float* dout, const float* q,
                            const float* kv, const float* lse, const float* dsum, const Params& p,
                            cudaStream_t stream) {
  const Bf16Copy qb(q, q_elements(p), stream), kvb(kv, kv_elements(p), stream),
      dob(dout, q_elements(p), stream);
  by_dim(p.d, [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    const size_t smem = smem_bytes<D>(6, 4) + size_t{kTile} * kDsLd * sizeof(bf16);
    launch_blocks(mma_backward_kernel<D>,
                  dim3(tiles(p.seq_k), static_cast<unsigned>(p.batch * p.groups)), kThreads, smem,
                  stream, dq, dkv, dob.get(), qb.get(), kvb.get(), lse, dsum, p);
  });
}

}  // namespace traintwin::exec::cuda::detail
