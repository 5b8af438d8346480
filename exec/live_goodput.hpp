// The live twin of `traintwin goodput` (`goodput --live`): what a run of the elastic agent with
// randomly injected failures measured on this machine (exec/elastic_agent.hpp's report), turned
// into the job that the goodput model simulates (sim/goodput.hpp) at the same failure rate and
// with the same measured costs, so that the model's ETTR and badput can be set beside the ones
// measured.
//
// Flow: cli/goodput_command.cpp runs the agent (run_elastic_job with a random --fault-inject
// spec), calls measure_live_run() on its report, live_goodput_job() on the result, simulates the
// job with goodput_at_interval() until the run's work is done, and prints both.
#pragma once

#include <cstdint>

#include "exec/elastic_agent.hpp"
#include "sim/goodput.hpp"

namespace traintwin::exec {

/// The costs a live run measured (means over its launches, seconds) and its counts.
struct LiveCosts {
  double iteration_s = 0;  ///< productive time / iterations kept
  double save_s = 0;       ///< stall per checkpoint save (0 without saves)
  double restore_s = 0;    ///< checkpoint load of the launches that resumed (0 if none did)
  /// Start of the relaunches: process start, MPI init, model build (the first launch's start when
  /// there was no relaunch).
  double restart_s = 0;
  double detection_s = 0;    ///< failure to the launch's exit, per failure
  double first_start_s = 0;  ///< the first launch's start (the model starts training at once)
  double other_s = 0;        ///< evaluation, logging, shutdown: the whole run's
  int64_t failures = 0;      ///< launches that failed
  int64_t iterations = 0;    ///< iterations kept
};

/// The costs of `r`. Throws InvalidArgument when the run kept no iteration (nothing to time).
LiveCosts measure_live_run(const ElasticRunReport& r);

/// The job of one node and `gpus` ranks whose failures are one exponential class at
/// `rate_per_hour` per hour of training (the injector's Poisson process), whose detection,
/// restart (as process start), checkpoint save and load take the measured means (a 1 GB
/// checkpoint at the per-node rates that give those times; a cost not measured is 0), with the
/// failed node back at once (the same machine) and no degraded episodes. The model draws
/// failures over all of the wall time (detection and restarts included), the injector over
/// training time only: at rates where restarts take a noticeable share, the model fails more
/// often. Throws InvalidArgument for a rate <= 0 or gpus < 1.
GoodputJob live_goodput_job(const LiveCosts& c, double rate_per_hour, int64_t gpus,
                            double tokens_per_iteration);

}  // namespace traintwin::exec
