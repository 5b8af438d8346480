// summary.json as a typed document: everything `traintwin simulate --out` writes about one
// simulated iteration (the summary's figures, the layout, memory per stage, link loads, the
// breakdowns, the replay's counters), with its one writer and its one reader. The report
// (viz/report_data.hpp, next in the flow) reads this struct, never the file's keys, so a field
// renamed here breaks the build rather than the page.
//
//   summary_document(scenario, topology, result)  -> SummaryDocument (from a replay's result)
//   summary_json(...) / summary_document_json()   -> the file's text (with / without the version)
//   read_summary_json(json, origin)               -> SummaryDocument (schema version checked)
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/memory.hpp"
#include "core/scenario.hpp"
#include "sim/iteration_metrics.hpp"
#include "sim/json_fields.hpp"
#include "sim/link_traffic.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// The schema version summary.json carries ("schema_version", its first key) and the only one
/// read_summary_json() reads. Raise it when a field is renamed, removed or changes meaning.
inline constexpr int64_t kSummarySchemaVersion = 2;

/// summary.json's "layout": the parallel layout and batch of the run, and its pipeline split.
struct SummaryLayout {
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  int64_t virtual_pipeline_model_parallel_size = 1;
  int64_t context_parallel_size = 1;
  int64_t data_parallel_size = 1;
  bool sequence_parallel = false;
  int64_t micro_batch_size = 1;
  int64_t global_batch_size = 1;
  int64_t num_micro_batches = 1;
  RecomputeGranularity recompute_granularity = RecomputeGranularity::kNone;
  std::string rank_order;  ///< e.g. "tp-cp-ep-dp-pp" (core/rank_layout.hpp)
  /// The expert layout (written for mixtures of experts only).
  struct Experts {
    int64_t model_parallel_size = 1;   ///< EP
    int64_t tensor_parallel_size = 1;  ///< ETP
    int64_t data_parallel_size = 1;    ///< expert DP
    bool operator==(const Experts&) const = default;
  };
  std::optional<Experts> experts;
  /// Megatron's pipeline-split keys (core/pipeline_split.hpp); null (the layout: "", written
  /// only when given): not given.
  std::string pipeline_model_parallel_layout;
  std::optional<int64_t> decoder_first_pipeline_num_layers;
  std::optional<int64_t> decoder_last_pipeline_num_layers;
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  /// Transformer layers of each model chunk, [stage][chunk].
  std::vector<std::vector<int64_t>> layers_per_model_chunk;

  /// Transformer layers of each pipeline stage (its chunks summed).
  std::vector<int64_t> layers_per_stage() const;
  bool operator==(const SummaryLayout&) const = default;
};

/// summary.json's "delta_vs_base": a what-if run against its base run.
struct DeltaVsBase {
  double iteration_time_relative = 0;  ///< relative_change(this, base)
  double tokens_per_s_relative = 0;
  double mfu_relative = 0;
  double exposed_comm_delta_s = 0;  ///< this run's exposed communication - the base's, seconds
  double speedup = 0;               ///< base iteration time / this one (0 when this one is 0)
  bool operator==(const DeltaVsBase&) const = default;
};

/// Everything summary.json holds, in the types the simulation uses.
struct SummaryDocument {
  std::string scenario;  ///< the scenario's name
  int64_t num_gpus = 0;
  /// The topology's GPU name; on a mixed cluster each kind with its count ("4 x A + 4 x B").
  std::string gpu;
  SummaryLayout layout;
  std::optional<WhatIf> what_if;             ///< the scenario's what-if knobs, when any
  std::optional<BaseRunMetrics> base;        ///< the base run, when it was simulated
  std::optional<DeltaVsBase> delta_vs_base;  ///< present with `base`
  SimulationSummary summary;  ///< iteration time, throughput, MFU, exposed comm, cost sources
  double gpu_memory_bytes = 0;  ///< of the job's smallest GPU
  std::vector<StageMemory> memory_per_stage;  ///< memory model, one per pipeline stage
  std::vector<LinkLoad> busiest_links;        ///< top 10 by bytes (bandwidth_Bps not written)
  std::vector<TierTraffic> link_tiers;
  std::vector<LinkLoad> hot_links;  ///< with vs_tier_mean (bandwidth_Bps not written)
  std::vector<LinkSeries> link_series;
  TimeBreakdown critical_rank;
  std::vector<TimeBreakdown> per_stage;
  std::vector<LatePeer> late_peers;  ///< who the critical rank waited for at collectives
  std::map<std::string, int64_t> collective_algorithms;  ///< calls per algorithm
  /// Wall-clock time of the simulation and per phase; absent in byte-identical files.
  std::optional<double> sim_wall_s;
  std::vector<std::pair<std::string, double>> wall_phases_s;
  std::vector<std::string> reductions;
  int64_t replayed_ranks = 0, events = 0, ops = 0, flows = 0, group_flows = 0, solver_flows = 0,
          max_solver_flows = 0;
};

