// Several training jobs on one shared fabric (issue 29): every job's Program replayed together in
// one SimGrid engine on one platform, each job's ranks on the nodes its placement gives it, each
// job iterating at its own pace (an iteration starts when the job's previous one has run its last
// op) so that their communication phases drift against each other; and each job alone on the same
// nodes, for its slowdown. Flows of all jobs go through one flow network (sim/flow_network.hpp):
// a flow alone on its links keeps its closed form, flows of several jobs that meet share their
// links by CM02's max-min, in closed-form groups or in SimGrid's solver as for one job.
//
// Flow: a placement file (sim/placement.hpp) -> run_cluster(): each job's scenario loaded on the
// placement's topology and checked (GPU count, NVLink domain), lowered once (once for all jobs of
// one scenario and overrides); each job alone for one iteration in a child process (every
// iteration of a job alone is the same: it starts on an idle fabric) and, beside them in one more
// child, every job together for its iterations (replay_jobs(); SimGrid allows one engine per
// process, sim/isolated.hpp). A job that shares no link with any other (by the links its alone
// replay used) is exact alone: its iterations together are its alone one's, the speculative
// together replay is given up and only the jobs that share links are replayed together, unless
// ClusterOptions::replay_independent_jobs. The CLI (`traintwin cluster`,
// cli/cluster_command.cpp) prints the ClusterResult.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/program.hpp"
#include "sim/cost_model.hpp"
#include "sim/iteration_metrics.hpp"
#include "sim/placement.hpp"
#include "sim/simulation_options.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// One job for replay_jobs(): its Program (every rank or one per pipeline stage, as
/// simulate_program() takes it), costs and options, the nodes it runs on and its iterations.
struct JobInput {
  std::string name;
  const Program* program = nullptr;  ///< kept by reference during replay_jobs()
  const CostModel* costs = nullptr;  ///< kept by reference during replay_jobs()
  /// The replay's options with the scenario's what-if folded in (with_what_if()); the platform
  /// is shared, so scaling must be the default (no bandwidth factor, no degraded link).
  SimulationOptions options;
  /// Nodes (NVLink domains) in rank order: rank r on GPU r % G of nodes[r / G], G =
  /// node.gpus_per_node (the GPUs used per domain); nodes.size() x G = the Program's world.
  std::vector<int64_t> nodes;
  int64_t iterations = 1;  ///< >= 1
  double start_s = 0;      ///< its first iteration's start, seconds of simulated time (>= 0)
};

/// One iteration of a job: start and end (seconds of simulated time) and the breakdown of the
/// rank that ended last (its categories add up to end_s - start_s).
struct JobIteration {
  double start_s = 0;
  double end_s = 0;
  TimeBreakdown critical;
  double time_s() const { return end_s - start_s; }
};

/// A platform link as the multi-job results name it (Platform::links() order).
struct FabricLink {
  std::string name;
  std::string tier;  ///< "nvlink" | "nic" | "leaf-spine" | "spine-core" | "loopback"
  double bandwidth_Bps = 0;
};

/// One job's part of replay_jobs().
struct JobReplay {
  std::string name;
  std::vector<JobIteration> iterations;  ///< in order, JobInput::iterations of them
  std::vector<double> link_bytes;        ///< bytes its flows put on each link (JobsReplay::links)
  std::vector<std::string> reductions;   ///< SimulationResult::reductions of the job
  int64_t ops = 0;                       ///< ops replayed, all iterations
  int64_t flows = 0;                     ///< flows started, all iterations
};

/// A link's utilization over the replay, per job, in equal time bins from time 0.
struct SharedLinkSeries {
  std::string name;
  std::string tier;
  double bin_s = 0;  ///< width of a bin, seconds
  /// Per job (in order), per bin: the job's bytes on the link in the bin / (bandwidth x bin_s).
  std::vector<std::vector<double>> utilization;
};

/// Bins of SharedLinkSeries over the replay.
inline constexpr int kSharedLinkBins = 200;

/// What replay_jobs() returns.
struct JobsReplay {
  std::vector<JobReplay> jobs;    ///< in the order of the inputs
  std::vector<FabricLink> links;  ///< every link of the platform (Platform::links())
  /// The (at most 5) links carrying the most bytes of two or more jobs, over time.
  std::vector<SharedLinkSeries> shared_series;
  int64_t group_flows = 0;        ///< flows that ended in a closed-form group
  int64_t solver_flows = 0;       ///< flows SimGrid's solver held
  int64_t max_solver_flows = 0;   ///< most flows in SimGrid's solver at once
  double wall_s = 0;              ///< wall seconds of the replay (platform, timing, dataflow)
};

