// The metrics of a simulated iteration, as the `simulate` command prints them, and their JSON
// fields (summary.json's headline figures, a sweep row's metrics). The whole summary.json
// document is sim/summary_document.hpp, next in the flow.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/memory_reserve.hpp"
#include "core/scenario.hpp"
#include "sim/iteration_metrics.hpp"
#include "sim/json_fields.hpp"
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
  /// Exposed communication of the critical rank by kind (TimeBreakdown's categories).
  double exposed_tp_s = 0, exposed_cp_s = 0, exposed_ep_s = 0, exposed_pp_s = 0, exposed_dp_s = 0;
  /// Sync wait of the critical rank: idle at collectives for a late member, not communication
  /// (TimeBreakdown::sync_wait_s).
  double sync_wait_s = 0;
  /// CPU offload: the critical rank's time waiting for host ops (host-link copies, the host
  /// CPU's optimizer step; TimeBreakdown::exposed_offload_s), 0 without offload.
  double exposed_offload_s = 0;
  double compute_s = 0;
  double optimizer_s = 0;
  double peak_memory_bytes = 0;  ///< max over pipeline stages (memory model)
  /// Every stage's peak within the memory of its own GPUs (gpu_memory_per_stage_bytes; the
  /// reserve of core/memory_reserve.hpp not counted: memory_verdict counts it).
  bool fits_in_memory = false;
  /// The worst stage's verdict with its reserve (core/memory_reserve.hpp layout_memory_fit, as
  /// `simulate` and `sweep` judge): "fits" | "at risk" | "OOM"; "" when read from a summary.json
  /// written before the field existed.
  std::string memory_verdict;
  double memory_reserve_bytes = 0;  ///< the largest stage's reserve (0 when not recorded)
  std::map<std::string, double> cost_sources;  ///< share of compute seconds per source
  /// How MFU was counted: the GEMM precision's peak and the model FLOPs formula (summary.json's
  /// mfu_formula, mfu_formula_text()).
  std::string mfu_formula;
};

/// The MFU formula of scenario `s` in words: the dense peak of its GEMM precision, the model
/// FLOPs formula of its model, the GPT closed form and how HFU differs.
std::string mfu_formula_text(const Scenario& s);

/// Per pipeline stage (0 .. PP - 1), the memory of the smallest GPU its ranks run on, bytes: the
/// topology's GPU on a cluster of one type; on a mixed cluster (node_groups) each stage's own
/// ranks' GPUs (global rank r on the GPU of `job`'s rank_type[r], its stage layout_of(s)'s
/// coord(r).pp), so a stage on H200s is judged against 141 GB while a stage on H100s is against
/// 80 GB (their fit: core/memory_reserve.hpp layout_memory_fit with these capacities). Throws
/// InvalidArgument when `job` holds another number of ranks than the scenario.
std::vector<double> gpu_memory_per_stage_bytes(const Scenario& s, const JobGpus& job);

/// Derives the summary from either engine's metrics; `compute_s_by_source` (seconds of compute
/// per cost source over all ranks, empty when unknown) gives cost_sources.
SimulationSummary summarize(const Scenario& s, const TopologySpec& topo, const IterationMetrics& m,
                            const std::map<CostSource, double>& compute_s_by_source = {});
/// Derives the summary from a replay's result (its cost sources included).
SimulationSummary summarize(const Scenario& s, const TopologySpec& topo, const SimulationResult& r);

