#include "sim/timed_program.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace traintwin {

TimedProgram::TimedProgram(const Program& prog, const CostModel& costs, const GpuSpec& gpu,
                           ComputeScaling scaling)
    : prog_(&prog), scaling_(std::move(scaling)) {
  if (!(scaling_.gpu_speed_scale > 0) || !std::isfinite(scaling_.gpu_speed_scale)) {
    throw ConfigError("simulate: gpu_speed_scale = " + std::to_string(scaling_.gpu_speed_scale) +
                      " (allowed: a positive factor)");
  }
  if (scaling_.straggler) {
    const Straggler& st = *scaling_.straggler;
    if (st.rank < 0 || st.rank >= prog.layout.world_size() || !(st.compute_scale > 0) ||
        !std::isfinite(st.compute_scale)) {
      throw ConfigError("simulate: straggler rank " + std::to_string(st.rank) +
                        " with compute_scale " + std::to_string(st.compute_scale) +
                        " (allowed: a rank in [0, " + std::to_string(prog.layout.world_size()) +
                        ") and a positive factor)");
    }
  }
  // Only the kernels some op uses are costed (a Program's kernel table holds no others, but a
  // cost model may refuse a kernel no op runs).
  std::vector<bool> used(prog.kernels.size(), false);
  for (const auto& [r, rp] : prog.ranks) {
    for (const Op& op : rp.ops) {
      for (uint32_t k : op.kernels) used[k] = true;
    }
  }
  kernel_costs_.resize(prog.kernels.size());
  for (size_t k = 0; k < prog.kernels.size(); ++k) {
    if (used[k]) kernel_costs_[k] = costs.duration(prog.kernels[k], gpu);
  }
  for (const auto& [r, rp] : prog.ranks) {
    std::vector<double>& d = durations_[r];
    d.assign(rp.ops.size(), 0.0);
    for (const Op& op : rp.ops) {
      if (op.kind != OpKind::kCompute) continue;
      double s = 0;
      for (uint32_t k : op.kernels) s += kernel_costs_[k].seconds;
      d[op.id] = s / scaling_.gpu_speed_scale;
    }
    // Seconds per cost source of the whole RankProgram, summed once (replays add it per rank).
    std::map<CostSource, double>& by_source = by_source_[r];
    for (const Op& op : rp.ops) {
      for (uint32_t k : op.kernels) by_source[kernel_costs_[k].source] += kernel_costs_[k].seconds;
    }
  }
}

const std::vector<double>& TimedProgram::durations(int64_t program_rank) const {
  auto it = durations_.find(program_rank);
  if (it == durations_.end()) {
    throw InvalidArgument("TimedProgram: no Program lowered for rank " + std::to_string(program_rank));
  }
  return it->second;
}

void TimedProgram::add_compute_by_source(int64_t rank, int64_t program_rank, double weight,
                                         std::map<CostSource, double>& out) const {
  const double factor = rank_factor(rank) / scaling_.gpu_speed_scale * weight;
  auto it = by_source_.find(program_rank);
  if (it == by_source_.end()) {
    throw InvalidArgument("TimedProgram: no Program lowered for rank " + std::to_string(program_rank));
  }
  for (const auto& [source, seconds] : it->second) out[source] += seconds * factor;
}

}  // namespace traintwin
