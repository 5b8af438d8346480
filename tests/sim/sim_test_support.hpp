// Helpers shared by the simulator tests.
#pragma once

#include <map>
#include <string>

#include "core/program.hpp"
#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "topologies/topology.hpp"

namespace traintwin::testing {

/// The shipped DGX H100 SuperPOD topology.
inline TopologySpec h100() {
  return load_topology(std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/dgx-h100-superpod.yaml");
}

/// Costs by kernel name (seconds); every other kernel is free (an empty table: no compute).
class TableCostModel : public CostModel {
 public:
  explicit TableCostModel(std::map<std::string, double> s = {}) : s_(std::move(s)) {}
  KernelCost duration(const Kernel& k, const GpuSpec&) const override {
    auto it = s_.find(k.key.name);
    return {it == s_.end() ? 0.0 : it->second, CostSource::kRoofline};
  }

 private:
  std::map<std::string, double> s_;
};

/// A Program of `layout` (scenario `s`, its num_gpus set to the layout's world) where every rank
/// runs one all-reduce of `bytes` on `group`, on the TP stream for a TP group, else the DP one.
inline Program one_collective(Scenario s, const RankLayout& layout, GroupKind group,
                              int64_t bytes) {
  s.cluster.num_gpus = layout.world_size();
  Program prog{s, layout, {}, {}};
  for (int64_t r = 0; r < layout.world_size(); ++r) {
    RankProgram rp;
    rp.rank = r;
    rp.coord = layout.coord(r);
    Op op;
    op.kind = OpKind::kCollective;
    op.stream = group == GroupKind::kTp ? Stream::kTpComm : Stream::kDpComm;
    op.phase = Phase::kGradSync;
    op.group = group;
    op.bytes = bytes;
    op.what = "all_reduce";
    rp.ops.push_back(op);
    prog.ranks.emplace(r, std::move(rp));
  }
  return prog;
}

}  // namespace traintwin::testing
