// The executor backend a command runs on (`--backend cpu|cuda` of train, profile and
// validate --live): the one place that knows which backends this build has. Next in the flow:
// the Backend goes to exec::Trainer / exec::profile_kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/backend.hpp"
#include "traces/cost_db.hpp"

namespace traintwin::cli {

/// The backends this build can run: {"cpu"} or {"cpu", "cuda"} (built with CUDA).
std::vector<std::string> built_backends();

/// A new backend named `name` ("cpu", or "cuda": device local_rank modulo the visible devices,
/// as Megatron picks a rank's GPU). Throws UnsupportedError for "cuda" in a build without CUDA
/// (naming how to build it), CudaError when no CUDA device is visible, InvalidArgument for
/// another name (listing the allowed ones).
std::unique_ptr<exec::Backend> make_backend(const std::string& name, int64_t local_rank = 0);

/// Device-side facts of `backend` for a log or database header ("cpu": empty), e.g.
/// "NVIDIA H100 80GB HBM3, 132 SMs, sm_90, driver 13000, runtime 13000, cuBLASLt 130100".
std::string backend_device_description(const exec::Backend& backend);

/// The high-water mark of device memory the backend's allocator handed out (CUDA: the pool's
/// cudaMemPoolAttrUsedMemHigh, as torch.cuda.max_memory_allocated), in bytes; nothing for the
/// CPU backend.
std::optional<int64_t> backend_peak_memory_bytes(const exec::Backend& backend);

/// The device block of a cost database measured on `backend`: the host CPU
/// (exec::cpu::host_device with `threads` GEMM threads), or the GPU (name, SMs, max SM clock,
/// memory, compute capability, kind "gpu").
CostDbDevice backend_cost_device(const exec::Backend& backend, int threads);

/// Its versions block: the CPU's (BLAS), or the GPU's driver, CUDA runtime and cuBLASLt
/// versions (NCCL "n/a": kernel rows only).
CostDbVersions backend_versions(const exec::Backend& backend);

/// The stem of traces/db/<id>.json for a database measured on `backend`: exec::cpu::device_id
/// for the CPU, "cuda-" + the GPU's name in lower case with runs of other characters than
/// [a-z0-9] as one '-' for CUDA (e.g. "cuda-nvidia-h100-80gb-hbm3").
std::string backend_device_id(const exec::Backend& backend, const CostDbDevice& device);

}  // namespace traintwin::cli
