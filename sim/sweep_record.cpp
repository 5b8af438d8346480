#include "sim/sweep_record.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/scenario_enum_names.hpp"
#include "sim/summary.hpp"

namespace traintwin {

using ojson = nlohmann::ordered_json;

// ----- the writer -------------------------------------------------------------------------------

std::string zero_label(const SweepRecordConfiguration& c) {
  const std::string stage = c.zero_stage == 0 ? "DDP" : fmt::format("ZeRO-{}", c.zero_stage);
  return (c.num_distributed_optimizer_instances > 1
              ? fmt::format("{}/{}", stage, c.num_distributed_optimizer_instances)
              : stage) +
         (c.optimizer_cpu_offload ? "+off" : "");
}

SweepRecord sweep_record(const SweepRow& row) {
  const Scenario& s = row.config.scenario;
  SweepRecord r;
  r.rank = row.rank;
  r.status = row.status;
  r.index = row.config.index;
  SweepRecordConfiguration& c = r.configuration;
  c.num_gpus = s.cluster.num_gpus;
  c.tensor_model_parallel_size = s.parallel.tensor_model_parallel_size;
  c.context_parallel_size = s.parallel.context_parallel_size;
  c.pipeline_model_parallel_size = s.parallel.pipeline_model_parallel_size;
  c.virtual_pipeline_model_parallel_size = s.parallel.virtual_pipeline_model_parallel_size;
  c.data_parallel_size = s.parallel.data_parallel_size;
  c.micro_batch_size = s.training.micro_batch_size;
  c.global_batch_size = s.training.global_batch_size;
  c.recompute_granularity = s.training.recompute_granularity;
  c.sequence_parallel = s.parallel.sequence_parallel;
  c.use_distributed_optimizer = s.training.use_distributed_optimizer;
  c.fp8_format = s.training.fp8() ? to_string(*s.training.fp8_format) : "none";
  c.expert_model_parallel_size = s.parallel.expert_model_parallel_size;
  c.expert_tensor_parallel_size = s.parallel.expert_tp();
  c.gpus_per_replica = row.config.gpus_per_replica();
  c.pipeline_schedule = s.parallel.pipeline_schedule;
  c.pipeline_model_parallel_layout = s.parallel.pipeline_model_parallel_layout;
  c.use_megatron_fsdp = s.training.use_megatron_fsdp;
  c.data_parallel_sharding_strategy = s.training.data_parallel_sharding_strategy;
  c.zero_stage = s.training.zero_stage();
  c.num_distributed_optimizer_instances = s.training.num_distributed_optimizer_instances;
  c.optimizer_cpu_offload = s.training.optimizer_cpu_offload;
  c.optimizer_offload_fraction = s.training.optimizer_offload_fraction;
  r.peak_memory_bytes = row.config.peak_memory_bytes;
  r.memory_capacity_bytes = row.config.memory_capacity_bytes;
  r.excess_memory_bytes = row.config.excess_memory_bytes;
  r.fits = row.config.fits();
  r.memory_reserve_bytes = row.config.memory_reserve_bytes;
  r.memory_at_risk = row.config.valid && row.config.memory_verdict == MemoryVerdict::kAtRisk;
  r.adjustments = row.config.adjustments;
  if (row.status == SweepStatus::kInvalid) {
    r.reason = row.config.invalid_reason;
  } else if (row.status == SweepStatus::kError) {
    r.reason = row.error;
  } else if (row.status == SweepStatus::kOutOfMemory && row.config.host_excess_memory_bytes > 0) {
    r.reason = host_memory_reason(row.config);
  }
  r.metrics = row.evaluation;
  return r;
}

nlohmann::ordered_json sweep_record_json(const SweepRecord& r) {
  const SweepRecordConfiguration& c = r.configuration;
  ojson j;
  j["rank"] = r.rank > 0 ? ojson(r.rank) : ojson(nullptr);
  j["status"] = to_string(r.status);
  j["index"] = r.index;
  j["configuration"] = {
      {"num_gpus", c.num_gpus},
      {"tensor_model_parallel_size", c.tensor_model_parallel_size},
      {"context_parallel_size", c.context_parallel_size},
      {"pipeline_model_parallel_size", c.pipeline_model_parallel_size},
      {"virtual_pipeline_model_parallel_size", c.virtual_pipeline_model_parallel_size},
      {"data_parallel_size", c.data_parallel_size},
      {"micro_batch_size", c.micro_batch_size},
      {"global_batch_size", c.global_batch_size},
      {"recompute_granularity", to_string(c.recompute_granularity)},
      {"sequence_parallel", c.sequence_parallel},
      {"use_distributed_optimizer", c.use_distributed_optimizer},
      {"fp8_format", c.fp8_format},
      {"expert_model_parallel_size", c.expert_model_parallel_size},
      {"expert_tensor_parallel_size", c.expert_tensor_parallel_size},
      {"gpus_per_replica", c.gpus_per_replica},
      {"pipeline_schedule", to_string(c.pipeline_schedule)},
      {"use_megatron_fsdp", c.use_megatron_fsdp},
      {"data_parallel_sharding_strategy", to_string(c.data_parallel_sharding_strategy)},
      {"zero_stage", c.zero_stage},
      {"num_distributed_optimizer_instances", c.num_distributed_optimizer_instances},
      {"optimizer_cpu_offload", c.optimizer_cpu_offload},
      {"optimizer_offload_fraction", c.optimizer_offload_fraction}};
  if (!c.pipeline_model_parallel_layout.empty()) {
    j["configuration"]["pipeline_model_parallel_layout"] = c.pipeline_model_parallel_layout;
  }
  j["memory"] = {{"peak_bytes", r.peak_memory_bytes},
                 {"capacity_bytes", r.memory_capacity_bytes},
                 {"excess_bytes", r.excess_memory_bytes},
                 {"fits", r.fits},
                 {"reserve_bytes", r.memory_reserve_bytes},
                 {"at_risk", r.memory_at_risk}};
  j["adjustments"] = r.adjustments;
  j["reason"] = r.reason ? ojson(*r.reason) : ojson(nullptr);
  if (!r.metrics) {
    j["metrics"] = nullptr;
  } else if (!r.metrics->detail.is_null()) {
    j["metrics"] = r.metrics->detail;
  } else {
    j["metrics"] = summary_fields_json(r.metrics->summary);
    j["metrics"]["mode"] = r.metrics->mode;
  }
  return j;
}

nlohmann::ordered_json sweep_row_json(const SweepRow& row) {
  return sweep_record_json(sweep_record(row));
}

nlohmann::ordered_json sweep_json(const std::vector<SweepRow>& rows) {
  ojson out;
  out["schema_version"] = kSweepSchemaVersion;
  out["rows"] = ojson::array();
  for (const SweepRow& r : rows) out["rows"].push_back(sweep_row_json(r));
  return out;
}

namespace {

/// Flattens `j` into (dotted column, cell text) pairs.
void flatten(const nlohmann::ordered_json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      flatten(value, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  std::string cell;
  if (j.is_null()) {
    cell = "";
  } else if (j.is_string()) {
    cell = j.get<std::string>();
  } else {
    cell = j.dump();  // numbers, booleans, arrays (as JSON text)
  }
  out.emplace_back(prefix, std::move(cell));
}

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

}  // namespace

std::string sweep_csv(const std::vector<SweepRow>& rows) {
  std::vector<std::map<std::string, std::string>> flat;
  std::vector<std::string> columns;
  std::set<std::string> known;
  for (const SweepRow& r : rows) {
    std::vector<std::pair<std::string, std::string>> cells;
    flatten(sweep_row_json(r), "", cells);
    for (const auto& [col, cell] : cells) {
      if (known.insert(col).second) columns.push_back(col);
    }
    flat.emplace_back(cells.begin(), cells.end());
  }
  // A row without metrics flattens to a bare "metrics" column: drop it when some row has
  // metrics.* columns.
  const bool has_metric_fields = std::any_of(
      columns.begin(), columns.end(), [](const auto& c) { return c.rfind("metrics.", 0) == 0; });
  if (has_metric_fields) {
    columns.erase(std::remove(columns.begin(), columns.end(), "metrics"), columns.end());
  }
  std::ostringstream out;
  for (size_t i = 0; i < columns.size(); ++i) out << (i ? "," : "") << csv_quote(columns[i]);
  out << "\n";
  for (const auto& row : flat) {
    for (size_t i = 0; i < columns.size(); ++i) {
      if (i) out << ",";
      const auto it = row.find(columns[i]);
      if (it != row.end()) out << csv_quote(it->second);
    }
    out << "\n";
  }
  return out.str();
}

// ----- the reader -------------------------------------------------------------------------------

namespace {

/// A row's status, spelt as to_string(SweepStatus) spells it.
SweepStatus status_from_json(const ojson& j, const JsonPlace& at) {
  constexpr SweepStatus kAll[] = {SweepStatus::kRanked, SweepStatus::kOutOfMemory,
                                  SweepStatus::kError, SweepStatus::kInvalid};
  const std::string text = json_string(j, "status", at);
  std::vector<std::string_view> names;
  for (SweepStatus s : kAll) {
    if (text == to_string(s)) return s;
    names.emplace_back(to_string(s));
  }
  json_not_allowed(at.key("status"), text, names);
}

}  // namespace

SweepRecord sweep_record_from_json(const nlohmann::ordered_json& j, const JsonPlace& where) {
  SweepRecord r;
  if (!json_at(j, "rank", where).is_null()) r.rank = json_integer(j, "rank", where);
  r.status = status_from_json(j, where);
  r.index = json_integer(j, "index", where);
  const ojson& cj = json_object(j, "configuration", where);
  const JsonPlace at = where.key("configuration");
  SweepRecordConfiguration& c = r.configuration;
  c.num_gpus = json_integer(cj, "num_gpus", at);
  c.tensor_model_parallel_size = json_integer(cj, "tensor_model_parallel_size", at);
  c.context_parallel_size = json_integer(cj, "context_parallel_size", at);
  c.pipeline_model_parallel_size = json_integer(cj, "pipeline_model_parallel_size", at);
  c.virtual_pipeline_model_parallel_size =
      json_integer(cj, "virtual_pipeline_model_parallel_size", at);
  c.data_parallel_size = json_integer(cj, "data_parallel_size", at);
  c.micro_batch_size = json_integer(cj, "micro_batch_size", at);
  c.global_batch_size = json_integer(cj, "global_batch_size", at);
  c.recompute_granularity =
      json_enum(cj, "recompute_granularity", at, EnumNames<RecomputeGranularity>::table);
  c.sequence_parallel = json_bool(cj, "sequence_parallel", at);
  c.use_distributed_optimizer = json_bool(cj, "use_distributed_optimizer", at);
  c.fp8_format = json_string(cj, "fp8_format", at);
  c.expert_model_parallel_size = json_integer(cj, "expert_model_parallel_size", at);
  c.expert_tensor_parallel_size = json_integer(cj, "expert_tensor_parallel_size", at);
  c.gpus_per_replica = json_integer(cj, "gpus_per_replica", at);
  c.pipeline_schedule =
      json_enum(cj, "pipeline_schedule", at, EnumNames<PipelineScheduleKind>::table);
  if (cj.contains("pipeline_model_parallel_layout")) {
    c.pipeline_model_parallel_layout = json_string(cj, "pipeline_model_parallel_layout", at);
  }
  // Sharding fields: absent in files written before the sharding axis (plain layouts then).
  if (cj.contains("data_parallel_sharding_strategy")) {
    c.use_megatron_fsdp = json_bool(cj, "use_megatron_fsdp", at);
    c.data_parallel_sharding_strategy = json_enum(cj, "data_parallel_sharding_strategy", at,
                                                  EnumNames<DataParallelShardingStrategy>::table);
    c.zero_stage = json_integer(cj, "zero_stage", at);
    c.num_distributed_optimizer_instances =
        json_integer(cj, "num_distributed_optimizer_instances", at);
  } else {
    c.zero_stage = c.use_distributed_optimizer ? 1 : 0;
  }
  // Offload fields: absent in files written before the offload axis (no offload then).
  if (cj.contains("optimizer_cpu_offload")) {
    c.optimizer_cpu_offload = json_bool(cj, "optimizer_cpu_offload", at);
    c.optimizer_offload_fraction = json_number(cj, "optimizer_offload_fraction", at);
  }
  const ojson& memory = json_object(j, "memory", where);
  const JsonPlace mem = where.key("memory");
  r.peak_memory_bytes = json_number(memory, "peak_bytes", mem);
  r.memory_capacity_bytes = json_number(memory, "capacity_bytes", mem);
  r.excess_memory_bytes = json_number(memory, "excess_bytes", mem);
  r.fits = json_bool(memory, "fits", mem);
  r.memory_reserve_bytes = json_number(memory, "reserve_bytes", mem);
  r.memory_at_risk = json_bool(memory, "at_risk", mem);
  r.adjustments = json_strings(j, "adjustments", where);
  r.reason = json_optional_string(j, "reason", where);
  const ojson& metrics = json_at(j, "metrics", where);
  if (metrics.is_null()) {
    if (r.status == SweepStatus::kRanked) {
      throw Error(fmt::format("{}: '{}' is null, but a ranked row has metrics", where.origin,
                              where.key("metrics").path));
    }
  } else {
    const JsonPlace m = where.key("metrics");
    SweepEvaluation e;
    e.summary = summary_fields_from_json(metrics, m);
    if (metrics.contains("mode")) {
      e.mode = json_string(metrics, "mode", m);
    } else {
      e.mode = "simulate";
      e.detail = metrics;
    }
    r.metrics = std::move(e);
  }
  return r;
}

std::vector<SweepRecord> read_sweep_json(const nlohmann::ordered_json& file,
                                         const std::string& origin) {
  check_schema_version(file, origin, kSweepSchemaVersion,
                       "`traintwin sweep --out DIR` writes a current sweep.json");
  const JsonPlace top{origin, ""};
  const ojson& rows = json_array(file, "rows", top);
  std::vector<SweepRecord> out;
  out.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    out.push_back(sweep_record_from_json(rows[i], top.key("rows").index(i)));
  }
  return out;
}

}  // namespace traintwin
