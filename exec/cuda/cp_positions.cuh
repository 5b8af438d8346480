// Private to the exec/cuda/*.cu files: exec/cp_sequence.hpp's local-to-global position map on
// the device (Megatron-Core's causal load balance of context parallelism: CP rank r holds chunks
// r and 2 CP - 1 - r of the 2 CP chunks of the sequence), so that kernels compute the global
// position of a local one instead of reading a position table, and the binary searches over it
// (the map is strictly increasing in the local position).
#pragma once

#include <cstdint>

#include "exec/cp_sequence.hpp"

namespace traintwin::exec::cuda::detail {

/// The three integers of a CpSequence, passed to kernels by value.
struct CpPositions {
  int64_t seq_total = 1;  ///< s
  int64_t cp = 1;         ///< context-parallel size
  int64_t rank = 0;       ///< CP rank

  static CpPositions of(const CpSequence& s) { return CpPositions{s.seq_total, s.cp, s.rank}; }

  /// Local positions s / CP.
  __host__ __device__ int64_t local() const { return seq_total / cp; }

  /// Global position of local position i (CpSequence::global).
  __host__ __device__ int64_t global(int64_t i) const {
    if (cp == 1) return i;
    const int64_t c = seq_total / (2 * cp);
    return i < c ? rank * c + i : (2 * cp - 1 - rank) * c + (i - c);
  }

  /// Number of local positions i in [0, n) with global(i) <= value (an upper bound).
  __host__ __device__ int64_t count_at_most(int64_t n, int64_t value) const {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (global(mid) <= value) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  /// Number of local positions i in [0, n) with global(i) < value (a lower bound).
  __host__ __device__ int64_t count_below(int64_t n, int64_t value) const {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (global(mid) < value) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
};

}  // namespace traintwin::exec::cuda::detail