/// The document of a replay's result. `include_wall_time` false leaves sim_wall_s and
/// wall_phases_s out (for byte-identical files); `base`, when given, adds base and
/// delta_vs_base. See summary_json() for what each field means.
SummaryDocument summary_document(const Scenario& s, const TopologySpec& topo,
                                 const SimulationResult& r, bool include_wall_time = true,
                                 const BaseRunMetrics* base = nullptr);

/// The document's fields as summary.json spells them, in the file's order, without the
/// schema version (a sweep row's metrics embed this; the sweep file carries the version).
nlohmann::ordered_json summary_document_json(const SummaryDocument& d);

/// summary.json: "schema_version" (kSummarySchemaVersion), then summary_document_json() of
/// summary_document(s, topo, r, include_wall_time, base): the summary's fields
/// (summary_fields_json) plus `memory_per_stage` (the memory model's breakdown),
/// `gpu_memory_bytes`, `busiest_links` (top 10 by bytes), `link_tiers` (per tier: links, bytes
/// total/mean/max, utilization mean/p99/max), `hot_links` (>= 2x their tier's mean utilization,
/// with vs_tier_mean), `link_series` (utilization of the 5 busiest links in 100 bins of the
/// iteration), `sim_wall_s`, `wall_phases_s` (lowering, timing, platform, replay, results),
/// `events`, `flows`, `group_flows` (flows timed in closed-form groups: they met only each
/// other), `solver_flows` and `max_solver_flows` (flows SimGrid's solver held; the others were
/// alone on their links), `collective_algorithms`, per-stage breakdowns (each with its
/// sync_wait_s), `late_peers` (the ranks the critical rank waited for at collectives: rank,
/// group, wait_s, waits, op and largest_wait_s of its largest wait; largest first, at most
/// kMaxLatePeers), the
/// scenario's name and layout (with the pipeline split: the four Megatron keys and
/// `layers_per_model_chunk` [stage][chunk]). With what-if knobs in the scenario: `what_if`
/// (what_if_json()); with `base` also `base` (iteration_time_s, tokens_per_s_per_gpu, mfu,
/// exposed_comm_s {tp, cp, ep, pp, dp, total}, sync_wait_s) and `delta_vs_base` (iteration_time_relative,
/// tokens_per_s_relative, mfu_relative: relative changes of this run against the base;
/// exposed_comm_delta_s: the difference in seconds; speedup: base iteration time / this one).
nlohmann::ordered_json summary_json(const Scenario& s, const TopologySpec& topo,
                                    const SimulationResult& r, bool include_wall_time = true,
                                    const BaseRunMetrics* base = nullptr);

/// The document from summary_document_json()'s fields at `where` (no version check). Throws
/// Error naming where.origin and the key's path for a missing key or a value of the wrong type
/// or outside its allowed values (recompute_granularity: none, selective, full).
SummaryDocument summary_document_from_json(const nlohmann::ordered_json& j, const JsonPlace& where);

/// One rank's breakdown as summary.json writes it (critical_rank, per_stage[]): rank, compute_s,
/// optimizer_s, exposed_{tp,cp,ep,pp,dp}_s, bubble_s, sync_wait_s, exposed_offload_s (seconds;
/// a document without exposed_offload_s, written before it existed, reads it as 0).
nlohmann::ordered_json breakdown_json(const TimeBreakdown& b);

/// The breakdown breakdown_json() wrote, at `where`. Throws Error naming where.origin and the
/// key's path for a missing key or a value of the wrong type.
TimeBreakdown breakdown_from_json(const nlohmann::ordered_json& j, const JsonPlace& where);

/// summary.json's parsed text from `origin` (a file name, starting every error message): checks
/// schema_version (check_schema_version: kSummarySchemaVersion only), then
/// summary_document_from_json().
SummaryDocument read_summary_json(const nlohmann::ordered_json& file, const std::string& origin);

}  // namespace traintwin
