// The metrics of a simulated iteration, as the `simulate` command prints them and writes
// summary.json.
#pragma once

#include <nlohmann/json.hpp>

#include "core/scenario.hpp"
#include "sim/replay.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// The summary of one simulated iteration. Throughput and utilization formulas:
///   tokens/s = global_batch_size x seq_length / iteration time;
///   MFU = model FLOPs / (iteration time x GPUs x dense peak), model FLOPs
///         72 B s l h^2 (1 + s/(6h) + V/(12 l h)) (Korthikanti et al. 2022, no recomputation);
///   HFU = the same with hardware FLOPs (recomputed forward work included; for full
///         recomputation this is Narayanan et al. SC'21 eq. 3).
struct SimulationSummary {
  double iteration_time_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double model_tflops_per_gpu = 0;  ///< model FLOPs / iteration time / GPUs / 1e12
  double mfu = 0;
  double hfu = 0;
  double pipeline_bubble_fraction = 0;  ///< bubble of the critical rank / iteration time
  double exposed_tp_s = 0, exposed_pp_s = 0, exposed_dp_s = 0;
  double compute_s = 0;
  double optimizer_s = 0;
  double peak_memory_bytes = 0;  ///< max over pipeline stages (memory model)
  bool fits_in_memory = false;
  std::map<std::string, double> cost_sources;  ///< share of compute seconds per source
};

/// Derives the summary from a result.
SimulationSummary summarize(const Scenario& s, const TopologySpec& topo, const SimulationResult& r);

/// summary.json: the summary's fields plus `memory_per_stage` (the memory model's breakdown),
/// `gpu_memory_bytes`, `busiest_links`, `sim_wall_s`, `events`, `flows`,
/// `collective_algorithms`, per-stage breakdowns, the scenario's name and layout and
/// `mfu_formula`. `include_wall_time` false leaves sim_wall_s out (for byte-identical files).
nlohmann::ordered_json summary_json(const Scenario& s, const TopologySpec& topo,
                                    const SimulationResult& r, bool include_wall_time = true);

}  // namespace traintwin
