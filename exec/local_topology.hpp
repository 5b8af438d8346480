// This host as a cluster for the simulator: a topology file (topologies/*.yaml format) whose
// "GPUs" are ranks pinned to cores, with the peak FLOP/s and memory bandwidth measured by
// `traintwin profile` and the intra-node link (the "NVLink" of the file) fitted to the
// database's collective rows, so `simulate` predicts what `train` does on this machine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "traces/cost_db.hpp"

namespace traintwin::exec {

/// The figures of a local topology.
struct LocalTopology {
  std::string name;            ///< "local-<hostname>"
  std::string device;          ///< gpu.name: the device id (traces/db/<device>.json)
  int64_t ranks_per_node = 0;  ///< cores / threads per rank
  double peak_FLOPs = 0;       ///< best achieved rate of the database's GEMM rows
  double memory_Bps = 0;       ///< best achieved bytes/s of its memory-bound rows
  double memory_bytes = 0;     ///< host memory / ranks_per_node
  double link_Bps = 0;         ///< fitted send/recv bandwidth between two ranks
  double link_latency_s = 0;   ///< fitted send/recv latency
  std::string link_source;     ///< how the link was obtained (fit over which rows, or assumed)
};

/// fit_alpha_beta (traces/collective_fit.hpp) of the send_recv rows of `db` (2 ranks).
/// Returns {beta_Bps, alpha_s}; {0, 0} when there are fewer than two rows.
std::pair<double, double> fit_link(const CostDatabase& db);

/// The local topology of `device` (a CPU database device with threads) from the rows of `db`.
/// Throws InvalidArgument when `db` has no GEMM or no memory-bound kernel rows (profile a
/// scenario first) or `device` has no thread count.
LocalTopology local_topology(const CostDatabase& db, const CostDbDevice& device,
                             const std::string& device_id);

/// Writes `t` as a topology YAML file (loadable by load_topology) to `file`, atomically (a
/// temporary renamed over it: a link at `file` is replaced, not followed; a failed write leaves
/// the old file). Throws Error when it cannot be written.
void write_topology(const std::filesystem::path& file, const LocalTopology& t);

}  // namespace traintwin::exec
