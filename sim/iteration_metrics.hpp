// The metrics of one simulated training iteration, as both engines return them: the SimGrid
// replay (sim/replay.hpp, which adds the network detail in SimulationResult) and the analytical
// estimator (sim/analytical.hpp). The summary (sim/summary.hpp) and the sweep read only these.
#pragma once

#include <cstdint>
#include <vector>

namespace traintwin {

/// Where one rank's iteration time went (seconds). compute + exposed comm + bubble = iteration.
/// Every idle gap of the compute stream is attributed by attribute_gap() (sim/attribution.hpp).
struct TimeBreakdown {
  int64_t rank = 0;
  double compute_s = 0;      ///< busy on the compute stream (incl. optimizer)
  double optimizer_s = 0;    ///< of which grad norm + optimizer step
  double exposed_tp_s = 0;   ///< compute stream idle waiting for a TP collective
  double exposed_cp_s = 0;   ///< idle waiting for a CP collective (ring exchange, KV gather, a2a)
  double exposed_ep_s = 0;   ///< idle waiting for an MoE dispatch/combine (EP all-to-all, ETP)
  double exposed_pp_s = 0;   ///< idle during the transfer of a PP send/recv it waited for
  double exposed_dp_s = 0;   ///< idle waiting for DP/embedding/grad-norm collectives
  double bubble_s = 0;       ///< idle waiting for another stage (pipeline fill/drain)
  /// Idle waiting for a late member of a collective (a straggler, a peer held up elsewhere):
  /// from this rank's arrival to the last member's, not the collective's own time.
  double sync_wait_s = 0;
  /// Idle waiting for a host op of CPU offload (OpKind::kHost: a copy over the host link, the
  /// host CPU's optimizer step).
  double exposed_offload_s = 0;

  /// Exposed communication: TP + CP + EP + PP + DP.
  double exposed_comm_s() const {
    return exposed_tp_s + exposed_cp_s + exposed_ep_s + exposed_pp_s + exposed_dp_s;
  }
  /// Adds every category of `o` to this one (the rank stays this one's).
  void add(const TimeBreakdown& o) {
    compute_s += o.compute_s;
    optimizer_s += o.optimizer_s;
    exposed_tp_s += o.exposed_tp_s;
    exposed_cp_s += o.exposed_cp_s;
    exposed_ep_s += o.exposed_ep_s;
    exposed_pp_s += o.exposed_pp_s;
    exposed_dp_s += o.exposed_dp_s;
    bubble_s += o.bubble_s;
    sync_wait_s += o.sync_wait_s;
    exposed_offload_s += o.exposed_offload_s;
  }
  /// compute + exposed communication + bubble + sync wait + exposed offload: the iteration time
  /// of this rank's breakdown.
  double total_s() const {
    return compute_s + exposed_comm_s() + bubble_s + sync_wait_s + exposed_offload_s;
  }
};

/// One iteration's time and where it went, whichever engine computed it.
struct IterationMetrics {
  double iteration_time_s = 0;
  TimeBreakdown critical;                ///< the rank that finishes last
  std::vector<TimeBreakdown> per_stage;  ///< DP/TP rank 0 of each pipeline stage
  int64_t ops = 0;  ///< ops the engine evaluated (replay: over all replayed ranks; estimator: of its probe)
};

}  // namespace traintwin
