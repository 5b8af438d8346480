// Helpers of the CUDA backend's tests (tests/gpu/): the skip when no device is visible, device
// buffers that round host float64 data to a storage type, NaN poisoning, fresh random inputs and
// the ||out - ref|| / ||ref|| check of /work/.library/device/METHOD.md with per-type bounds.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "exec/cuda/cuda_check.hpp"
#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda::testing {

/// std::nullopt when a CUDA device is visible, else
/// "no CUDA device (cudaGetDeviceCount: <error string>)".
inline std::optional<std::string> no_device_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return "no CUDA device (cudaGetDeviceCount: " + std::string(cudaGetErrorString(status)) + ")";
  }
  if (count == 0) return std::string("no CUDA device (cudaGetDeviceCount: 0 devices)");
  return std::nullopt;
}

/// First statement of every test that needs a device: skips it when there is none.
#define TRAINTWIN_REQUIRE_GPU()                                                          \
  do {                                                                                   \
    if (auto why = ::traintwin::exec::cuda::testing::no_device_reason()) GTEST_SKIP() << *why; \
  } while (0)

/// The three storage types, for loops over them.
inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> kAll = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  return kAll;
}

/// Bound on ||out - ref|| / ||ref|| for results stored in `dtype` (METHOD.md: fp32 arithmetic
/// far under 1e-3; bf16 between 1e-3 and 1e-2; fp16, 3 more mantissa bits, in between).
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 1e-5;
    case DType::kFloat16: return 5e-3;
    case DType::kBFloat16: return 1e-2;
  }
  return 0;
}

/// x rounded to `dtype` (round to nearest even) and back to double.
inline double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<float>(x);
    case DType::kBFloat16: return __bfloat162float(__float2bfloat16(static_cast<float>(x)));
    case DType::kFloat16: return __half2float(__float2half(static_cast<float>(x)));
  }
  return x;
}

inline std::vector<double> round_all(DType dtype, std::vector<double> values) {
  for (double& x : values) x = round_to(dtype, x);
  return values;
}

/// A device allocation of n elements of `dtype` (freed on destruction).
class DeviceTensor {
 public:
  DeviceTensor(DType dtype, size_t n) : dtype_(dtype), n_(n) {
    TRAINTWIN_CUDA_CHECK(cudaMalloc(&ptr_, bytes()));
  }
  /// Allocates and uploads `values` rounded to dtype.
  DeviceTensor(DType dtype, const std::vector<double>& values) : DeviceTensor(dtype, values.size()) {
    upload(values);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { cudaFree(ptr_); }

  size_t bytes() const { return n_ * dtype_size_bytes(dtype_); }
  size_t size() const { return n_; }
  void* get() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }

  void upload(const std::vector<double>& values) {
    if (values.size() != n_) throw std::runtime_error("DeviceTensor::upload: size mismatch");
    std::vector<unsigned char> host(bytes());
    for (size_t i = 0; i < n_; ++i) {
      const auto x = static_cast<float>(values[i]);
      switch (dtype_) {
        case DType::kFloat32: std::memcpy(&host[4 * i], &x, 4); break;
        case DType::kBFloat16: {
          const __nv_bfloat16 b = __float2bfloat16(x);
          std::memcpy(&host[2 * i], &b, 2);
          break;
        }
        case DType::kFloat16: {
          const __half h = __float2half(x);
          std::memcpy(&host[2 * i], &h, 2);
          break;
        }
      }
    }
    TRAINTWIN_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }

  /// Synchronizes the device (surfacing asynchronous kernel errors) and downloads.
  std::vector<double> download() const {
    TRAINTWIN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> host(bytes());
    TRAINTWIN_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    std::vector<double> values(n_);
    for (size_t i = 0; i < n_; ++i) {
      switch (dtype_) {
        case DType::kFloat32: {
          float x;
          std::memcpy(&x, &host[4 * i], 4);
          values[i] = x;
          break;
        }
        case DType::kBFloat16: {
          __nv_bfloat16 b;
          std::memcpy(&b, &host[2 * i], 2);
          values[i] = __bfloat162float(b);
          break;
        }
        case DType::kFloat16: {
          __half h;
          std::memcpy(&h, &host[2 * i], 2);
          values[i] = __half2float(h);
          break;
        }
      }
    }
    return values;
  }

  /// Every element NaN (so that an element the kernel does not write shows).
  void poison() { upload(std::vector<double>(n_, std::numeric_limits<double>::quiet_NaN())); }

 private:
  DType dtype_;
  size_t n_;
  void* ptr_ = nullptr;
};

/// Device copy of int32 data (token ids, targets).
class DeviceInts {
 public:
  explicit DeviceInts(const std::vector<int32_t>& values) : n_(values.size()) {
    TRAINTWIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(int32_t)));
    TRAINTWIN_CUDA_CHECK(
        cudaMemcpy(ptr_, values.data(), n_ * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  ~DeviceInts() { cudaFree(ptr_); }
  const int32_t* get() const { return ptr_; }

 private:
  size_t n_;
  int32_t* ptr_ = nullptr;
};

/// A generator seeded from std::random_device: fresh inputs on every run (the seed is printed
/// with SCOPED_TRACE by the tests, to replay a failure).
inline uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

inline std::vector<double> random_vec(std::mt19937_64& gen, size_t n, double lo = -1.0,
                                      double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

inline std::vector<int32_t> random_ints(std::mt19937_64& gen, size_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

/// ||out - ref|| / ||ref||; +inf when a size differs or any element of out is not finite
/// (NaN never passes); 0 when both are all zeros.
inline double relative_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double diff = 0;
  double norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    diff += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  if (norm == 0) return diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff / norm);
}

/// Index of the first element that is not finite (an unwritten poisoned element), or -1.
inline int64_t first_non_finite(const std::vector<double>& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

/// Every element written (finite) and ||out - ref|| / ||ref|| < bound.
inline void expect_close(const std::vector<double>& out, const std::vector<double>& ref,
                         double bound, const std::string& name) {
  EXPECT_EQ(first_non_finite(out), -1) << name << ": an element was not written (NaN poison)";
  const double rel = relative_error(out, ref);
  EXPECT_LT(rel, bound) << name << ": ||out - ref|| / ||ref|| = " << rel;
}

}  // namespace traintwin::exec::cuda::testing
