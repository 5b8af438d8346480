// One Program op as a Timeline event: the same name, stream, category, args and send->recv flow
// whether the op was simulated (sim/replay) or executed (exec/trainer), so that a live run and a
// simulated one read alike in a trace viewer and can be compared op by op.
#pragma once

#include <cstdint>

#include "core/program.hpp"
#include "traces/timeline.hpp"

namespace traintwin {

/// The event of `op` run by global rank `rank` from start_s to end_s (seconds). `peer` is the
/// global rank on the other side of a send/recv (ignored for other ops); `world_size` keys the
/// flow ids. Category: forward | backward | recompute | optimizer for compute ops, comm for the
/// others (and for gradient/parameter sync). Args: phase (fwd, bwd, recompute, grad-sync,
/// param-sync, optimizer), micro_batch and model_chunk (when the op has one), bytes
/// (communication), collective and group (collectives), peer (send/recv). A send and its recv get the same flow id.
TimelineEvent op_event(const Program& prog, const Op& op, int64_t rank, int64_t peer,
                       int64_t world_size, double start_s, double end_s);

}  // namespace traintwin
