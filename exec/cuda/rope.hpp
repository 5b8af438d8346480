// Rotary position embedding on the GPU (Su et al. 2021, "RoFormer"; Megatron-Core's
// non-interleaved rotate_half form): the same function, shapes and semantics as
// exec/cpu/rope.hpp. Each head of D channels is split into halves x1 = x[0, D/2), x2 = x[D/2, D);
// with theta_i = base^(-2i/D) and angle a = position x theta_i:
//   out1_i = x1_i cos a - x2_i sin a,   out2_i = x2_i cos a + x1_i sin a
// where position is the global position of the local token under context parallelism
// (exec/cp_sequence.hpp). The angles' cosines and sines are computed in double and rounded to
// float, as the CPU layer does, into a [T, D/2] table (one small kernel), then one thread
// rotates one (x1_i, x2_i) pair. fp32 storage and arithmetic. Device pointers; asynchronous on
// `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cp_sequence.hpp"

namespace traintwin::exec::cuda {

/// Floats of the cos/sin table rope_forward/backward need: 2 T (D / 2) = T D.
int64_t rope_table_floats(int64_t seq, int64_t head_dim);

/// Forward; overwrites out (which may alias inp). seq must be positions.local(). `table` is
/// device scratch of rope_table_floats() floats. Throws InvalidArgument for a size < 1, an odd
/// head_dim, a base <= 0, seq != positions.local() or a null pointer; CudaError if a launch
/// fails.
void rope_forward(float* out,        // [B, T, H, D]
                  const float* inp,  // [B, T, H, D]
                  float* table,      // [2, T, D/2] scratch
                  int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  const CpSequence& positions, double base, cudaStream_t stream);

/// Backward, the inverse rotation, accumulating (+=) into dinp:
///   dx1_i += d1_i cos a + d2_i sin a,   dx2_i += d2_i cos a - d1_i sin a.
/// Throws as rope_forward.
void rope_backward(float* dinp,        // [B, T, H, D]
                   const float* dout,  // [B, T, H, D]
                   float* table,       // [2, T, D/2] scratch
                   int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                   const CpSequence& positions, double base, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
