// Running `traintwin sweep`: the command line's request (SweepRequest, parsed by
// cli/sweep_command.cpp) becomes the base scenario, its topology and every configuration's
// ranked row (SweepOutcome): the checks that must fail before any simulation, the enumeration
// (sim/sweep.hpp), the evaluator the --mode names, the progress bar on stderr and the split over
// MPI ranks (cli/sweep_mpi.hpp). Next in the flow: cli/sweep_command.cpp prints the outcome.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "sim/sweep.hpp"
#include "sim/sweep_split.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {

/// What `traintwin sweep` was asked to do: its flags, parsed and checked.
struct SweepRequest {
  std::string scenario_file;           ///< the base scenario
  std::vector<Override> overrides;     ///< --set entries, then the pipeline-split flags
  SweepAxes axes;                      ///< the swept values (and global_batch_size_per_dp)
  PipelineSplitAxis pipeline_split;    ///< --pipeline-split (sim/sweep_split.hpp)
  std::optional<double> train_tokens;  ///< --train-tokens: a token budget
  int jobs = 1;                        ///< --jobs: simulations at once (>= 1)
  int top = 20;                        ///< --top: rows listed, and the K of --mode auto
  std::string out_dir;                 ///< --out: empty for none
  std::string cost_db;                 ///< --cost-db: empty for the default database
  bool simulate_oom = false;           ///< --simulate-oom
  std::string mode = "simulate";       ///< --mode: simulate | analytical | auto
};

/// A finished sweep: the base scenario, its topology and every configuration's row, ranked
/// (sim/sweep.hpp rank_rows()).
struct SweepOutcome {
  Scenario base;
  TopologySpec topology;
  std::vector<SweepRow> rows;
  /// Valid layouts with PP > 1 that --pipeline-split auto could not search (the estimator could
  /// not cost their stages: add_pipeline_splits' `uncosted`).
  int64_t unsearched_splits = 0;
};

/// Runs `request`: loads the base scenario with its overrides; checks the --out folder (before
/// the sweep, not after it), the cluster size of every GPU count and, when FP8 is swept on, the
/// GPU's FP8 support; enumerates the configurations and evaluates them by the --mode: simulate
/// (the SimGrid replay, in worker processes), analytical (the estimator, in this process) or auto
/// (the estimator for every configuration, then the replay of its top K = max(top, 1) ranked
/// ones, ranked again; ZeRO-3 is estimated as every other layout). On a mixed cluster every
/// stage's memory is judged on its own GPUs (stage_memory_capacity); --pipeline-split adds the
/// searched or listed splits of each layout (add_pipeline_splits; auto costs the stages by the
/// estimate of the even split, estimated_stage_costs). Progress goes to stderr on
/// the printing process. Under mpirun/srun every rank evaluates its share and rank 0 gathers the
/// rows; the other ranks get std::nullopt. Throws what load_scenario, load_topology, the checks
/// and run_sweep throw.
std::optional<SweepOutcome> run_sweep_request(const SweepRequest& request);

}  // namespace traintwin::cli
