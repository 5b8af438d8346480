// A placement file: several training jobs on the nodes of one shared fabric (the input of
// `traintwin cluster`, sim/multi_job.hpp next in the flow). It names a topology, optionally the
// fabric's size, and per job its scenario file, `--set`-style overrides, the nodes it runs on
// (indices and ranges, or a scheduler's host list such as Slurm's `node[0-63]`), the iterations to
// replay and when it starts. The format is documented in scenarios/README.md ("Placement files");
// this file reads it and checks what needs no scenario (keys, types, node syntax, one job per
// node, nodes inside the fabric). The checks against each job's scenario (GPU count, NVLink
// domain) are in sim/multi_job.cpp, which loads the scenarios.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/scenario.hpp"

namespace traintwin {

/// Iterations a job replays when its `iterations` key is left out.
inline constexpr int64_t kDefaultJobIterations = 10;

/// One job of a placement file.
struct JobPlacement {
  std::string name;                     ///< unique within the file
  std::filesystem::path scenario_file;  ///< resolved against the placement file's folder
  std::vector<Override> overrides;      ///< `set`, in order (as --set KEY=VALUE)
  /// The nodes (NVLink domains) the job runs on, in the order given: the job's rank r runs on
  /// GPU r % G of nodes[r / G] (G: node.gpus_used_per_node of the topology).
  std::vector<int64_t> nodes;
  int64_t iterations = kDefaultJobIterations;  ///< >= 1
  double start_s = 0;                   ///< simulated time its first iteration starts (>= 0)
  int line = 0;                         ///< line of the job's entry in the file (1-based)
};

/// A placement file as read.
struct Placement {
  std::filesystem::path file;           ///< the file read ("" when parsed from text)
  std::string name;                     ///< `name`, else the file's stem
  std::filesystem::path topology_file;  ///< resolved against the file's folder
  /// Nodes (NVLink domains) of the shared fabric: `num_nodes`, else one more than the highest
  /// node a job uses.
  int64_t num_nodes = 0;
  std::vector<JobPlacement> jobs;       ///< at least one
};

/// Reads a placement file (YAML, at most kMaxConfigFileBytes). Throws ConfigError
/// "<file>:<line>: <key>: <problem> (allowed: ...)" for unknown or missing keys, wrong types, a
/// bad node range or host list, a node given twice in a job, two jobs on one node ("jobs[1]
/// (name b): nodes: node 3 is job a's too"), a node at or beyond num_nodes, duplicate job names,
/// iterations < 1 and a start without a time unit.
Placement load_placement(const std::filesystem::path& file);

/// Same as load_placement() from YAML text; `origin` names it in messages and relative paths
/// resolve against `base_dir`.
Placement parse_placement(const std::string& yaml_text, const std::string& origin,
                          const std::filesystem::path& base_dir);

/// Node indices of a `nodes` entry: an integer or a range "A-B" (inclusive, A <= B). `where`
/// prefixes the message. Throws ConfigError.
std::vector<int64_t> parse_node_range(const std::string& text, const std::string& where);

/// Node indices of a scheduler's host list, as Slurm writes it (`scontrol show hostnames`'s
/// input): comma-separated names, each a prefix and a number ("node12") or a prefix and a
/// bracketed list of numbers and ranges ("dgx[001-004,010]"); the number is the node index minus
/// `index_base`. Throws ConfigError naming `where` and the bad name.
std::vector<int64_t> parse_host_list(const std::string& text, int64_t index_base,
                                     const std::string& where);

}  // namespace traintwin