/// Replays `jobs` together on the platform of `topo` with `num_nodes` nodes (NVLink domains) in
/// this process's SimGrid engine (at most one simulation per process, as simulate()). TP
/// aggregation (SimulationOptions::exact_reductions) stays exact across jobs only when every job
/// has it with the same TP size and each GPU its own rail; otherwise every rank of every job is
/// replayed (JobReplay::reductions says which). Throws InvalidArgument for a job without Program,
/// costs or iterations, nodes outside the fabric or shared by two jobs, or nodes that do not hold
/// the job's ranks; ConfigError for a platform what-if; Error when a job's iteration cannot
/// complete (naming the job, then the ranks and ops left waiting).
JobsReplay replay_jobs(const std::vector<JobInput>& jobs, const TopologySpec& topo,
                       int64_t num_nodes);

/// Knobs of run_cluster().
struct ClusterOptions {
  /// Every rank of every job replayed (no TP aggregation), as simulate --full-replay.
  bool full_replay = false;
  /// Also replay together the jobs that share no link with another (false: their iterations
  /// together are their alone iteration's, which they are exactly).
  bool replay_independent_jobs = false;
  int workers = 2;  ///< child processes at once (>= 1)
};

/// Mean and distribution of a job's iteration times, seconds.
struct IterationStats {
  double mean_s = 0, min_s = 0, p50_s = 0, max_s = 0;
};

/// One job's figures alone and together.
struct ClusterJobResult {
  std::string name;
  std::string scenario;         ///< the scenario file, as the placement resolved it
  std::vector<int64_t> nodes;   ///< in rank order
  int64_t num_gpus = 0;
  int64_t iterations = 0;
  double start_s = 0;
  IterationStats alone;         ///< its one alone iteration (every alone iteration is the same)
  IterationStats together;      ///< over its iterations together
  double slowdown = 0;          ///< together.mean_s / alone.mean_s
  /// The critical rank's breakdown alone, and its mean over the iterations together.
  TimeBreakdown alone_breakdown, together_breakdown;
  std::vector<JobIteration> together_iterations;
  /// false: it shares no link with another job, so its iterations together are its alone one's
  /// laid end to end from start_s (exact; ClusterOptions::replay_independent_jobs replays it).
  bool replayed_together = true;
};

/// A link that carries traffic of two or more jobs, with its utilization over the window.
struct SharedLink {
  std::string name;
  std::string tier;
  double bandwidth_Bps = 0;
  std::vector<double> utilization;  ///< per job (ClusterResult::jobs order): bytes / (bw x window)
  double total = 0;                 ///< sum over jobs
};

/// Per network tier: the links each job uses and those they share.
struct TierSharing {
  std::string tier;
  int64_t links = 0;                     ///< links of the tier on the platform
  std::vector<int64_t> links_per_job;    ///< links carrying the job's traffic
  int64_t links_shared = 0;              ///< links carrying traffic of >= 2 jobs
  /// Over the shared links: each job's mean utilization, and the total's mean and max.
  std::vector<double> shared_utilization_mean;
  double shared_total_mean = 0, shared_total_max = 0;
};

/// What run_cluster() returns.
struct ClusterResult {
  std::string name;                 ///< Placement::name
  std::string topology;             ///< the topology's name
  int64_t num_nodes = 0;
  int64_t gpus_per_node = 0;
  /// The window the utilizations are over: from the earliest start to the latest end together.
  double window_s = 0;
  std::vector<ClusterJobResult> jobs;
  std::vector<TierSharing> tiers;         ///< tiers with traffic, in the platform's order
  std::vector<SharedLink> shared_links;   ///< the 10 busiest shared links by total
  /// The 5 busiest shared links' utilization per job over time (from the together replay).
  std::vector<SharedLinkSeries> shared_series;
  std::vector<std::string> reductions;    ///< one line each (TP aggregation, independent jobs)
  int64_t flows = 0;                      ///< flows of the together replay
  int64_t solver_flows = 0;               ///< of which SimGrid's solver held
  /// Wall seconds: loading, lowering and the alone replays (with the together replay of every
  /// job beside them); then the together replay of the jobs that share links when that one was
  /// given up; in all.
  double alone_wall_s = 0, together_wall_s = 0, wall_s = 0;
};

/// Runs a placement: loads each job's scenario (its overrides applied, cluster.topology set to
/// the placement's topology) and checks it against its nodes, then replays the jobs alone and
/// together in child processes (file comment). Throws ConfigError "<placement>:<line>:
/// jobs[i] (<name>): <key>: <problem>" when a job's nodes hold fewer or more GPUs than its
/// cluster.num_gpus, its TP (or expert TP) group is larger than a node's NVLink domain, the GPU
/// cannot run it, its what-if changes the shared fabric, or its scenario cannot be read; a
/// placement whose num_nodes the topology cannot hold; Error when a replay fails (naming the
/// job).
ClusterResult run_cluster(const Placement& placement, const ClusterOptions& options = {});

/// The result as JSON (the CLI's --json): every field above, times in seconds.
nlohmann::ordered_json to_json(const ClusterResult& r);

}  // namespace traintwin
