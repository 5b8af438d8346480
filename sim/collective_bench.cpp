#include "sim/collective_bench.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "sim/collectives.hpp"

namespace traintwin {
namespace {

/// A layout in which group kind kTp is one node's GPUs and kDp one GPU per node.
RankLayout bench_layout(const TopologySpec& topo, int64_t num_gpus) {
  const int64_t gpn = std::min(topo.node.gpus_per_node, num_gpus);
  return RankLayout(gpn, 1, num_gpus / gpn, 1, "tp-cp-dp-pp");
}

GroupKind group_kind(BenchGroup g) {
  switch (g) {
    case BenchGroup::kTp: return GroupKind::kTp;
    case BenchGroup::kDp: return GroupKind::kDp;
    case BenchGroup::kAll: return GroupKind::kWorld;
  }
  return GroupKind::kWorld;
}

}  // namespace

BenchGroup parse_bench_group(const std::string& text) {
  if (text == "tp") return BenchGroup::kTp;
  if (text == "dp") return BenchGroup::kDp;
  if (text == "all") return BenchGroup::kAll;
  throw ConfigError("--group: '" + text + "' unknown (allowed: tp, dp, all)");
}

std::vector<int64_t> bench_group_members(BenchGroup group, const TopologySpec& topo, int64_t num_gpus,
                                         int64_t node) {
  const RankLayout layout = bench_layout(topo, num_gpus);
  const int64_t gpn = layout.size(GroupKind::kTp);
  const int64_t nodes = num_gpus / gpn;
  if (node != 0 && group != BenchGroup::kTp) {
    throw ConfigError(fmt::format("--node {}: only --group tp runs on one node (dp and all span "
                                  "every node of the cluster)",
                                  node));
  }
  if (node < 0 || node >= nodes) {
    throw ConfigError(fmt::format(
        "--node {}: a cluster of --num-gpus {} has nodes 0..{} of {} GPUs each (allowed: 0..{}{})",
        node, num_gpus, nodes - 1, gpn, nodes - 1,
        node >= nodes && node < std::numeric_limits<int64_t>::max() / gpn - 1
            ? fmt::format("; --num-gpus {} reaches node {}", (node + 1) * gpn, node)
            : std::string()));
  }
  return layout.group(group_kind(group), node * gpn);
}

int64_t first_node_of_group(const TopologySpec& topo, const std::string& name) {
  int64_t first = 0;
  std::vector<std::string> names;
  for (const NodeGroup& g : topo.node_groups) {
    if (g.name == name) return first;
    names.push_back(g.name);
    first += g.nodes;
  }
  throw ConfigError(fmt::format(
      "--node-group '{}': topology '{}' has {} (the nodes after the groups, {} on, are of its "
      "own gpu {}: --node {})",
      name, topo.name,
      names.empty() ? std::string("no node_groups")
                    : fmt::format("node_groups {}", fmt::join(names, ", ")),
      first, topo.gpu.name, first));
}

CollectiveRow simulate_collective(const TopologySpec& topo, int64_t num_gpus, CollectiveKind kind,
                                  BenchGroup group, int64_t bytes, const SimulationOptions& opts,
                                  int64_t node) {
  const RankLayout layout = bench_layout(topo, num_gpus);
  const GroupKind g = group_kind(group);
  Scenario s;
  s.name = "collective";
  s.cluster.num_gpus = num_gpus;
  Program prog{s, layout, {}, {}};
  const std::vector<int64_t> members = bench_group_members(group, topo, num_gpus, node);
  for (int64_t r = 0; r < num_gpus; ++r) {
    RankProgram rp;
    rp.rank = r;
    rp.coord = layout.coord(r);
    if (std::find(members.begin(), members.end(), r) != members.end()) {
      Op op;
      op.kind = OpKind::kCollective;
      op.stream = Stream::kDpComm;
      op.collective = kind;
      op.group = g;
      op.bytes = bytes;
      op.what = to_string(kind);
      rp.ops.push_back(op);
    }
    prog.ranks.emplace(r, std::move(rp));
  }
  class NoCompute : public CostModel {
   public:
    KernelCost duration(const Kernel&, const GpuSpec&) const override { return {}; }
  } costs;
  SimulationOptions o = opts;
  o.record_timeline = false;
  const SimulationResult r = simulate_program(prog, topo, costs, o);
  CollectiveRow row;
  row.bytes = bytes;
  row.count = bytes / 4;
  row.time_us = r.iteration_time_s * 1e6;
  const double n = static_cast<double>(members.size());
  row.algbw_GBps = r.iteration_time_s > 0 ? static_cast<double>(bytes) / r.iteration_time_s / 1e9 : 0;
  row.busbw_GBps = row.algbw_GBps * busbw_factor(kind, static_cast<int64_t>(n));
  for (const auto& [name, calls] : r.collective_protocols) {
    const size_t slash = name.find('/');
    row.algorithm += (row.algorithm.empty() ? "" : ",") + name.substr(0, slash);
    row.protocol += (row.protocol.empty() ? "" : ",") + name.substr(slash + 1);
  }
  return row;
}

std::vector<int64_t> nccl_tests_sizes(int64_t min_bytes, int64_t max_bytes) {
  if (min_bytes < 1 || max_bytes < min_bytes) {
    throw InvalidArgument("nccl_tests_sizes: need 1 <= min_bytes <= max_bytes, got " +
                          std::to_string(min_bytes) + " and " + std::to_string(max_bytes));
  }
  std::vector<int64_t> sizes;
  for (int64_t b = min_bytes;; b *= 2) {
    sizes.push_back(b);
    if (b > max_bytes / 2) break;  // the next size would pass max_bytes (or overflow)
  }
  return sizes;
}

void to_json(nlohmann::json& j, const CollectiveRow& r) {
  j = nlohmann::json{{"bytes", r.bytes},           {"count", r.count},
                     {"time_us", r.time_us},       {"algbw_GBps", r.algbw_GBps},
                     {"busbw_GBps", r.busbw_GBps}, {"algorithm", r.algorithm},
                     {"protocol", r.protocol}};
}

void from_json(const nlohmann::json& j, CollectiveRow& r) {
  j.at("bytes").get_to(r.bytes);
  j.at("count").get_to(r.count);
  j.at("time_us").get_to(r.time_us);
  j.at("algbw_GBps").get_to(r.algbw_GBps);
  j.at("busbw_GBps").get_to(r.busbw_GBps);
  j.at("algorithm").get_to(r.algorithm);
  j.at("protocol").get_to(r.protocol);
}

}  // namespace traintwin
