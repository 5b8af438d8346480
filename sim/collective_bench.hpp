// Simulated nccl-tests: one collective over a group of the cluster, timed by the replay engine,
// reported with nccl-tests' columns so a real and a simulated table diff column by column.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/program.hpp"
#include "sim/replay.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// Which ranks take part: "tp" = the GPUs of node 0; "dp" = GPU 0 of every node (one rail);
/// "all" = every GPU.
enum class BenchGroup { kTp, kDp, kAll };
/// Parses "tp" | "dp" | "all" (ConfigError naming the allowed values otherwise).
BenchGroup parse_bench_group(const std::string& text);

/// One row of the table (nccl-tests: size = bytes, algbw = size / time, busbw = algbw x factor).
struct CollectiveRow {
  int64_t bytes = 0;
  int64_t count = 0;       ///< float elements
  double time_us = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  std::string algorithm;  ///< NCCL's algorithm ("ring", "tree", "nvls", "p2p")
  std::string protocol;   ///< NCCL's protocol ("LL", "LL128", "Simple")
};

/// A row through a process boundary (a worker process) and back; from_json throws nlohmann's
/// exceptions for a missing or mistyped field.
void to_json(nlohmann::json& j, const CollectiveRow& r);
void from_json(const nlohmann::json& j, CollectiveRow& r);

/// The members of `group` on a cluster of `num_gpus` GPUs; with kTp those of NVLink domain
/// `node` (its GPUs, ranks node x gpus_per_node ..: on a mixed cluster a node of any group).
/// Throws ConfigError naming --node for a node outside the cluster's (0 .. num_gpus /
/// gpus_per_node - 1, saying which --num-gpus reaches it) or a node other than 0 with kDp or
/// kAll (they span every node).
std::vector<int64_t> bench_group_members(BenchGroup group, const TopologySpec& topo, int64_t num_gpus,
                                         int64_t node = 0);

/// Simulates one `kind` of `bytes` over `group` (of `node` for kTp, as bench_group_members;
/// creates this process's SimGrid engine).
CollectiveRow simulate_collective(const TopologySpec& topo, int64_t num_gpus, CollectiveKind kind,
                                  BenchGroup group, int64_t bytes, const SimulationOptions& opts = {},
                                  int64_t node = 0);

/// The first node (NVLink domain) of the node group named `name` (topology node_groups[].name).
/// Throws ConfigError naming --node-group and the allowed names (and where the nodes after the
/// groups begin) for an unknown name.
int64_t first_node_of_group(const TopologySpec& topo, const std::string& name);

/// nccl-tests' sizes: min_bytes, doubling, up to max_bytes (default 8 B to 8 GiB: -b 8 -e 8G -f 2).
/// Throws InvalidArgument unless 1 <= min_bytes <= max_bytes.
std::vector<int64_t> nccl_tests_sizes(int64_t min_bytes = 8, int64_t max_bytes = int64_t{8} << 30);

}  // namespace traintwin
