// The CUDA backend against the CPU backend (tests/gpu/cuda_backend_*_test.cpp): the same Backend
// call on both, from the same fresh random inputs, outputs compared by ||cuda - cpu|| / ||cpu||
// (fp32 on both sides: bound 1e-5 by default, METHOD.md). A test holds one BackendPair; each
// operand is a Pair: a host vector, its copy in CpuBackend memory and its copy in CudaBackend
// memory. Outputs are poisoned with NaN on the CUDA side where the kernel overwrites them, so an
// element the kernel does not write fails the comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exec/backend.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/cuda/cuda_backend.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace traintwin::exec::cuda::testing {

/// One operand on both backends.
struct Pair {
  Tensor cpu;
  Tensor gpu;
  /// The CUDA copy downloaded.
  std::vector<float> gpu_host(Backend& gpu_backend) const {
    std::vector<float> h(gpu.size());
    if (!h.empty()) gpu_backend.download(h, gpu);
    return h;
  }
};

/// A CpuBackend and a CudaBackend (device 0) side by side.
class BackendPair {
 public:
  BackendPair() : seed_(fresh_seed()), gen_(seed_) {}
  uint64_t seed() const { return seed_; }
  std::mt19937_64& gen() { return gen_; }
  cpu::CpuBackend& cpu() { return cpu_; }
  CudaBackend& gpu() { return gpu_; }

  /// `values` on both backends.
  Pair make(const std::vector<float>& values) {
    Pair p{Tensor(cpu_, static_cast<int64_t>(values.size())),
           Tensor(gpu_, static_cast<int64_t>(values.size()))};
    if (!values.empty()) {
      cpu_.upload(p.cpu, values);
      gpu_.upload(p.gpu, values);
    }
    return p;
  }
  /// n uniform values in [lo, hi) on both backends.
  Pair random(size_t n, double lo = -1.0, double hi = 1.0) { return make(random_floats(n, lo, hi)); }
  /// n zeros on the CPU and n NaNs on the GPU (an output the kernel overwrites).
  Pair output(size_t n) {
    return Pair{Tensor(cpu_, static_cast<int64_t>(n)),
                nan_tensor(n)};
  }
  /// n zeros on both (an output the kernel accumulates into with +=; start it with random() to
  /// check the accumulation).
  Pair zeros(size_t n) {
    return Pair{Tensor(cpu_, static_cast<int64_t>(n)), Tensor(gpu_, static_cast<int64_t>(n))};
  }
  /// Token ids / targets in [lo, hi) on both backends.
  struct IntPair {
    DeviceBuffer<int32_t> cpu;
    DeviceBuffer<int32_t> gpu;
  };
  IntPair ints(size_t n, int32_t lo, int32_t hi) {
    const std::vector<int32_t> v = random_ints(gen_, n, lo, hi);
    IntPair p{DeviceBuffer<int32_t>(cpu_, static_cast<int64_t>(n)),
              DeviceBuffer<int32_t>(gpu_, static_cast<int64_t>(n))};
    cpu_.upload(p.cpu.span(), v);
    gpu_.upload(p.gpu.span(), v);
    return p;
  }

  std::vector<float> random_floats(size_t n, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(d(gen_));
    return v;
  }

  /// ||gpu - cpu|| / ||cpu|| of an operand (+inf when the GPU side has a non-finite element).
  double error(const Pair& p) {
    const std::vector<float> g = p.gpu_host(gpu_);
    std::vector<double> out(g.begin(), g.end());
    std::vector<double> ref(p.cpu.data(), p.cpu.data() + p.cpu.size());
    return relative_error(out, ref);
  }

 private:
  Tensor nan_tensor(size_t n) {
    Tensor t(gpu_, static_cast<int64_t>(n));
    if (n > 0) gpu_.upload(t, std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
    return t;
  }

  uint64_t seed_;
  std::mt19937_64 gen_;
  cpu::CpuBackend cpu_;
  CudaBackend gpu_;
};

/// Expects `pair`'s GPU result within `bound` of the CPU result; names the operand and seed.
#define TRAINTWIN_EXPECT_CLOSE(bp, operand, bound)                                          \
  EXPECT_LE((bp).error(operand), (bound)) << #operand << " (seed " << (bp).seed() << ")"

}  // namespace traintwin::exec::cuda::testing
