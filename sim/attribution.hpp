// The attribution of idle time: each idle gap of a rank's compute stream goes to what the next
// compute op waited for (the dependency that ended last). One rule for both engines, so that the
// replay and the estimator report the same breakdown categories. A gap that ends with a
// communication op is split by cause: the communication's own time (its transfer on its links,
// from the moment every side had posted it) is exposed communication of its kind; the time this
// rank spent waiting for a late peer is not: a late member of a collective (of the one that ended
// the gap, or of a collective that one waited for in turn) is sync wait, a late peer stage of a
// send/recv is pipeline bubble.
#pragma once

#include "core/program.hpp"
#include "sim/iteration_metrics.hpp"

namespace traintwin {

/// What an idle compute stream waited for.
struct WaitedFor {
  enum class Kind {
    kNothing,         ///< no dependency ended last (start of the iteration, another stage)
    kCompute,         ///< a compute op (of this rank: the gap is not communication)
    kTpCollective,    ///< a collective of the TP group
    kCpCollective,    ///< a collective of the CP group (context-parallel attention)
    kEpCollective,    ///< an MoE dispatch/combine (groups EP, ETP, ETP x EP)
    kSyncCollective,  ///< any other collective (DP buckets, embedding, grad norm, param gather)
    kTransfer,        ///< a PP send/recv; comm_s is how long its transfer took
    kHost,            ///< a host op of CPU offload (a host-link copy, the CPU optimizer step)
  };
  Kind kind = Kind::kNothing;
  /// kTransfer: the transfer's own time, seconds, from both sides posted to its end.
  double comm_s = 0;
  /// Collectives: seconds of the gap spent waiting for late members, of this collective and of
  /// the collectives it waited for in turn (late_member_wait_s() of each; 0 when every member
  /// arrived together, as the estimator assumes of groups within a stage).
  double sync_wait_s = 0;
};

/// The wait on op `op` (its kind and group; the TP all-gather of pipeline scatter/gather,
/// Role::kPipeline, is a kTransfer with `comm_s` its own and its recv's transfer time). `comm_s`: a send/recv's transfer time
/// (WaitedFor::comm_s); `sync_wait_s`: a collective's wait for late members
/// (WaitedFor::sync_wait_s). Negative values count as 0.
WaitedFor waited_for(const Op& op, double comm_s = 0, double sync_wait_s = 0);

/// Seconds of the idle interval [gap_start_s, gap_end_s] that a rank spent waiting for the last
/// member of a collective it reached at `arrival_s` and that started (its last member arrived)
/// at `start_s`: the overlap of [arrival_s, start_s] with the interval, 0 when none.
double late_member_wait_s(double gap_start_s, double gap_end_s, double arrival_s, double start_s);

/// Adds an idle gap of `gap_s` seconds (nothing when <= 0) to `b`. A collective: sync_wait for
/// the part of the gap spent waiting for late members (WaitedFor::sync_wait_s, at most the gap),
/// and the rest to its kind: TP -> exposed_tp, CP -> exposed_cp, an MoE
/// dispatch/combine -> exposed_ep, any other (DP / expert-DP buckets, embedding, grad norm) ->
/// exposed_dp. A PP transfer -> exposed_pp for min(gap, comm_s) (the time the data was on the
/// wire) and bubble for the rest (the peer stage was late to post). Nothing or a compute op ->
/// bubble.
void attribute_gap(TimeBreakdown& b, double gap_s, const WaitedFor& w);

}  // namespace traintwin
