// The replay engine: runs every rank's Program for one iteration on the SimGrid platform.
//
// How time is computed. Within a rank an op starts when its dependencies are done (the Program's
// semantics, matched by sim/matching.hpp); compute ops take their duration from the timing layer
// (sim/timed_program.hpp: cost model, what-if factors applied once); idle time is attributed by
// sim/attribution.hpp, as in the analytical estimator; collectives inside one node take
// their closed form (sim/collectives.hpp) once every member has arrived; point-to-point
// transfers and collectives across nodes become SimGrid flows that share links (flow-level
// max-min sharing, network model pinned). Everything that does not touch the network is
// evaluated as dataflow, ahead of SimGrid's clock; a flow starts at its start date (a SimGrid
// kernel timer when that date is in the future) through sim/flow_network.hpp, which times it in
// closed form while it is alone on its links and hands it to SimGrid's solver once another flow
// meets it, so contention is exact while SimGrid only ever holds the flows that share a link
// (SIMGRID-NOTES.md: its speed depends on how many transfers it holds).
// Ranks of one pipeline stage share one lowered Program (their ops differ only in peers and
// groups, which are mapped per rank). Reductions exact by symmetry run by default
// (SimulationOptions::exact_reductions): TP aggregation replays TP rank 0 of each TP group and
// loads the other rails' links as rail 0's, with the full replay's results.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/program.hpp"
#include "sim/collectives.hpp"
#include "sim/cost_model.hpp"
#include "sim/iteration_metrics.hpp"
#include "sim/link_traffic.hpp"
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
/// gpus_per_node, so the TP ranks' flows never share a link), no straggler or degraded link,
/// (a straggler is allowed with straggler_tp_group), every traced rank with TP rank 0, and every
/// group kind that spans TP (the expert kinds too
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

/// The outcome of one simulated iteration: the engines' common metrics (iteration time,
/// breakdowns, ops replayed over all replayed ranks) and the network detail of the replay.
struct SimulationResult : IterationMetrics {
  std::map<CostSource, double> compute_s_by_source;  ///< over all ranks
  std::vector<LinkLoad> busiest_links;    ///< top 10 by bytes
  std::vector<TierTraffic> link_tiers;    ///< per tier: max / mean / p99 utilization and bytes
  std::vector<LinkLoad> hot_links;        ///< >= 2x their tier's mean utilization, top 10
  std::vector<LinkSeries> link_series;    ///< utilization over the iteration of the 5 busiest links
  int64_t replayed_ranks = 0;             ///< all ranks, or one per TP group with aggregate_tp
  /// The reductions applied (SimulationOptions::exact_reductions, aggregate_tp), one line each,
  /// e.g. "TP aggregation: TP rank 0 replayed for its 8 TP ranks (...)"; empty: full replay.
  std::vector<std::string> reductions;
  int64_t flows = 0;                      ///< flows (inter-node and intra-node transfers)
  int64_t group_flows = 0;                ///< flows that ended in a closed-form group
  int64_t solver_flows = 0;               ///< flows SimGrid's solver held (the rest: closed form)
  int64_t max_solver_flows = 0;           ///< most flows in SimGrid's solver at once
  int64_t events = 0;                     ///< ops + flows + timers
  double sim_wall_s = 0;                  ///< replay + results (wall_phases_s)
  /// Wall seconds per phase, in order: "lowering" (build_program, simulate() only), "timing"
  /// (TimedProgram: every kernel through the cost model), "platform" (SimGrid zones), "replay"
  /// (dataflow of every rank and SimGrid's solver), "results" (breakdowns, link loads, the
  /// timeline handed to its sink).
  std::vector<std::pair<std::string, double>> wall_phases_s;
  std::map<std::string, int64_t> collective_algorithms;  ///< calls per algorithm
  Timeline timeline;
};

/// Simulates one iteration of a lowered Program. `prog.ranks` holds either every rank or one
/// representative per pipeline stage (ranks without their own RankProgram run the one of their
/// stage, with peers and groups mapped to their coordinates). Same contract as simulate().
SimulationResult simulate_program(const Program& prog, const TopologySpec& topo,
                                  const CostModel& costs, const SimulationOptions& opts = {});

/// Simulates one iteration of `s` on `topo` (s.cluster.num_gpus GPUs) with `costs`, with the
/// scenario's what-if knobs applied on top of `opts` (with_what_if(); check_what_if() first).
/// Creates the process's SimGrid engine: call at most once per process.
/// Throws Error when the Program cannot complete (a send without its recv, a collective some
/// member never reaches, a dependency cycle), naming the ranks and ops left waiting.
SimulationResult simulate(const Scenario& s, const TopologySpec& topo, const CostModel& costs,
                          const SimulationOptions& opts = {});

}  // namespace traintwin
