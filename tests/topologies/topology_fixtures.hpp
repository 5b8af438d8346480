// Topologies for the graph and platform tests.
#pragma once

#include <fmt/format.h>

#include <string>

#include "topologies/topology.hpp"

namespace traintwin::testing {

/// A small topology: `rails` GPUs (and NICs) per node, NDR-like rates.
inline TopologySpec small_topology(int tiers, int radix, int nodes_per_su,
                                   const std::string& oversubscription, int rails = 2) {
  const std::string yaml = fmt::format(
      "name: small\n"
      "gpu: {{name: G, memory: 80GiB, hbm_bandwidth: 3350GBps,\n"
      "      peak_flops: {{fp32: 67TFLOPs, fp16: 989TFLOPs, bf16: 989TFLOPs}}}}\n"
      "node: {{gpus_per_node: {0}, nvlink_bandwidth: 450GBps, nvlink_latency: 1us, nvls: true}}\n"
      "nic: {{nics_per_node: {0}, line_rate: 400Gbps, latency: 600ns}}\n"
      "fabric: {{kind: rail_optimized_fat_tree, tiers: {1}, nodes_per_scalable_unit: {2},\n"
      "         leaf_switches_per_scalable_unit: {0}, switch_radix: {3},\n"
      "         oversubscription: \"{4}\", link_rate: 400Gbps, hop_latency: 130ns}}\n",
      rails, tiers, nodes_per_su, radix, oversubscription);
  return parse_topology(yaml, "small.yaml");
}

}  // namespace traintwin::testing
