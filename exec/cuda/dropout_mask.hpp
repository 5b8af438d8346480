// The dropout keep-decision shared by the host and the device. It calls exec/counter_rng.hpp's
// counter_hash itself (constexpr; nvcc compiles it for the device with
// --expt-relaxed-constexpr), so the device draws exactly the CPU's bits, and it replaces the
// CPU's floating-point test
//   keep = counter_uniform(seed, stream, index) >= p,  counter_uniform = (hash >> 11) * 2^-53
// by an integer one. With k = hash >> 11 (an integer < 2^53) and p * 2^53 exact in double
// (a power-of-two scaling of p in [0, 1)):
//   k * 2^-53 >= p  <=>  k >= p * 2^53  <=>  k >= ceil(p * 2^53)
// since k is an integer. Plain C++ includable (the host/device qualifiers vanish outside nvcc).
#pragma once

#include <cmath>
#include <cstdint>

#include "exec/counter_rng.hpp"

#if defined(__CUDACC__)
#define TRAINTWIN_HOST_DEVICE __host__ __device__
#else
#define TRAINTWIN_HOST_DEVICE
#endif

namespace traintwin::exec::cuda {

/// ceil(p * 2^53): the smallest 53-bit value kept at drop probability p in [0, 1)
/// (0 for p = 0: everything is kept). The caller validates p.
inline uint64_t dropout_keep_threshold(double p) {
  return static_cast<uint64_t>(std::ceil(p * 0x1.0p53));
}

/// Whether element `index` of stream `stream` under `seed` is kept: (counter_hash >> 11) >=
/// threshold; equal to exec/cpu/dropout's counter_uniform(seed, stream, index) >= p for
/// threshold = dropout_keep_threshold(p).
TRAINTWIN_HOST_DEVICE constexpr bool dropout_keep(uint64_t seed, uint64_t stream, uint64_t index,
                                                  uint64_t threshold) {
  return threshold == 0 || (counter_hash(seed, stream, index) >> 11) >= threshold;
}

}  // namespace traintwin::exec::cuda
