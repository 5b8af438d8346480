// Checks on a simulation's knobs (see simulation_options.hpp).
#include "sim/simulation_options.hpp"

#include "core/error.hpp"

namespace traintwin {

std::string tp_aggregation_blocker(const RankLayout& layout, const TopologySpec& topo,
                                   const SimulationOptions& opts, bool expert_groups) {
  const int64_t tp = layout.size(GroupKind::kTp);
  if (tp <= 1) return "TP is 1";
  if (layout.order().rfind("tp", 0) != 0 || topo.node.gpus_per_node % tp != 0) {
    return "TP " + std::to_string(tp) + " groups are not consecutive GPUs of one node of " +
           std::to_string(topo.node.gpus_per_node) + " (rank order " + layout.order() + ")";
  }
  if (topo.nic.nics_per_node != topo.node.gpus_per_node) {
    return std::to_string(topo.nic.nics_per_node) + " NIC rails for " +
           std::to_string(topo.node.gpus_per_node) + " GPUs per node";
  }
  if (opts.straggler && !opts.straggler_tp_group) return "a straggler";
  if (!opts.scaling.degraded_links.empty()) return "a degraded link";
  if (!topo.fabric.ports_down.empty()) return "a NIC port down (fabric.ports_down)";
  if (topo.has_overrides()) return "link or switch overrides (link_overrides, switch_overrides)";
  if (opts.trace_all_ranks) return "every rank traced";
  for (int64_t r : opts.trace_ranks) {
    if (r >= 0 && r < layout.world_size() && layout.coord(r).tp != 0) {
      return "traced rank " + std::to_string(r) + " is not TP rank 0";
    }
  }
  // A group spanning TP completes once its TP-rank-0 members have arrived: every group of the
  // kind needs the same number of them, at least one.
  std::vector<GroupKind> kinds = {GroupKind::kCp,        GroupKind::kDp,
                                  GroupKind::kPp,        GroupKind::kDpCp,
                                  GroupKind::kEmbedding, GroupKind::kModelParallel,
                                  GroupKind::kWorld,     GroupKind::kTpDpCp};
  if (expert_groups) {
    kinds.insert(kinds.end(),
                 {GroupKind::kEp, GroupKind::kEtp, GroupKind::kEdp, GroupKind::kEtpEp});
  }
  const int64_t world = layout.world_size();
  for (GroupKind g : kinds) {
    bool spans = false;
    for (int64_t r : layout.group(g, 0)) spans = spans || layout.coord(r).tp != 0;
    if (!spans) continue;
    std::vector<int64_t> tp0(static_cast<size_t>(world), 0), members(static_cast<size_t>(world), 0);
    for (int64_t r = 0; r < world; ++r) {
      const auto i = static_cast<size_t>(layout.group_index(g, r));
      ++members[i];
      if (layout.coord(r).tp == 0) ++tp0[i];
    }
    int64_t want = -1;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] == 0) continue;
      if (want < 0) want = tp0[i];
      if (tp0[i] == 0 || tp0[i] != want) {
        return std::string(to_string(g)) +
               " groups do not each hold the same number (>= 1) of "
               "TP rank 0 ranks";
      }
    }
  }
  return "";
}

SimulationOptions with_what_if(SimulationOptions opts, const WhatIf& what_if) {
  opts.scaling.ib_bandwidth *= what_if.ib_bandwidth_scale.value_or(1.0);
  opts.scaling.nvlink_bandwidth *= what_if.nvlink_bandwidth_scale.value_or(1.0);
  opts.gpu_speed_scale *= what_if.gpu_speed_scale.value_or(1.0);
  if (what_if.degraded_link) opts.scaling.degraded_links.push_back(*what_if.degraded_link);
  if (what_if.straggler) {
    if (opts.straggler) {
      throw InvalidArgument("simulate: a straggler is set in both the options (rank " +
                            std::to_string(opts.straggler->rank) + ") and the scenario (rank " +
                            std::to_string(what_if.straggler->rank) + "); give one");
    }
    opts.straggler = what_if.straggler;
  }
  return opts;
}

void check_what_if(const Scenario& s, const TopologySpec& topo, bool aggregate_tp) {
  const WhatIf& w = s.cluster.what_if;
  const std::string where = s.source.empty() ? "scenario '" + s.name + "'" : s.source.string();
  if (aggregate_tp && s.parallel.tensor_model_parallel_size > 1 &&
      (w.straggler || w.degraded_link)) {
    throw ConfigError(where + ": cluster.what_if." + (w.straggler ? "straggler" : "degraded_link") +
                      ": cannot be simulated with TP aggregation (--aggregate-tp replays TP rank "
                      "0 for its whole TP group and rail 0 for every rail; a straggler or a "
                      "degraded link makes them differ): simulate without it");
  }
  if (w.degraded_link) {
    PlatformScaling scaling;
    scaling.degraded_links.push_back(*w.degraded_link);
    try {
      check_platform_scaling(topo, s.cluster.num_gpus, scaling);
    } catch (const ConfigError& e) {
      throw ConfigError(where + ": cluster.what_if.degraded_link.name: " + e.what());
    }
  }
}

}  // namespace traintwin
