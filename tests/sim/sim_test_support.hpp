// Helpers shared by the simulator tests.
#pragma once

#include <map>
#include <string>

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

}  // namespace traintwin::testing
