// Profile mode of the executor: every distinct kernel of a scenario's Program timed alone through
// the Backend, the way `train` runs it (the same Backend calls as exec/gpt_model*.cpp with the
// Program's shapes), into cost-database rows (traces/cost_db.hpp) under the Program's KernelKey.
//
// Method (as nccl-tests and the usual GPU micro-benchmarks): fresh random inputs (never zeros:
// uniform in [-1, 1), positive where the kernel needs it, token ids in range), rotated over as
// many input sets as make their bytes exceed the working set of a live iteration, capped at
// twice the last-level cache (rotation_bytes), so a timed run finds its inputs in cache when,
// and only when, the live run would; every buffer written when it is made, so no timed
// run pays first-touch page faults a live run does not (exec/profile_inputs.hpp); the outputs
// the model allocates at the kernel allocated again in each timed run, as the live op pays
// their zeroing; `warmup` untimed runs, then `repeats` timed runs (each timed by
// Backend::time_us: the host clock around a synchronized run on the CPU, CUDA events on the GPU);
// median, p10 and p90 of those (nearest-rank percentiles) and their mean. Inputs rotate over at
// least twice the backend's last-level cache (Backend::cache_bytes: the CPU's L3, the GPU's L2),
// which on a GPU is nvbench's L2 flush.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program.hpp"
#include "core/scenario.hpp"
#include "exec/backend.hpp"
#include "exec/communicator.hpp"
#include "traces/cost_db.hpp"

