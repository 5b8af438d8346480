// The executor backends of this build; see backend_choice.hpp.
#include "cli/backend_choice.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/cpu/host_device.hpp"
#ifdef TRAINTWIN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "exec/cuda/cuda_backend.hpp"
#include "exec/cuda/cuda_check.hpp"
#endif

namespace traintwin::cli {

namespace {

#ifdef TRAINTWIN_HAVE_CUDA
const exec::cuda::CudaBackend* as_cuda(const exec::Backend& backend) {
  return dynamic_cast<const exec::cuda::CudaBackend*>(&backend);
}

/// 13000 -> "13.0"; 130100 (cuBLASLt: major x 10000 + minor x 100 + patch) -> "13.1.0".
std::string version_text(int v, bool three) {
  if (three) return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  return fmt::format("{}.{}", v / 1000, v % 1000 / 10);
}
#endif

}  // namespace

std::vector<std::string> built_backends() {
#ifdef TRAINTWIN_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

std::unique_ptr<exec::Backend> make_backend(const std::string& name, int64_t local_rank) {
  if (name == "cpu") return std::make_unique<exec::cpu::CpuBackend>();
  if (name == "cuda") {
#ifdef TRAINTWIN_HAVE_CUDA
    int count = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
      throw exec::cuda::CudaError(
          fmt::format("--backend cuda: no usable CUDA device (cudaGetDeviceCount: {}); not "
                      "falling back to cpu",
                      e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)));
    }
    return std::make_unique<exec::cuda::CudaBackend>(static_cast<int>(local_rank % count));
#else
    (void)local_rank;
    throw UnsupportedError(
        "--backend cuda: this traintwin was built without CUDA (nvcc >= 12 was not found at "
        "configure time; install the CUDA toolkit under /usr/local/cuda and rebuild)");
#endif
  }
  throw InvalidArgument(fmt::format("--backend {}: unknown backend (allowed: {})", name,
                                    fmt::join(built_backends(), ", ")));
}

std::string backend_device_description(const exec::Backend& backend) {
#ifdef TRAINTWIN_HAVE_CUDA
  if (const auto* cuda = as_cuda(backend)) {
    const exec::cuda::CudaDeviceInfo i = cuda->device_info();
    return fmt::format("{}, {} SMs, sm_{}, {} GiB, max SM clock {} MHz, memory clock {} MHz, "
                       "driver {} (CUDA {}), runtime {}, cuBLASLt {}",
                       i.name, i.sm_count, i.compute_capability, i.memory_bytes >> 30,
                       i.sm_clock_mhz, i.memory_clock_mhz,
                       i.driver_release.empty() ? "?" : i.driver_release,
                       version_text(i.driver_version, false),
                       version_text(i.runtime_version, false), version_text(i.cublas_version, true));
  }
#endif
  (void)backend;
  return "";
}


std::optional<int64_t> backend_peak_memory_bytes(const exec::Backend& backend) {
#ifdef TRAINTWIN_HAVE_CUDA
  if (const auto* cuda = as_cuda(backend)) return cuda->pool_peak_used_bytes();
#endif
  (void)backend;
  return std::nullopt;
}

CostDbDevice backend_cost_device(const exec::Backend& backend, int threads) {
#ifdef TRAINTWIN_HAVE_CUDA
  if (const auto* cuda = as_cuda(backend)) {
    const exec::cuda::CudaDeviceInfo i = cuda->device_info();
    CostDbDevice d;
    d.name = i.name;
    d.sm_count = i.sm_count;
    d.clock_mhz = i.sm_clock_mhz;
    d.memory_bytes = i.memory_bytes;
    d.compute_capability = fmt::format("{}.{}", i.compute_capability / 10,
                                       i.compute_capability % 10);
    d.kind = "gpu";
    return d;
  }
#endif
  (void)backend;
  return exec::cpu::host_device(threads);
}

CostDbVersions backend_versions(const exec::Backend& backend) {
#ifdef TRAINTWIN_HAVE_CUDA
  if (const auto* cuda = as_cuda(backend)) {
    const exec::cuda::CudaDeviceInfo i = cuda->device_info();
    CostDbVersions v;
    v.driver = i.driver_release.empty()
                   ? "CUDA driver API " + version_text(i.driver_version, false)
                   : i.driver_release;
    v.cuda = version_text(i.runtime_version, false);
    v.cublas = version_text(i.cublas_version, true);
    if (i.cudnn_version > 0) v.cudnn = version_text(i.cudnn_version, true);
    v.nccl = "n/a";  // kernels only: the CLI does not link NCCL
    v.traintwin = exec::cpu::host_versions().traintwin;
    return v;
  }
#endif
  (void)backend;
  return exec::cpu::host_versions();
}

std::string backend_device_id(const exec::Backend& backend, const CostDbDevice& device) {
  if (backend.name() == "cpu") return exec::cpu::device_id(device);
  return exec::cpu::device_slug(backend.name(), device.name);
}

}  // namespace traintwin::cli
