// Private to exec/cuda/*.cu: the definition of CublasContext::Handles and the cuBLAS status
// checks (CudaError with file:line and cuBLAS's status name and string).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "exec/cuda/cuda_check.hpp"
#include "exec/cuda/gemm.hpp"

namespace traintwin::exec::cuda {

struct CublasContext::Handles {
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // cuBLASLt workspace, workspace_bytes
};

namespace detail {

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                  cublasGetStatusName(status) + ": " + cublasGetStatusString(status));
}

}  // namespace detail
}  // namespace traintwin::exec::cuda

#define TRAINTWIN_CUBLAS_CHECK(call) \
  ::traintwin::exec::cuda::detail::check_cublas((call), #call, __FILE__, __LINE__)
