// The knobs of one simulation (SimulationOptions: what-if scaling, straggler, tracing, exact
// reductions, the flow network's closed forms, progress) and the checks on them: whether TP
// aggregation is exact for a layout, and the scenario's what-if knobs folded in and checked.
// sim/replay.hpp (next in the flow) runs a simulation with them; sim/analytical.hpp reads the
// same what-if folding.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "sim/collectives.hpp"
#include "sim/platform.hpp"
#include "topologies/topology.hpp"
#include "traces/timeline.hpp"

namespace traintwin {

/// How far a replay has got (SimulationOptions::progress).
struct ReplayProgress {
  int64_t ops_started = 0;  ///< ops of the replayed ranks started so far
  int64_t ops_total = 0;    ///< ops of the replayed ranks in all
  double simulated_s = 0;   ///< simulated time reached (the start time of the latest op)
  double elapsed_s = 0;     ///< wall time since the replay began
};

/// Knobs of one simulation.
struct SimulationOptions {
  FabricEfficiency fabric;
  /// What-if factors of the platform: the SimGrid links are built with them and the closed forms
  /// of collectives use scaled_topology() (NVLink x nvlink_bandwidth, NIC and switch links x
  /// ib_bandwidth); degraded links change their own SimGrid link only.
  PlatformScaling scaling;
  /// What-if: every compute op's duration is divided by this (> 0; 2.0 = GPUs twice as fast).
  double gpu_speed_scale = 1.0;
  /// What-if: this rank's compute ops (optimizer included) last compute_scale times longer
  /// (after gpu_speed_scale). Refused with aggregate_tp when TP > 1 (ranks differ within a TP
  /// group).
  std::optional<Straggler> straggler;
  /// With a straggler: every rank of its TP group is slowed as it is (a slow GPU holds up its
  /// TP group at every TP collective anyway; cluster.reliability's straggler state uses this).
  /// The TP group's ranks then behave alike, so TP aggregation stays exact and is not refused.
  bool straggler_tp_group = false;
  /// Force one NCCL algorithm for every collective ("" = the scenario's
  /// cluster.collective_algorithm, whose default chooses per call like NCCL's tuner).
  std::string collective_algorithm;
  /// Force one NCCL protocol ("LL" | "LL128" | "Simple", NCCL_PROTO) for every collective the
  /// tuner times ("" = the fastest per call; traintwin collective --protocol).
  std::string collective_protocol;
  /// Ranks whose ops go to the timeline; empty = TP rank 0 of DP rank 0 in every pipeline stage
  /// (one process per stage: a trace Perfetto opens at 1024+ GPUs).
  std::vector<int64_t> trace_ranks;
  bool trace_all_ranks = false;
  bool record_timeline = true;
  /// When set (and record_timeline), the traced ranks' events are handed to it one by one at the
  /// end of the replay, straight from the engine's per-op times, and SimulationResult::timeline
  /// stays empty: a trace of any size is written without being held in memory.
  std::function<void(TimelineEvent&&)> timeline_sink;
  /// Replay only TP rank 0 of every TP group. Exact when each TP group is consecutive GPUs of
  /// one node (rank order starting with tp, TP dividing the GPUs per node) and every GPU has its
  /// own rail: the TP ranks then run the same ops at the same times, their flows on their own
  /// GPU's links and rail planes, which never share a link, so one rail stands for all. TP
  /// collectives keep their full-group closed form; a group spanning TP (the grad-norm
  /// all-reduce over all ranks, expert groups) completes when its replayed members have arrived
  /// and launches its flows in full, or rail 0's mirrored where every rail has the same ones.
  /// Throws ConfigError when the layout does not allow it, or with a straggler or a degraded link
  /// (both break the symmetry it relies on). Link loads: where every GPU has its own rail, the
  /// flows of TP rank 0 stand for those of the other TP ranks on their rails (link loads as the
  /// full replay's); otherwise those of rail 0 only.
  bool aggregate_tp = false;
  /// Apply the reductions that are exact by symmetry wherever their conditions hold (today TP
  /// aggregation, as aggregate_tp, when tp_aggregation_blocker() finds nothing against it);
  /// SimulationResult::reductions names each one applied. The simulated results are those of
  /// the full replay (iteration time, breakdowns, link loads; tests/sim/simulation_test checks
  /// them to 1e-9); the replay's own counters (replayed_ranks, ops, flows, events) count the work
  /// done. false: every rank replayed (unless aggregate_tp).
  bool exact_reductions = true;
  /// Flow-level link sharing (SimGrid). false: every transfer and collective takes its
  /// uncontended closed form (uncontended_transfer_s / uncontended_time_s, sim/collectives.hpp),
  /// the rule the analytical estimator uses, and no link loads are recorded — the replay then
  /// differs from the estimator only by how it walks the Program (every op of every rank).
  bool link_contention = true;
  /// With link contention: a flow alone on its links is timed in closed form (route latency +
  /// bytes / slowest link), flows that meet only each other in closed-form groups (CM02's
  /// max-min, solved by sim/flow_network.hpp), and only flows that meet more than
  /// max_group_flows others go to SimGrid's solver, which keeps SimGrid's per-completion work
  /// small. false: every flow is a SimGrid transfer from its start (the reference; same times up
  /// to SimGrid's precision).
  bool lone_flows_in_closed_form = true;
  /// The most flows one closed-form group holds (1: lone flows only); see FlowNetwork.
  int64_t max_group_flows = 256;
  /// When set, called from inside the replay (in the calling thread) whenever at least
  /// progress_interval_s of wall time has passed since the last call (checked every 256 ops
  /// started), so a command can show a progress line; never called by a replay that ends sooner.
  /// It may throw: the replay then stops with that exception. The library prints nothing.
  std::function<void(const ReplayProgress&)> progress;
  double progress_interval_s = 1.0;
};

/// Why replaying TP rank 0 of each TP group would not give the full replay's results for a
/// Program of layout `layout` on `topo` with `opts` (what-if knobs folded in); "" when it
/// would: TP > 1 with each TP group on consecutive GPUs of one node (rank order starting with
/// tp, TP dividing gpus_per_node), every GPU with its own NIC rail (nics_per_node =
/// gpus_per_node, so the TP ranks' flows never share a link), no straggler or degraded link
/// (a straggler is allowed with straggler_tp_group), every traced rank with TP rank 0, and every group kind that spans TP (the expert kinds too
/// when `expert_groups`, i.e. for a mixture of experts) with the same number of TP-rank-0
/// members, at least one, in each of its groups (a collective of such a group completes when
/// they have arrived). O(world size) per group kind.
std::string tp_aggregation_blocker(const RankLayout& layout, const TopologySpec& topo,
                                   const SimulationOptions& opts, bool expert_groups = false);

/// `opts` with the scenario's what-if knobs (cluster.what_if) folded in: the bandwidth and GPU
/// speed factors multiply those of `opts`, the degraded link is appended to
/// scaling.degraded_links, the straggler is set (InvalidArgument when `opts` has one already).
SimulationOptions with_what_if(SimulationOptions opts, const WhatIf& what_if);

/// Checks what the scenario's what-if needs beyond the scenario rules, before any simulation:
/// the degraded link names a link of the platform of `topo` with s.cluster.num_gpus GPUs, and no
/// straggler or degraded link with TP aggregation (when `aggregate_tp` and TP > 1). Throws
/// ConfigError "<scenario file>: cluster.what_if.<key>: <problem>".
void check_what_if(const Scenario& s, const TopologySpec& topo, bool aggregate_tp);

}  // namespace traintwin
