// This host as a device of the CPU backend: its identity for a cost database (CPU model, cores,
// clock, memory, the GEMM threads each rank runs on, the BLAS library) and the rule that shares
// its cores among the ranks it runs.
#pragma once

#include <cstdint>
#include <string>

#include "traces/cost_db.hpp"

namespace traintwin::exec::cpu {

/// Cores of this host (std::thread::hardware_concurrency, at least 1).
int host_cores();

/// GEMM threads of each of `local_ranks` ranks on this host: the cores shared among them, at
/// least one each (the rule `traintwin train` applies under mpirun and `traintwin profile`
/// measures with). Throws InvalidArgument for local_ranks < 1.
int threads_per_rank(int local_ranks);

/// GEMM threads of each of `local_ranks` ranks on this host, the one rule of every command that
/// runs kernels (train, profile, validate --live), so a profile times its kernels with exactly the
/// threads the live run of that layout uses: `requested` (a --threads flag) when > 0, else
/// OPENBLAS_NUM_THREADS when set (as OpenBLAS itself honours it), else threads_per_rank.
/// Throws InvalidArgument for local_ranks < 1, requested < 0, or an OPENBLAS_NUM_THREADS that is
/// not a positive integer (naming the variable and its value).
int gemm_threads_for(int local_ranks, int requested = 0);

/// Applies gemm_threads_for(local_ranks, requested) to OpenBLAS (set_gemm_threads) and returns the
/// count OpenBLAS then reports (openblas_get_num_threads: what a database's device identity
/// records). Throws as gemm_threads_for.
int use_gemm_threads(int local_ranks, int requested = 0);

/// Last-level cache of this host in bytes (sysfs cache/index3, else index2), 32 MiB when sysfs
/// does not say.
int64_t last_level_cache_bytes();

/// This host's memory in bytes: /proc/meminfo MemTotal (the physical memory the kernel manages),
/// else sysconf's physical pages x page size; 0 when neither says.
int64_t host_memory_bytes();

/// This CPU as a cost-database device: name = /proc/cpuinfo "model name", sm_count = cores,
/// clock_mhz = "cpu MHz" of CPU 0 now, memory_bytes = host_memory_bytes() (>= 1), kind "cpu",
/// threads = `threads`. Throws InvalidArgument for threads < 1.
CostDbDevice host_device(int threads);

/// Versions block of a CPU database: "n/a" for driver, CUDA, cuBLAS and NCCL, traintwin's
/// version, and the BLAS library (openblas_get_config()).
CostDbVersions host_versions();

/// `prefix` + "-" + `name` in lower case with each run of characters other than [a-z0-9] as one
/// '-' (none after the prefix's), e.g. ("cuda", "NVIDIA H100 80GB HBM3") ->
/// "cuda-nvidia-h100-80gb-hbm3": the device ids of traces/db/<id>.json.
std::string device_slug(const std::string& prefix, const std::string& name);

/// The device's name in traintwin: the stem of traces/db/<id>.json and the gpu.name of the
/// topology `traintwin profile --topology-out` writes: "cpu-" + the model name in lower case
/// with runs of other characters than [a-z0-9] as one '-', + "-<threads>t", e.g.
/// "cpu-amd-epyc-7b13-1t". Throws InvalidArgument for a device without threads.
std::string device_id(const CostDbDevice& device);

}  // namespace traintwin::exec::cpu
