// `traintwin goodput --live SCENARIO --nproc R --rate-per-hour X --save DIR`: the live twin of
// the goodput model on this machine. It trains the scenario under the elastic agent
// (exec/elastic_agent.hpp: mpirun -np R, relaunched from the last checkpoint after every
// failure) with failures injected at X per hour of training (exec/fault_injection.hpp's random
// faults), measures the ETTR and the badput by cause, and prints them beside what the goodput
// model (sim/goodput.hpp) predicts for the same rate with the costs measured in that run
// (exec/live_goodput.hpp), and for the rate the run actually drew (its failures over its training
// time: a short run's few Poisson draws make its ETTR one sample of a wide distribution, so this
// second line checks the costs without that luck). Next in the flow: print, or JSON with --json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/scenario_options.hpp"

namespace traintwin::cli {

/// The flags of `goodput --live`.
struct GoodputLiveOptions {
  std::optional<double> rate_per_hour;  ///< failures injected per hour of training, > 0
  std::optional<int64_t> nproc;         ///< ranks of each launch (mpirun -np), >= 1
  std::string save;                     ///< checkpoint folder (empty, or without a checkpoint)
  int64_t max_restarts = 20;            ///< relaunches allowed, >= 0
};

/// Runs the live twin (see the file comment): `runs` simulated runs of the model from `seed`
/// (also the seed of the injected failures). Throws ConfigError naming the flag for a missing
/// or bad flag, a scenario that saves no checkpoint (training.save_interval), a --save folder
/// that already holds one, or a process started by mpirun/srun; Error when the run does not
/// complete (every launch used) or is stopped by a signal.
void run_goodput_live(const ScenarioOptions& scenario, const GoodputLiveOptions& o, int64_t runs,
                      uint64_t seed, bool json);

}  // namespace traintwin::cli
