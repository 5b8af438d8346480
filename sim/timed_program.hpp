// The timing layer's Program: the lowered Program (core/program.hpp) plus each op's compute
// duration from the cost model, with the compute what-if factors (GPU speed, straggler) applied
// here and nowhere else. Both engines (sim/replay.hpp, sim/analytical.hpp) take their compute
// durations from it; they differ only in how communication takes time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "core/program.hpp"
#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// The compute what-if factors.
struct ComputeScaling {
  /// Every compute op's duration is divided by this (> 0; 2.0 = GPUs twice as fast).
  double gpu_speed_scale = 1.0;
  /// This rank's compute ops (optimizer included) last compute_scale times longer.
  std::optional<Straggler> straggler;
  /// Other ranks slowed as the straggler (sorted; SimulationOptions::straggler_tp_group).
  std::vector<int64_t> straggler_peers;
};

/// Duration (seconds) of host op `op` (OpKind::kHost) on a GPU with `gpu`'s host link
/// (gpu.host_link): a copy latency_s + bytes / bandwidth_Bps (one direction of the link, which
/// this GPU alone uses: no contention with other GPUs' copies is modelled), the CPU AdamW bytes /
/// optimizer_bandwidth_Bps. No what-if factor applies (they scale the GPU). Throws ConfigError
/// when the GPU has no host link, InvalidArgument for an op of another kind.
double host_op_s(const Op& op, const GpuSpec& gpu);

/// A Program with the duration of every compute op and host op.
class TimedProgram {
 public:
  /// Costs every kernel of `prog` once with `costs` on `gpu` (the only call of
  /// CostModel::duration an engine makes) and sums each compute op's kernels. Throws what the
  /// cost model throws (CostModelError), ConfigError for gpu_speed_scale <= 0 or not finite, a
  /// straggler rank outside the world or a compute_scale <= 0.
  TimedProgram(const Program& prog, const CostModel& costs, const GpuSpec& gpu,
               ComputeScaling scaling = {});

  /// The same on a mixed cluster: every kernel costed once per GPU type of `gpus` (job_gpus()
  /// of the topology), each rank timed on its own GPU (`gpus.rank_type`, one entry per rank of
  /// the layout: InvalidArgument otherwise).
  TimedProgram(const Program& prog, const CostModel& costs, const JobGpus& gpus,
               ComputeScaling scaling = {});

  const Program& program() const { return *prog_; }
  const ComputeScaling& scaling() const { return scaling_; }

  /// Durations (seconds) of the ops of prog.ranks.at(program_rank) on GPU type `gpu_type` (0:
  /// the first type, the only one of a homogeneous cluster), by op id: compute ops the sum of
  /// their kernels / gpu_speed_scale, host ops host_op_s() (no factor), communication ops 0. Shared by every rank of that type
  /// that runs that RankProgram; rank-specific factors come from compute_s(). InvalidArgument
  /// for a rank without a RankProgram or an unknown type.
  const std::vector<double>& durations(int64_t program_rank, size_t gpu_type = 0) const;

  /// GPU types the durations are given for (1 on a homogeneous cluster).
  size_t gpu_types() const { return gpus_.types.size(); }
  /// The GPU type `rank` runs on (an index of durations()).
  size_t gpu_type(int64_t rank) const {
    return gpus_.rank_type.empty() ? 0 : gpus_.rank_type[static_cast<size_t>(rank)];
  }

  /// The straggler factor of `rank` (compute_scale on the straggler, 1 elsewhere).
  double rank_factor(int64_t rank) const {
    if (!scaling_.straggler) return 1.0;
    const bool slow =
        scaling_.straggler->rank == rank ||
        std::binary_search(scaling_.straggler_peers.begin(), scaling_.straggler_peers.end(), rank);
    return slow ? scaling_.straggler->compute_scale : 1.0;
  }

  /// Duration of op `op` of program_rank's RankProgram when `rank` runs it: every factor applied.
  double compute_s(int64_t rank, int64_t program_rank, uint32_t op) const {
    return durations(program_rank, gpu_type(rank))[op] * rank_factor(rank);
  }

  /// The cost of kernel `k` (an index into Program::kernels) on GPU type `gpu_type` as the cost
  /// model gave it, without what-if factors.
  const KernelCost& kernel_cost(uint32_t k, size_t gpu_type = 0) const {
    return kernel_costs_[gpu_type][k];
  }

  /// Adds to `out` the compute seconds per cost source of `rank` running program_rank's ops,
  /// what-if factors applied, times `weight` (the number of ranks `rank` stands for). O(cost
  /// sources): the per-source sums of each RankProgram are taken once, in the constructor.
  /// InvalidArgument for a program_rank without a RankProgram.
  void add_compute_by_source(int64_t rank, int64_t program_rank, double weight,
                             std::map<CostSource, double>& out) const;

 private:
  const Program* prog_;
  ComputeScaling scaling_;
  JobGpus gpus_;                                     // rank_type empty: one type
  std::vector<std::vector<KernelCost>> kernel_costs_;  // [gpu type][kernel]
  // Per RankProgram, [gpu type]: op durations; compute seconds per cost source (no factors).
  std::map<int64_t, std::vector<std::vector<double>>> durations_;
  std::map<int64_t, std::vector<std::map<CostSource, double>>> by_source_;
};

}  // namespace traintwin
