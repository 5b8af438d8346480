// Degraded, not down: what each degraded state of cluster.reliability (a straggler, a leaf-spine
// link down, a NIC down, a flapping link; core/reliability.hpp) changes in the replay, and its
// iteration time, replayed once per distinct state. sim/goodput.hpp's Monte Carlo then charges
// the time spent in each state at that state's iteration time.
//
// The states, on the platform of sim/platform.hpp (one concrete place each; the fabric is
// symmetric, so it stands for any):
//   - straggler: the compute ops of global rank 0's TP group last straggler_slowdown times
//     longer (SimulationOptions::straggler with straggler_tp_group). One slow GPU holds up its TP
//     group at every TP collective, and the step waits for it, so to first order slowing its TP
//     group is what one slow GPU does; slowing the group keeps the TP group's ranks alike, so the
//     replay keeps TP aggregation (exact) instead of replaying every rank (at 16,384 GPUs: 2,048
//     ranks replayed instead of 16,384, bench/README.md).
//   - link_down: one leaf-spine cable of rail 0's leaf 0 down. The platform routes statically
//     (SimGrid's D-mod-K, no ECMP or adaptive routing: sim/platform.hpp), so a down link cannot
//     be rerouted in the replay; its flows are taken as spread evenly over the leaf's remaining
//     k - 1 uplink cables, so every one of the leaf's k uplink cables (both directions) is
//     modelled at (k - 1) / k of its bandwidth. Refused with fewer than 2 uplink cables (the
//     leaf would be cut off: that is a failure, not a degradation).
//   - nic_down: node 0's NIC 0 down; NCCL's PXN moves its rail's traffic over NVLink to NIC 1,
//     whose link then carries both rails' flows: both NIC links of node 0 (both directions) are
//     modelled at half their bandwidth. Refused with one NIC per node.
//   - link_flap: node 0's NIC-leaf link of rail 0 (both directions) at link_flap_bandwidth_factor
//     of its bandwidth while it flaps.
// SimGrid allows one engine per process: isolated_state_replay() replays each state in a forked
// child (sim/isolated.hpp), so a command may replay several states, and its own healthy
// iteration in process afterwards.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/reliability.hpp"
#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/goodput.hpp"
#include "sim/replay.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// What one state changes in the replay (empty: the healthy cluster).
struct DegradedState {
  std::optional<Straggler> straggler;
  std::vector<DegradedLink> degraded_links;  ///< platform link names (sim/platform.hpp)
  /// A canonical text of the state ("" when healthy): equal keys, equal replays.
  std::string key() const;
};

/// The state of `kind` for `s` on `topo` with `r`'s factors (see the file comment). Throws
/// ConfigError naming cluster.reliability.<kind>_rate_per_1000_node_days when the cluster has no
/// place for it (fewer than 2 leaf-spine uplink cables per leaf; one NIC per node), or when the
/// scenario's cluster.what_if already sets a straggler (kind straggler).
DegradedState degraded_state(const Scenario& s, const TopologySpec& topo, const ReliabilitySpec& r,
                             DegradedKind kind);

/// `opts` with `state` applied: its straggler set (straggler_tp_group on), its links appended to
/// scaling.degraded_links.
SimulationOptions with_state(SimulationOptions opts, const DegradedState& state);

/// Replays one state and returns its iteration time (seconds, > 0).
using StateReplay = std::function<double(const DegradedState&)>;

/// Iteration times per distinct state (DegradedState::key()), each replayed at most once.
class IterationTimeCache {
 public:
  explicit IterationTimeCache(StateReplay replay);
  /// The state's iteration time: replayed the first time its key is asked, cached after.
  /// Throws what the replay throws, and InvalidArgument when it returns a time that is not > 0.
  double iteration_s(const DegradedState& state);
  /// Replays done so far (distinct states asked).
  int64_t replays() const { return static_cast<int64_t>(times_.size()); }

 private:
  StateReplay replay_;
  std::map<std::string, double> times_;
};

/// The replayed iteration times of the degraded kinds in use (rate > 0), in DegradedKind's order.
struct DegradedReplays {
  std::array<double, kDegradedKinds.size()> replayed_s{};  ///< 0: kind not in use
  std::array<std::string, kDegradedKinds.size()> states;   ///< each state's key()
  double healthy_s = 0;  ///< the healthy state's replay, when asked for (else 0)
};

/// Replays, through `cache`, the state of every kind of `r` with a rate > 0, and the healthy state
/// when `with_healthy` (a healthy iteration time that does not come from this replay: the
/// estimator's or a given one). Throws as degraded_state() and the cache.
DegradedReplays replay_degraded_states(const Scenario& s, const TopologySpec& topo,
                                       const ReliabilitySpec& r, IterationTimeCache& cache,
                                       bool with_healthy);

/// Sets job.degraded_iteration_s from `replays`: each replayed time as is when healthy_s is 0
/// (job.iteration_s is the same replay's), else scaled to the job's healthy time,
/// job.iteration_s x replayed / healthy_s (the replay's relative slowdown).
void apply_degraded_replays(GoodputJob& job, const DegradedReplays& replays);

/// A StateReplay that simulates `s` on `topo` with `costs` and `opts` plus the state (no
/// timeline, no progress callback) in a forked child (run_isolated), returning its iteration
/// time. Throws Error with the child's message when the replay fails.
StateReplay isolated_state_replay(const Scenario& s, const TopologySpec& topo,
                                  const CostModel& costs, SimulationOptions opts);

}  // namespace traintwin