/// The summary's own fields as summary.json spells them (iteration_time_s, tokens_per_s,
/// tokens_per_s_per_gpu, model_tflops_per_gpu, mfu, hfu, mfu_formula, pipeline_bubble_fraction,
/// exposed_comm_s {tp, cp, ep, pp, dp}, sync_wait_s, exposed_offload_s, compute_s, optimizer_s,
/// peak_memory_bytes, fits_in_memory, memory_verdict, memory_reserve_bytes, cost_sources).
/// summary_json() writes these, and the sweep's rows of the analytical mode.
/// The "exposed_comm_s" object {tp, cp, ep, pp, dp} (seconds) of a summary or a base run: any
/// type with exposed_{tp,cp,ep,pp,dp}_s members (SimulationSummary, BaseRunMetrics).
template <class T>
nlohmann::ordered_json exposed_comm_json(const T& m) {
  return {{"tp", m.exposed_tp_s},
          {"cp", m.exposed_cp_s},
          {"ep", m.exposed_ep_s},
          {"pp", m.exposed_pp_s},
          {"dp", m.exposed_dp_s}};
}
/// Reads exposed_comm_json()'s object j["exposed_comm_s"] into `m`. Throws Error naming the key's
/// path for a missing key or a value of the wrong type.
template <class T>
void read_exposed_comm(const nlohmann::ordered_json& j, const JsonPlace& where, T& m) {
  const nlohmann::ordered_json& exposed = json_object(j, "exposed_comm_s", where);
  const JsonPlace e = where.key("exposed_comm_s");
  m.exposed_tp_s = json_number(exposed, "tp", e);
  m.exposed_cp_s = json_number(exposed, "cp", e);
  m.exposed_ep_s = json_number(exposed, "ep", e);
  m.exposed_pp_s = json_number(exposed, "pp", e);
  m.exposed_dp_s = json_number(exposed, "dp", e);
}

nlohmann::ordered_json summary_fields_json(const SimulationSummary& m);
/// The summary from the fields summary_fields_json() writes, read from the object `j` at
/// `where` (extra keys ignored; exposed_offload_s, absent from documents written before it
/// existed, reads as 0). Throws Error naming where.origin and the key's path for a missing key
/// or a value of the wrong type.
SimulationSummary summary_fields_from_json(const nlohmann::ordered_json& j, const JsonPlace& where);

/// A summary through a process boundary (a worker process, an MPI rank): summary_fields_json()
/// and summary_fields_from_json() (one encoding). from_json throws Error naming the key for a
/// missing or mistyped field.
void to_json(nlohmann::json& j, const SimulationSummary& m);
void from_json(const nlohmann::json& j, SimulationSummary& m);

/// The figures a what-if run is compared on: those of its base run (the same scenario without
/// cluster.what_if). Exposed communication is that of the critical rank, as in the summary.
struct BaseRunMetrics {
  double iteration_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double exposed_tp_s = 0, exposed_cp_s = 0, exposed_ep_s = 0, exposed_pp_s = 0, exposed_dp_s = 0;
  double sync_wait_s = 0;  ///< not communication: waiting for a late member of a collective

  bool operator==(const BaseRunMetrics&) const = default;
  double exposed_comm_s() const {
    return exposed_tp_s + exposed_cp_s + exposed_ep_s + exposed_pp_s + exposed_dp_s;
  }
};

/// The comparison figures of a summary.
BaseRunMetrics base_run_metrics(const SimulationSummary& m);

/// The knobs of cluster.what_if that are given, as the scenario file spells them, e.g.
/// {"ib_bandwidth_scale": 2.0, "straggler": {"rank": 17, "compute_scale": 1.2}}.
nlohmann::ordered_json what_if_json(const WhatIf& what_if);
/// The knobs what_if_json() writes, read from the object `j` at `where`; Error naming the file
/// and key for a value of the wrong type.
WhatIf what_if_from_json(const nlohmann::ordered_json& j, const JsonPlace& where);
/// One line naming the given knobs, e.g. "ib_bandwidth_scale 2, straggler rank 17 x 1.2
/// compute, degraded_link node0-nic0-up x 0.5 bandwidth"; "" when none.
std::string describe_what_if(const WhatIf& what_if);

/// (value - base) / base; 0 when base is 0.
double relative_change(double value, double base);

}  // namespace traintwin
