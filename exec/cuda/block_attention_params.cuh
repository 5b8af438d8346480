// Private to exec/cuda/block_attention.cu and exec/cuda/flash_attention_tc.cu: what the blockwise
// attention kernels take besides the pointers (sizes, scale, the CP position maps, the
// attention-probability dropout mask on global positions), make_params, which checks a call's
// arguments and builds them, and the launch helper the kernels share. The kernels come next: the fp32 ones in block_attention.cu,
// the tensor-core ones in flash_attention_tc.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cp_sequence.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/block_attention.hpp"
#include "exec/cuda/cp_positions.cuh"
#include "exec/cuda/cuda_check.hpp"
#include "exec/cuda/dropout_mask.hpp"

namespace traintwin::exec::cuda::detail {

/// Attention-probability dropout on global (sample, head, query position, key position):
/// exec/cpu/dropout.hpp's attention_dropout_index and keep test (dropout_mask.hpp).
struct AttentionMask {
  bool active = false;
  uint64_t seed = 0, stream = 0, threshold = 0;
  float scale = 1.0f;  // 1 / (1 - p) rounded to float, as the CPU layer's float instantiation
  int64_t first_sample = 0, heads_total = 0, head_offset = 0, seq = 0;

  __device__ float factor(int64_t b, int64_t h, int64_t tq, int64_t tk) const {
    if (!active) return 1.0f;
    const auto index = static_cast<uint64_t>(
        (((first_sample + b) * heads_total + head_offset + h) * seq + tq) * seq + tk);
    return dropout_keep(seed, stream, index, threshold) ? scale : 0.0f;
  }
};

/// Everything the kernels need besides the pointers: B, Tq, Tk, NH, G, D; scale = 1 / sqrt(D).
struct Params {
  int64_t batch, seq_q, seq_k, heads, groups, d;
  float scale;
  CpPositions qpos, kpos;
  AttentionMask mask;
};

/// The kernels' parameters from a call's arguments, after the checks of exec/cpu/
/// block_attention.cpp (and of CpuBackend: the positions must be the shape's). Throws
/// InvalidArgument naming the argument (sizes < 1, groups not dividing heads, head_dim above
/// kBlockAttentionMaxHeadDim, positions not the shape's, a grid above 65535, dropout p outside
/// [0, 1) or a dropout block of other sizes).
Params make_params(const CpSequence& q_positions, const CpSequence& k_positions,
                   const cpu::BlockAttentionShape& s,
                   const cpu::AttentionProbabilityDropout* dropout);

/// Launches `kernel` on `grid` with `threads` per block and `smem` bytes of dynamic shared
/// memory, raising the kernel's limit above the default 48 KiB when needed (the blockwise
/// attention kernels of all three files). CudaError if the launch fails.
template <typename Kernel, typename... Args>
void launch_blocks(Kernel kernel, dim3 grid, unsigned threads, size_t smem, cudaStream_t stream,
                   Args... args) {
  if (smem > 48 * 1024) {
    TRAINTWIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
  }
  kernel<<<grid, threads, smem, stream>>>(args...);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

/// The tiles of `tile` rows that cover `n` rows (a grid dimension).
inline unsigned tiles_of(int64_t n, int64_t tile) {
  return static_cast<unsigned>((n + tile - 1) / tile);
}

}  // namespace traintwin::exec::cuda::detail
