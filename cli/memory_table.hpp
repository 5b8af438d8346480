// The per-stage memory table printed by `memory` and `summary`.
#pragma once

#include <string>

#include <vector>

#include "core/memory.hpp"
#include "core/scenario.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {

/// One row per pipeline stage (weights, gradients, optimizer, activations, embedding/logits,
/// total) against the GPU's memory, and a verdict line naming the stage that does not fit and by
/// how much.
std::string memory_table(const Scenario& s, const TopologySpec& topo);

/// With CPU offload (training.optimizer_cpu_offload, training.cpu_offloading): what is offloaded
/// and the host memory of the stage that needs most (StageMemory::host_*_bytes) against the
/// topology's gpu.host_link.host_memory, with host_memory_verdict()'s verdict ("does NOT fit in
/// host memory" above it); "" without offload.
std::string host_memory_lines(const Scenario& s, const TopologySpec& topo,
                              const std::vector<StageMemory>& stages);

}  // namespace traintwin::cli
