// The ops of a live run as Timeline events, and what a recorded run tells the simulator: the
// measured duration of every kernel, so that `traintwin simulate --costs-from-timeline LIVE.json`
// replays a recorded run on another topology or at another scale (Lumos-style replay: Liang et
// al., "Lumos: Efficient Performance Modeling and Estimation for Large-scale LLM Training",
// MLSys 2025), with the live kernel costs instead of the cost model's (traces/timeline_costs.hpp
// reads them back). live_op_seconds() gives each op's measured time, which `train --timeline DIR
// --timeline-format chakra` writes as a Chakra ET (sim/chakra_export.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/program.hpp"
#include "exec/executor.hpp"
#include "traces/timeline.hpp"

namespace traintwin::exec {

/// The event of `span` (an op of `rank` in iteration `iteration`): op_event's name prefixed with
/// "it <iteration> ", args "iteration" and, for compute ops, "kernels": a JSON array of
/// {"name", "shape", "dtype", "tp", "flops", "bytes", "us"} (the Program's KernelKey and work of
/// each kernel, its measured microseconds, at least 1 ns: a reading below the clock's resolution
/// is written as 1 ns). Flow ids are made unique across iterations.
TimelineEvent live_event(const Program& prog, int64_t rank, int64_t world_size, const OpSpan& span,
                         int64_t iteration);

/// The measured seconds of each op of `rank`'s RankProgram in `prog` in one iteration's `spans`
/// (end - start of its span; by op id, 0 for an op without a span), for a Chakra ET of the
/// live run (sim/chakra_export.hpp's write_chakra_rank). Throws InvalidArgument for a span of
/// an op the RankProgram lacks.
std::vector<double> live_op_seconds(const Program& prog, int64_t rank,
                                    const std::vector<OpSpan>& spans);

}  // namespace traintwin::exec
