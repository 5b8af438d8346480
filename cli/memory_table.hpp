// The per-stage memory table printed by `memory` and `summary`.
#pragma once

#include <string>

#include "core/scenario.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {

/// One row per pipeline stage (weights, gradients, optimizer, activations, embedding/logits,
/// total) against the GPU's memory, and a verdict line naming the stage that does not fit and by
/// how much.
std::string memory_table(const Scenario& s, const TopologySpec& topo);

}  // namespace traintwin::cli
