// The inputs `traintwin profile` hands a kernel (exec/profile.hpp): device tensors of
// counter-based random values (exec/counter_rng.hpp, a fresh stream per tensor), token ids, and
// output buffers. Every buffer is written once when it is made, so its memory is resident
// before any timed run: a fresh allocation's pages are mapped on first touch (the CPU backend
// callocs large blocks), and a profile with more input sets than warm-up runs would otherwise
// time the page faults of each set's outputs, which a live run, whose buffers come back from the
// backend's block cache already mapped, never pays.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/backend.hpp"

namespace traintwin::exec {

class ProfileInputs {
 public:
  /// Inputs on `backend` from the random stream family `seed`.
  ProfileInputs(Backend& backend, uint64_t seed) : be_(backend), seed_(seed) {}
  /// Random values are drawn for at most this many elements per tensor; a longer tensor repeats
  /// them (a kernel's time does not depend on which values it reads, only that they are not
  /// zeros, and drawing the 1.3 G values of a 1.3B model's optimizer inputs took a minute).
  static constexpr int64_t kTileElements = int64_t{1} << 22;
  /// n values uniform in [lo, hi) (lo < hi, else InvalidArgument), never all zeros: the first
  /// kTileElements drawn from a fresh stream, repeated over the rest.
  Tensor uniform(int64_t n, double lo = -1.0, double hi = 1.0);
  /// An output (or accumulated-into) tensor of n zeros, as the model hands the kernel, written
  /// through the backend so its pages are resident.
  Tensor zeros(int64_t n);
  /// n token ids uniform in [0, range) (range >= 1, else InvalidArgument).
  DeviceBuffer<int32_t> ids(int64_t n, int64_t range);
  /// uniform() and zeros() rounded to bf16 (Backend::convert_to_bf16), for the bf16 kernels.
  Bf16Tensor uniform_bf16(int64_t n, double lo = -1.0, double hi = 1.0);
  Bf16Tensor zeros_bf16(int64_t n);
  /// uniform() in [-1, 1) cast to FP8 `kind` (Backend::quantize_fp8, scale 1).
  Fp8Tensor uniform_fp8(int64_t n, cpu::Fp8Kind kind);

 private:
  Backend& be_;
  uint64_t seed_;
  uint64_t next_ = 0;
  std::vector<float> host_;
};

}  // namespace traintwin::exec
