// The attribution of idle time: each idle gap of a rank's compute stream goes to what the next
// compute op waited for (the dependency that ended last). One rule for both engines, so that the
// replay and the estimator report the same breakdown categories.
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
    kTransfer,        ///< a PP send/recv; transfer_s is how long its transfer took
  };
  Kind kind = Kind::kNothing;
  double transfer_s = 0;  ///< kTransfer: start of the transfer (both sides posted) to its end
};

/// The wait on op `op` (its kind and group); `transfer_s` for a send/recv (ignored otherwise).
WaitedFor waited_for(const Op& op, double transfer_s = 0);

/// Adds an idle gap of `gap_s` seconds (nothing when <= 0) to `b`: a TP collective -> exposed_tp;
/// a CP collective -> exposed_cp; an MoE dispatch/combine -> exposed_ep; another collective
/// (DP / expert-DP buckets, embedding, grad norm) -> exposed_dp; a PP transfer -> exposed_pp for min(gap, transfer_s) (the
/// time the data was on the wire) and bubble for the rest (the peer stage was late to post);
/// nothing or a compute op -> bubble.
void attribute_gap(TimeBreakdown& b, double gap_s, const WaitedFor& w);

}  // namespace traintwin
