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
// closed form while it is alone on its links or meets only flows it can time with it (CM02's
// max-min, sim/max_min.hpp) and hands them to SimGrid's solver otherwise, so contention is exact
// while SimGrid only ever holds the flows it must (SIMGRID-NOTES.md: its speed depends on how
// many transfers it holds).
// Ranks of one pipeline stage share one lowered Program (their ops differ only in peers and
// groups, which are mapped per rank). Reductions exact by symmetry run by default
// (SimulationOptions::exact_reductions): TP aggregation replays TP rank 0 of each TP group and
// loads the other rails' links as rail 0's, with the full replay's results. The knobs and their
// checks are sim/simulation_options.hpp (before this in the flow); the result goes on to
// sim/summary.hpp and sim/summary_document.hpp.
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
#include "sim/simulation_options.hpp"
#include "topologies/topology.hpp"
#include "traces/timeline.hpp"

namespace traintwin {

/// A rank whose late arrival at the collectives of one group kind made the critical rank wait
/// (TimeBreakdown::sync_wait_s, split by who was last).
struct LatePeer {
  int64_t rank = 0;                ///< the member that arrived last
  GroupKind group = GroupKind::kDp;
  double wait_s = 0;               ///< the critical rank's sync wait on it, seconds
  int64_t waits = 0;               ///< gaps of the critical rank that ended waiting for it
  std::string op;                  ///< the collective of its largest wait (Program::label)
  double largest_wait_s = 0;       ///< that wait, seconds
};

/// SimulationResult::late_peers keeps the largest this many.
inline constexpr size_t kMaxLatePeers = 5;

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
  /// The ranks the critical rank waited for at collectives, by sync wait, largest first (at
  /// most kMaxLatePeers): who held it up, and in which group.
  std::vector<LatePeer> late_peers;
  double sim_wall_s = 0;                  ///< replay + results (wall_phases_s)
  /// Wall seconds per phase, in order: "lowering" (build_program, simulate() only), "timing"
  /// (TimedProgram: every kernel through the cost model), "platform" (SimGrid zones), "replay"
  /// (dataflow of every rank and SimGrid's solver), "results" (breakdowns, link loads, the
  /// timeline handed to its sink).
  std::vector<std::pair<std::string, double>> wall_phases_s;
  std::map<std::string, int64_t> collective_algorithms;  ///< calls per algorithm
  /// Calls per "algorithm/protocol" (e.g. "ring/LL", "nvls/Simple"; p2p and ring exchanges
  /// Simple).
  std::map<std::string, int64_t> collective_protocols;
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
