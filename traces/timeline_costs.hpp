// Cost-database rows from raw timings: the summary of one kernel's timed runs (traintwin
// profile), and the kernel durations a live timeline recorded (exec/live_events.hpp: args
// "kernels" of compute ops), which make a recorded run a cost database for the simulator
// (`simulate --costs-from-timeline`).
#pragma once

#include <vector>

#include "core/program.hpp"
#include "traces/cost_db.hpp"
#include "traces/timeline.hpp"

namespace traintwin {

/// Median, p10 and p90 (nearest-rank percentiles) and the mean of `samples_us` as the row of `kernel`
/// (its key, FLOPs and bytes); times below 1 ns are raised to 1 ns (a row needs times > 0).
/// Throws InvalidArgument when there are no samples.
KernelMeasurement measurement_from_samples(const Kernel& kernel, std::vector<double> samples_us);

/// Per KernelKey, the row of the kernel durations recorded in the "kernels" args of `t`'s
/// events (every rank and iteration): a JSON array of {"name", "shape", "dtype", "tp",
/// "flops", "bytes", "us"}; "us" a duration > 0 (a kernel that ran took time: traintwin writes
/// a reading below the clock's resolution as 1 ns, exec/live_events.hpp). Throws Error naming
/// `origin` (the file it was read from; t.name when empty) and the event when an entry is
/// malformed or its duration is not > 0, and when no event has kernels (not a live timeline).
std::vector<KernelMeasurement> kernel_rows_from_timeline(const Timeline& t,
                                                         const std::string& origin = "");

}  // namespace traintwin
