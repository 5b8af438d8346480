// Error checking for the CUDA backend (exec/cuda/): every CUDA runtime call and every kernel
// launch goes through TRAINTWIN_CUDA_CHECK / TRAINTWIN_CUDA_CHECK_LAUNCH, which throw CudaError
// naming the file:line, the call and the runtime's own error text (cudaGetErrorString).
// Plain C++: includes only <cuda_runtime_api.h>.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/error.hpp"

namespace traintwin::exec::cuda {

/// The CUDA runtime, cuBLAS or cuBLASLt reported a failure. The message reads
/// "<file>:<line>: <call> failed: <error name>: <error string>".
class CudaError : public Error {
 public:
  using Error::Error;
};

/// Throws CudaError for `status` != cudaSuccess; `call` is the expression text, `file`/`line`
/// where it was made. Also clears the runtime's sticky last-error state for non-sticky errors
/// (cudaGetLastError) so that a later check reports its own failure.
inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call +
                  " failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

}  // namespace traintwin::exec::cuda

/// Checks a CUDA runtime call; throws traintwin::exec::cuda::CudaError on failure.
#define TRAINTWIN_CUDA_CHECK(call) \
  ::traintwin::exec::cuda::check_cuda((call), #call, __FILE__, __LINE__)

/// Checks the launch just made (cudaGetLastError: bad configuration, missing kernel image).
/// Asynchronous execution errors surface at the next synchronizing call's check.
#define TRAINTWIN_CUDA_CHECK_LAUNCH() \
  ::traintwin::exec::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
