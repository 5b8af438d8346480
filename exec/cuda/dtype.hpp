// Storage types of the CUDA backend's tensors. Public launchers take a DType and untyped device
// pointers (`void*`) so that these headers stay plain C++ (no cuda_bf16.h types in signatures);
// each .cu file instantiates its kernels for the three types and dispatches on the DType.
// Arithmetic is always fp32 (mixed precision as Megatron-LM: bf16/fp16 activations and model
// weights, fp32 statistics, weight gradients, master weights and optimizer state).
#pragma once

#include <cstddef>
#include <string>

#include "core/error.hpp"

namespace traintwin::exec::cuda {

/// Element type of an activation / model-weight tensor on the device.
enum class DType {
  kFloat32,   ///< IEEE binary32 (float)
  kBFloat16,  ///< bfloat16 (__nv_bfloat16): 8 exponent bits, 7 mantissa bits
  kFloat16,   ///< IEEE binary16 (__half): 5 exponent bits, 10 mantissa bits
};

/// Bytes per element: 4, 2, 2. Throws InvalidArgument for a value outside the enum.
inline size_t dtype_size_bytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
  }
  throw InvalidArgument("cuda dtype: unknown DType " + std::to_string(static_cast<int>(dtype)) +
                        " (allowed: kFloat32, kBFloat16, kFloat16)");
}

/// "fp32", "bf16", "fp16". Throws InvalidArgument for a value outside the enum.
inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "fp32";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
  }
  throw InvalidArgument("cuda dtype: unknown DType " + std::to_string(static_cast<int>(dtype)) +
                        " (allowed: kFloat32, kBFloat16, kFloat16)");
}

}  // namespace traintwin::exec::cuda
