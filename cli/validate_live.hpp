// `traintwin validate --live`: prediction against reality on this machine (cli/validate_live.cpp).
#pragma once

#include <string>
#include <vector>

#include "cli/scenario_options.hpp"

namespace traintwin::cli {

struct ValidateLiveOptions {
  ScenarioOptions scenario;  ///< the --live file and --set overrides
  std::string topology;      ///< this host's topology (default: the scenario's cluster.topology)
  int iterations = 5;        ///< timed live iterations
  int warmup = 1;            ///< untimed live iterations first
  std::string timeline;      ///< write rank 0's live timeline here ("" = no)
  int threads = 0;           ///< GEMM threads per rank (0: the cores shared among the ranks)
  int kernels = 10;          ///< rows of the per-kernel table (0: none)
  std::string backend = "cpu";  ///< executor backend of the live run (cli/backend_choice.hpp)
};

/// Runs the scenario live (one process, or one per rank under mpirun), simulates it on the local
/// topology with its measured database and prints both. Throws ConfigError when the topology is
/// not this host's (device id) or has no database, and what the executor and simulator throw.
void run_validate_live(const ValidateLiveOptions& o);

}  // namespace traintwin::cli
