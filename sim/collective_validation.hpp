// Validation of collective bandwidth against published runs: the rows of
// ../shared/validation/published-runs-2026.yaml whose `measured` is `busbw_GBps` (nccl-tests bus
// bandwidth of tenants that share a fabric: the mCCS rows, SIGCOMM 2024) turned into cases of
// sim/collective_tenants.hpp, one per measured key. What each key means (which GPUs, which ring
// order, which other tenants run beside it) is encoded per row in collective_validation.cpp with
// its derivation from the mCCS artifact; a row or key it does not know is listed as not supported,
// with the reason, never guessed. `traintwin validate` prints these after the iteration-time
// cases (cli/validate_command.cpp); the training runs are in sim/published_runs.cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/collective_tenants.hpp"

namespace traintwin {

/// One measured bus bandwidth of one tenant, with every tenant that ran beside it.
struct CollectiveValidationCase {
  std::string id;      ///< "<row id>/<measured key>", e.g. "mccs-allreduce-alone/good_ring_4gpu"
  std::string source;  ///< the row's `source`
  std::string setting; ///< what the key means, e.g. "GPU 0 of hosts 02,03,01,05 (good ring)"
  std::filesystem::path topology_file;  ///< the testbed's topology
  int64_t num_gpus = 0;                 ///< GPUs of the testbed
  std::vector<CollectiveTenant> tenants;  ///< all tenants run together (>= 1)
  std::string tenant;                     ///< the one measured (a name in `tenants`)
  /// How the testbed's switches route (sim/collective_tenants.hpp): the mCCS testbed's Ethernet
  /// switches hash each flow over their uplinks (ECMP), as mCCS section 2.2 describes.
  TenantRouting routing = TenantRouting::kDModK;
  double measured_busbw_GBps = 0;
  /// Non-empty when the row or key cannot be simulated (why); the other fields but id, source
  /// and measured_busbw_GBps are then empty.
  std::string unsupported;
};

/// The collective rows of a `runs` file (`root`, read from `file`): every row whose `measured`
/// holds `busbw_GBps`, one case per key of it. The mCCS testbed's topology is
/// `topologies_dir`/../placements/mccs-rtx3090-testbed.yaml. Throws ConfigError naming the file,
/// line and row for a `busbw_GBps` that is not a mapping of numbers; rows without it are skipped
/// (sim/published_runs.cpp reads them).
std::vector<CollectiveValidationCase> load_collective_validation_cases(
    const YAML::Node& root, const std::string& file, const std::filesystem::path& topologies_dir);

/// Same from a calibration file (empty for a file without `runs`). Throws ConfigError for a
/// file that cannot be read or parsed, and as above.
std::vector<CollectiveValidationCase> load_collective_validation_cases(
    const std::filesystem::path& calibration_file, const std::filesystem::path& topologies_dir);

/// The predicted bus bandwidth of the case's measured tenant (all its tenants run together on
/// its topology; no SimGrid engine, so any number of cases may run in one process).
struct CollectivePrediction {
  double busbw_GBps = 0;
  std::string bottleneck;  ///< TenantBandwidth::bottleneck of the measured tenant
};

/// Simulates one supported case. Throws ConfigError for an unsupported case and what loading
/// the topology and simulate_ring_tenants() throw.
CollectivePrediction simulate_collective_validation_case(const CollectiveValidationCase& c);

}  // namespace traintwin
