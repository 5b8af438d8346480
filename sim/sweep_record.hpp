// sweep.json and sweep.csv: a sweep's rows as typed records, with their one writer and their one
// reader. sim/sweep.hpp (before this in the flow) enumerates, evaluates and ranks the
// configurations; this file writes what `traintwin sweep --out` keeps and reads it back for the
// report (viz/report_data.hpp, next in the flow), so a field renamed here breaks the build
// rather than the page.
//
//   sweep_record(row)        -> SweepRecord: a row as the file holds it (no Scenario)
//   sweep_json / sweep_csv   -> the files' text (sweep.json carries "schema_version")
//   read_sweep_json(json)    -> the records (schema version checked)
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "sim/json_fields.hpp"
#include "sim/sweep.hpp"

namespace traintwin {

/// The schema version sweep.json carries ({"schema_version": 1, "rows": [...]}) and the only one
/// read_sweep_json() reads. Raise it when a field is renamed, removed or changes meaning.
inline constexpr int64_t kSweepSchemaVersion = 2;

/// A row's "configuration": the layout and batch the row ran.
struct SweepRecordConfiguration {
  int64_t num_gpus = 0;
  int64_t tensor_model_parallel_size = 1;
  int64_t context_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  int64_t virtual_pipeline_model_parallel_size = 1;
  int64_t data_parallel_size = 1;  ///< 0 when num_gpus / (TP x CP x PP) does not divide
  int64_t micro_batch_size = 1;
  int64_t global_batch_size = 1;
  RecomputeGranularity recompute_granularity = RecomputeGranularity::kNone;
  bool sequence_parallel = false;
  bool use_distributed_optimizer = false;
  std::string fp8_format = "none";  ///< training.fp8_format, or "none"
  int64_t expert_model_parallel_size = 1;
  int64_t expert_tensor_parallel_size = 1;
  int64_t gpus_per_replica = 1;  ///< TP x CP x PP
  PipelineScheduleKind pipeline_schedule = PipelineScheduleKind::k1F1B;
  /// parallelism.pipeline_model_parallel_layout of a searched split (sim/sweep_split.hpp); ""
  /// (and absent from the JSON) for the scenario's own split.
  std::string pipeline_model_parallel_layout;
  bool use_megatron_fsdp = false;  ///< training.use_megatron_fsdp
  /// training.data_parallel_sharding_strategy (no_shard unless Megatron-FSDP).
  DataParallelShardingStrategy data_parallel_sharding_strategy =
      DataParallelShardingStrategy::kNoShard;
  int64_t zero_stage = 0;  ///< TrainingConfig::zero_stage(): 0 replicated .. 3 parameters sharded
  /// training.num_distributed_optimizer_instances (HSDP replicas; 1 without HSDP).
  int64_t num_distributed_optimizer_instances = 1;
  bool optimizer_cpu_offload = false;       ///< training.optimizer_cpu_offload
  double optimizer_offload_fraction = 1.0;  ///< training.optimizer_offload_fraction
};

/// How a row's data-parallel sharding reads in a table: "DDP", "ZeRO-1" .. "ZeRO-3" (zero_stage),
/// "/N" for N HSDP replicas (num_distributed_optimizer_instances > 1), "+off" with optimizer CPU
/// offload: "ZeRO-3/2", "ZeRO-1+off". The sweep's terminal table and its HTML report print it.
std::string zero_label(const SweepRecordConfiguration& c);

/// One row of sweep.json: SweepRow without its Scenario.
struct SweepRecord {
  int64_t rank = 0;  ///< 1 = fastest among ranked rows; 0 (null in the file) otherwise
  SweepStatus status = SweepStatus::kInvalid;
  int64_t index = 0;  ///< position in the enumeration order
  SweepRecordConfiguration configuration;
  double peak_memory_bytes = 0;      ///< memory.peak_bytes
  double memory_capacity_bytes = 0;  ///< memory.capacity_bytes
  double excess_memory_bytes = 0;    ///< memory.excess_bytes (0 when it fits)
  bool fits = false;                 ///< memory.fits
  double memory_reserve_bytes = 0;   ///< memory.reserve_bytes
  bool memory_at_risk = false;       ///< memory.at_risk: fits, but inside the reserve or > 90 %
  std::vector<std::string> adjustments;
  /// Why an invalid row is invalid or an error row failed; nullopt (null) for the others.
  std::optional<std::string> reason;
  /// What the evaluator found (null in the file when not evaluated). Read back, `mode` is the
  /// file's "mode" key with `detail` null, or "simulate" with `detail` the whole metrics object
  /// (a replay's summary_document_json()).
  std::optional<SweepEvaluation> metrics;
};

/// The record of a row (its scenario's layout and batch as SweepRecordConfiguration).
SweepRecord sweep_record(const SweepRow& row);

/// One row as sweep.json holds it: rank (null unless ranked), status, index, configuration
/// (num_gpus, TP, CP, PP, VPP, DP, micro-batch size, global batch size, recompute, SP,
/// distributed optimizer, fp8_format, EP, ETP, GPUs per replica, pipeline schedule, sharding,
/// ZeRO stage, HSDP instances, optimizer_cpu_offload and its fraction), memory (peak_bytes,
/// capacity_bytes, excess_bytes, fits), adjustments, reason (invalid or error; null otherwise)
/// and metrics: the evaluation's detail when it has one, else summary_fields_json() of its
/// summary plus "mode"; null when not evaluated.
nlohmann::ordered_json sweep_record_json(const SweepRecord& record);
/// sweep_record_json(sweep_record(row)).
nlohmann::ordered_json sweep_row_json(const SweepRow& row);
/// sweep.json: {"schema_version": kSweepSchemaVersion, "rows": [sweep_row_json(), ...]} in the
/// rows' order.
nlohmann::ordered_json sweep_json(const std::vector<SweepRow>& rows);
/// sweep.csv: a header, then one line per row with sweep_row_json() flattened: nested objects
/// become dotted columns (configuration.tensor_model_parallel_size, metrics.mfu, ...), arrays a
/// JSON text cell; the columns are the union over rows in first-seen order (empty cell where a row
/// lacks one). RFC 4180 quoting.
std::string sweep_csv(const std::vector<SweepRow>& rows);

/// The record from sweep_record_json()'s fields at `where`. Throws Error naming where.origin
/// and the key's path for a missing key, a value of the wrong type, a status other than ranked,
/// oom, error, invalid, a recompute_granularity other than none, selective, full, or a ranked
/// row without metrics.
SweepRecord sweep_record_from_json(const nlohmann::ordered_json& j, const JsonPlace& where);

/// sweep.json's parsed text from `origin` (a file name, starting every error message): checks
/// schema_version (check_schema_version: kSweepSchemaVersion only), then reads every element of
/// "rows" with sweep_record_from_json(), in the file's order.
std::vector<SweepRecord> read_sweep_json(const nlohmann::ordered_json& file,
                                         const std::string& origin);

}  // namespace traintwin
