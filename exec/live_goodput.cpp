// The live twin of `traintwin goodput`; see live_goodput.hpp.
#include "exec/live_goodput.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"

namespace traintwin::exec {

LiveCosts measure_live_run(const ElasticRunReport& r) {
  LiveCosts c;
  int64_t saves = 0, resumed = 0, relaunches = 0;
  double productive = 0, save = 0, restore = 0, restart = 0, detection = 0;
  for (const AttemptReport& a : r.attempts) {
    productive += a.productive_s;
    c.iterations += a.kept_iterations;
    saves += a.saves;
    save += a.checkpoint_save_s;
    if (a.resumed_from > 0) {
      ++resumed;
      restore += a.restore_s;
    }
    if (a.attempt == 0) {
      c.first_start_s = a.restart_s;
    } else {
      ++relaunches;
      restart += a.restart_s;
    }
    if (!a.completed) {
      ++c.failures;
      detection += a.detection_s;
    }
    c.other_s += a.other_s;
  }
  if (c.iterations < 1 || !(productive > 0)) {
    throw InvalidArgument(
        "goodput --live: the run kept no iteration, so there is no iteration time to model "
        "(did every launch fail before its first checkpoint?)");
  }
  c.iteration_s = productive / static_cast<double>(c.iterations);
  c.save_s = saves > 0 ? save / static_cast<double>(saves) : 0;
  c.restore_s = resumed > 0 ? restore / static_cast<double>(resumed) : 0;
  c.restart_s = relaunches > 0 ? restart / static_cast<double>(relaunches) : c.first_start_s;
  c.detection_s = c.failures > 0 ? detection / static_cast<double>(c.failures) : 0;
  return c;
}

GoodputJob live_goodput_job(const LiveCosts& c, double rate_per_hour, int64_t gpus,
                            double tokens_per_iteration) {
  if (!(rate_per_hour > 0) || !std::isfinite(rate_per_hour)) {
    throw InvalidArgument(fmt::format(
        "goodput --live: the failure rate must be > 0 per hour, got {}", rate_per_hour));
  }
  if (gpus < 1)
    throw InvalidArgument(fmt::format("goodput --live: gpus must be >= 1, got {}", gpus));
  GoodputJob job;
  job.iteration_s = c.iteration_s;
  job.tokens_per_iteration = tokens_per_iteration;
  job.nodes = 1;
  job.gpus = gpus;
  job.checkpoint_bytes = 1e9;  // 1 GB at the rates below takes the measured times
  ReliabilitySpec& r = job.reliability;
  // rate_per_hour failures per hour of one node: x 24 per node-day, x 1000 per 1000 node-days.
  r.failures = {{"injected", FailureClassSpec{rate_per_hour * 24.0 * 1000.0, 1.0}}};
  r.planned_interruptions_per_1000_node_days = 0;
  r.detection_s = c.detection_s;
  r.requeue_s = 0;
  r.process_start_s = c.restart_s;
  r.communicator_init_s = 0;
  r.communicator_init_s_per_1000_gpus = 0;
  constexpr double kInstant_GBps = 1e12;  // a cost not measured: no time
  r.storage_write_GBps_per_node = c.save_s > 0 ? 1.0 / c.save_s : kInstant_GBps;
  r.storage_read_GBps_per_node = c.restore_s > 0 ? 1.0 / c.restore_s : kInstant_GBps;
  r.filesystem_GBps = kInstant_GBps;
  r.async_save = false;
  // The failed rank's machine is this one, ready again at once: a spare always there.
  r.spare_nodes = 1;
  r.node_repair_hours = 1e-12;
  return job;
}

}  // namespace traintwin::exec