namespace traintwin::exec {

/// A kernel of a Program and the Role of its first use (the Role picks the variant the model
/// runs: a linear layer with or without bias, the embedding's position add, ...).
struct ProfileTarget {
  Kernel kernel;
  Role role = Role::kNone;
  /// The pipeline stages (pp coordinates, ascending) whose ranks run the kernel: under mpirun it
  /// is timed on those ranks only, as in the live run (the LM head runs on the last stage while
  /// the first one waits in its bubble, and a core runs faster while the other one idles).
  std::vector<int64_t> stages;
};

/// Every distinct KernelKey of the scenario's Program over all pipeline stages (the ranks of
/// TP, CP and DP rank 0: the others run the same kernels), in order of first use, with the
/// stages that run each.
std::vector<ProfileTarget> profile_targets(const Scenario& s);

/// The largest collective of the scenario's Program over the same ranks as profile_targets, in
/// bytes (the nccl-tests size of Op::bytes); 0 when it has none. `profile --collectives` with a
/// scenario measures up to it, so the simulator reads its collectives off measured rows rather
/// than extrapolating past the largest one (a DP gradient bucket is often larger than
/// nccl-tests' default -e).
int64_t largest_collective_bytes(const Scenario& s);

struct ProfileOptions {
  int warmup = 3;            ///< untimed runs, >= 0
  int repeats = 20;          ///< timed runs, >= 1
  /// More timed runs until their time adds up to this (seconds, >= 0; Google Benchmark's and
  /// nvbench's min-time), at most kMaxRepeats: the mean of a short kernel then samples the
  /// host's interruptions over as long a window as a long kernel's does.
  double min_time_s = 0.05;
  static constexpr int kMaxRepeats = 100000;
  /// Input sets are added until their bytes exceed this. 0: rotation_bytes() of the kernel.
  int64_t rotate_bytes = 0;
  uint64_t seed = 1;         ///< of the random inputs
  /// bf16 linear-layer GEMMs timed alone on bf16 operands in memory, as Megatron-LM runs them
  /// (it keeps activations in bf16 between kernels): rows for databases that simulate Megatron
  /// clusters (traces/db/<GPU>.json). false (the default): as `train` runs them, with the
  /// executor's roundings of its fp32 activations to bf16 on entry and widenings on exit
  /// (exec/linear.hpp LinearLayers), the rows `validate --live` predicts this executor with.
  bool bf16_activations = false;
};

/// How much memory a kernel's input sets rotate over: the smaller of twice the last-level cache
/// (`llc_bytes`) and the memory the ranks running it hold (core/memory.hpp stage_memory of the
/// target's stages, the largest: weights, gradients, optimizer state, activations), the working
/// set a live iteration cycles through between two runs of the kernel. A rank whose whole state
/// fits in the cache finds a kernel's inputs there live, and so does the profile (a tiny model's
/// GEMMs ran 30-80 % longer cold than live); a larger one finds them cold in both.
int64_t rotation_bytes(const Scenario& s, const ProfileTarget& target, int64_t llc_bytes);

/// Throws UnsupportedError (naming the kernel and why) unless `backend` runs `key` in its
/// dtype, so that no row is ever another dtype's time under this one's name: fp32 (and tf32 /
/// fp32-bf16, which Backend::set_float32_matmul_precision checks) on every backend; bf16 and
/// fp8 GEMMs (gemm_*, grouped_gemm_*) on a backend with that arithmetic
/// (Backend::has_bf16_arithmetic, has_fp8_arithmetic), fp8 under `s`'s per-tensor recipes
/// (delayed, tensorwise) only; the other kernels of a bf16 scenario on a backend with bf16
/// arithmetic, as the executor runs them in bf16 training (fp32 storage, bf16 attention
/// products: exec/linear.hpp), never on one that emulates bf16; fp16 nowhere yet. profile_kernel calls it;
/// `profile` calls it on every kernel before timing any.
void check_runs_dtype(const Backend& backend, const Scenario& s, const KernelKey& key);

/// Times `target` alone on `backend` (scenario `s` gives what the key does not: hidden size,
/// micro-batch, dropout probabilities, AdamW settings). The row carries the Program's FLOPs and
/// bytes. Throws UnsupportedError for a kernel name the model does not run, InvalidArgument for
/// bad options (warmup < 0, repeats < 1, rotate_bytes < 0, min_time_s < 0 or not finite).
KernelMeasurement profile_kernel(Backend& backend, const Scenario& s, const ProfileTarget& target,
                                 const ProfileOptions& options);

/// One collective timed over the world of a communicator, in nccl-tests' terms.
struct CollectiveTiming {
  std::string op;       ///< all_reduce | all_gather | reduce_scatter | send_recv
  int64_t bytes = 0;    ///< nccl-tests "size": all_reduce the buffer, all_gather the output,
                        ///< reduce_scatter the input, send_recv the message
  int64_t count = 0;    ///< fp32 elements of `bytes`
  int64_t ranks = 0;    ///< world size
  double time_us = 0;   ///< mean over the timed runs, the slowest rank's
};

/// Times all_reduce (sum), all_gather, reduce_scatter (sum) and send_recv (each rank sends to
/// rank + 1 and receives from rank - 1, as nccl-tests' sendrecv) over the world of `comm`
/// (kWorld) at every size: `warmup` untimed runs, then `repeats` runs timed together between
/// barriers (nccl-tests' -w and -n), buffers of random values. Collective over the world: every
/// rank calls it with the same arguments and gets the same rows. Throws InvalidArgument for a
/// world of one rank or bad counts.
std::vector<CollectiveTiming> profile_collectives(Communicator& comm,
                                                  const std::vector<int64_t>& sizes, int warmup,
                                                  int repeats);

/// Host bytes one rank of profile_collectives() holds at a size of `bytes`: its two fp32 buffers
/// of that size and about as much again for the MPI library's temporary (Open MPI's all-reduce
/// and reduce-scatter of a large buffer; a rank grew to ~3x the size under mpirun).
constexpr int64_t kCollectiveProfileBuffersPerRank = 3;

/// Refuses, before anything is allocated, collective sizes that cannot fit this host: throws
/// InvalidArgument naming -e/--maxbytes, the bytes needed (kCollectiveProfileBuffersPerRank x
/// `largest_bytes` x `ranks_on_host`), `host_memory_bytes` and the largest -e that fits, when
/// the need exceeds the host's memory. `ranks_on_host` >= 1 (the launcher's ranks on this node);
/// a `host_memory_bytes` <= 0 (unknown) accepts any size.
void check_collective_sizes_fit_host(int64_t largest_bytes, int64_t ranks_on_host,
                                     int64_t host_memory_bytes);

/// Adds `rows` to `db`, replacing rows of the same key (a second profile run updates a
/// database instead of failing on duplicates).
void merge_measurements(CostDatabase& db, const std::vector<KernelMeasurement>& rows);
/// Same for collective rows (same op, ranks, nodes, algorithm and bytes replaced).
void merge_measurements(CostDatabase& db, const std::vector<CollectiveMeasurement>& rows);

/// The database at `file` when it exists, else an empty one of `device`; refuses (throws
/// CostDatabaseError naming the file and both devices) one of another device
/// (CostDbDevice::same_device), and rethrows a malformed file's CostDatabaseError.
CostDatabase open_database_for(const std::filesystem::path& file, const CostDbDevice& device,
                               const CostDbVersions& versions);

}  // namespace traintwin::exec
