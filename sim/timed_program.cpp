#include "sim/timed_program.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace traintwin {

TimedProgram::TimedProgram(const Program& prog, const CostModel& costs, const GpuSpec& gpu,
                           ComputeScaling scaling)
    : TimedProgram(prog, costs, JobGpus{{gpu}, {}}, std::move(scaling)) {}

TimedProgram::TimedProgram(const Program& prog, const CostModel& costs, const JobGpus& gpus,
                           ComputeScaling scaling)
    : prog_(&prog), scaling_(std::move(scaling)), gpus_(gpus) {
  if (gpus_.types.empty()) throw InvalidArgument("TimedProgram: no GPU type");
  if (!gpus_.rank_type.empty() &&
      static_cast<int64_t>(gpus_.rank_type.size()) != prog.layout.world_size()) {
    throw InvalidArgument("TimedProgram: " + std::to_string(gpus_.rank_type.size()) +
                          " ranks' GPU types for a world of " +
                          std::to_string(prog.layout.world_size()));
  }
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
  const size_t types = gpus_.types.size();
  kernel_costs_.assign(types, std::vector<KernelCost>(prog.kernels.size()));
  for (size_t g = 0; g < types; ++g) {
    for (size_t k = 0; k < prog.kernels.size(); ++k) {
      if (used[k]) kernel_costs_[g][k] = costs.duration(prog.kernels[k], gpus_.types[g]);
    }
  }
  for (const auto& [r, rp] : prog.ranks) {
    std::vector<std::vector<double>>& per_type = durations_[r];
    std::vector<std::map<CostSource, double>>& sources = by_source_[r];
    per_type.resize(types);
    sources.resize(types);
    for (size_t g = 0; g < types; ++g) {
      const std::vector<KernelCost>& kc = kernel_costs_[g];
      std::vector<double>& d = per_type[g];
      d.assign(rp.ops.size(), 0.0);
      for (const Op& op : rp.ops) {
        if (op.kind == OpKind::kHost) {
          d[op.id] = host_op_s(op, gpus_.types[g]);
          continue;
        }
        if (op.kind != OpKind::kCompute) continue;
        double s = 0;
        for (uint32_t k : op.kernels) s += kc[k].seconds;
        d[op.id] = s / scaling_.gpu_speed_scale;
      }
      // Seconds per cost source of the whole RankProgram, summed once (replays add it per rank).
      for (const Op& op : rp.ops) {
        for (uint32_t k : op.kernels) sources[g][kc[k].source] += kc[k].seconds;
      }
    }
  }
}

double host_op_s(const Op& op, const GpuSpec& gpu) {
  if (op.kind != OpKind::kHost) {
    throw InvalidArgument("host_op_s: op " + std::to_string(op.id) + " is not a host op");
  }
  if (!gpu.host_link) {
    throw ConfigError("simulate: CPU offload needs the GPU's host link; the topology gives no "
                      "gpu.host_link for " + gpu.name);
  }
  const HostLinkSpec& h = *gpu.host_link;
  const auto bytes = static_cast<double>(op.bytes);
  switch (op.host) {
    case HostOp::kCopyD2H:
    case HostOp::kCopyH2D: return h.latency_s + bytes / h.bandwidth_Bps;
    case HostOp::kCpuAdamW: return bytes / h.optimizer_bandwidth_Bps;
  }
  return 0;
}

const std::vector<double>& TimedProgram::durations(int64_t program_rank, size_t gpu_type) const {
  auto it = durations_.find(program_rank);
  if (it == durations_.end()) {
    throw InvalidArgument("TimedProgram: no Program lowered for rank " + std::to_string(program_rank));
  }
  if (gpu_type >= it->second.size()) {
    throw InvalidArgument("TimedProgram: no GPU type " + std::to_string(gpu_type));
  }
  return it->second[gpu_type];
}

void TimedProgram::add_compute_by_source(int64_t rank, int64_t program_rank, double weight,
                                         std::map<CostSource, double>& out) const {
  const double factor = rank_factor(rank) / scaling_.gpu_speed_scale * weight;
  auto it = by_source_.find(program_rank);
  if (it == by_source_.end()) {
    throw InvalidArgument("TimedProgram: no Program lowered for rank " + std::to_string(program_rank));
  }
  for (const auto& [source, seconds] : it->second[gpu_type(rank)]) out[source] += seconds * factor;
}

}  // namespace traintwin
