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

/// A Program with the duration of every compute op.
class TimedProgram {
 public:
  /// Costs every kernel of `prog` once with `costs` on `gpu` (the only call of
  /// CostModel::duration an engine makes) and sums each compute op's kernels. Throws what the
  /// cost model throws (CostModelError), ConfigError for gpu_speed_scale <= 0 or not finite, a
  /// straggler rank outside the world or a compute_scale <= 0.
  TimedProgram(const Program& prog, const CostModel& costs, const GpuSpec& gpu,
               ComputeScaling scaling = {});

  const Program& program() const { return *prog_; }
  const ComputeScaling& scaling() const { return scaling_; }

  /// Durations (seconds) of the ops of prog.ranks.at(program_rank), by op id: compute ops the
  /// sum of their kernels / gpu_speed_scale, communication ops 0. Shared by every rank that runs
  /// that RankProgram; rank-specific factors come from compute_s(). InvalidArgument for a rank
  /// without a RankProgram.
  const std::vector<double>& durations(int64_t program_rank) const;

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
    return durations(program_rank)[op] * rank_factor(rank);
  }

  /// The cost of kernel `k` (an index into Program::kernels) as the cost model gave it, without
  /// what-if factors.
  const KernelCost& kernel_cost(uint32_t k) const { return kernel_costs_[k]; }

  /// Adds to `out` the compute seconds per cost source of `rank` running program_rank's ops,
  /// what-if factors applied, times `weight` (the number of ranks `rank` stands for). O(cost
  /// sources): the per-source sums of each RankProgram are taken once, in the constructor.
  /// InvalidArgument for a program_rank without a RankProgram.
  void add_compute_by_source(int64_t rank, int64_t program_rank, double weight,
                             std::map<CostSource, double>& out) const;

 private:
  const Program* prog_;
  ComputeScaling scaling_;
  std::vector<KernelCost> kernel_costs_;
  std::map<int64_t, std::vector<double>> durations_;
  std::map<int64_t, std::map<CostSource, double>> by_source_;  // per RankProgram, no factors
};

}  // namespace traintwin
