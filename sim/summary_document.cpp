#include "sim/summary_document.hpp"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/pipeline_split.hpp"
#include "core/scenario_enum_names.hpp"

namespace traintwin {

using ojson = nlohmann::ordered_json;

std::vector<int64_t> SummaryLayout::layers_per_stage() const {
  std::vector<int64_t> out;
  out.reserve(layers_per_model_chunk.size());
  for (const std::vector<int64_t>& chunks : layers_per_model_chunk) {
    int64_t total = 0;
    for (int64_t n : chunks) total += n;
    out.push_back(total);
  }
  return out;
}

// ----- from a replay ----------------------------------------------------------------------------

SummaryDocument summary_document(const Scenario& s, const TopologySpec& topo,
                                 const SimulationResult& r, bool include_wall_time,
                                 const BaseRunMetrics* base) {
  SummaryDocument d;
  d.scenario = s.name;
  d.num_gpus = s.cluster.num_gpus;
  const JobGpus job = job_gpus(topo, s.cluster.num_gpus);
  // A mixed cluster names its kinds with their counts ("4 x H200-SXM-141GB + 4 x ...").
  d.gpu = job.mixed() ? job.describe() : topo.gpu.name;
  const ParallelConfig& par = s.parallel;
  SummaryLayout& l = d.layout;
  l.tensor_model_parallel_size = par.tensor_model_parallel_size;
  l.pipeline_model_parallel_size = par.pipeline_model_parallel_size;
  l.virtual_pipeline_model_parallel_size = par.virtual_pipeline_model_parallel_size;
  l.context_parallel_size = par.context_parallel_size;
  l.data_parallel_size = par.data_parallel_size;
  l.sequence_parallel = par.sequence_parallel;
  l.micro_batch_size = s.training.micro_batch_size;
  l.global_batch_size = s.training.global_batch_size;
  l.num_micro_batches = s.num_micro_batches();
  l.recompute_granularity = s.training.recompute_granularity;
  l.rank_order = par.rank_order;
  if (s.model.is_moe()) {
    l.experts = SummaryLayout::Experts{par.expert_model_parallel_size, par.expert_tp(),
                                       par.expert_data_parallel_size()};
  }
  // The pipeline split (core/pipeline_split.hpp): Megatron's keys and its result.
  l.pipeline_model_parallel_layout = par.pipeline_model_parallel_layout;
  l.decoder_first_pipeline_num_layers = par.decoder_first_pipeline_num_layers;
  l.decoder_last_pipeline_num_layers = par.decoder_last_pipeline_num_layers;
  l.account_for_embedding_in_pipeline_split = par.account_for_embedding_in_pipeline_split;
  l.account_for_loss_in_pipeline_split = par.account_for_loss_in_pipeline_split;
  for (int64_t stage = 0; stage < par.pipeline_model_parallel_size; ++stage) {
    std::vector<int64_t> chunks;
    for (int64_t c = 0; c < par.virtual_pipeline_model_parallel_size; ++c) {
      chunks.push_back(chunk_layers(s, stage, c).num_layers);
    }
    l.layers_per_model_chunk.push_back(std::move(chunks));
  }
  if (s.cluster.what_if.any()) d.what_if = s.cluster.what_if;
  d.summary = summarize(s, topo, r);
  if (base != nullptr) {
    const BaseRunMetrics now = base_run_metrics(d.summary);
    d.base = *base;
    d.delta_vs_base = DeltaVsBase{
        relative_change(now.iteration_time_s, base->iteration_time_s),
        relative_change(now.tokens_per_s_per_gpu, base->tokens_per_s_per_gpu),
        relative_change(now.mfu, base->mfu), now.exposed_comm_s() - base->exposed_comm_s(),
        now.iteration_time_s > 0 ? base->iteration_time_s / now.iteration_time_s : 0.0};
  }
  d.gpu_memory_bytes = job.smallest_memory_bytes();  // as fits_in_memory
  d.memory_per_stage = memory_per_stage(s);
  d.busiest_links = r.busiest_links;
  d.link_tiers = r.link_tiers;
  d.hot_links = r.hot_links;
  d.link_series = r.link_series;
  d.critical_rank = r.critical;
  d.per_stage = r.per_stage;
  d.late_peers = r.late_peers;
  d.collective_algorithms = r.collective_algorithms;
  if (include_wall_time) {
    d.sim_wall_s = r.sim_wall_s;
    d.wall_phases_s = r.wall_phases_s;
  }
  d.reductions = r.reductions;
  d.replayed_ranks = r.replayed_ranks;
  d.events = r.events;
  d.ops = r.ops;
  d.flows = r.flows;
  d.group_flows = r.group_flows;
  d.solver_flows = r.solver_flows;
  d.max_solver_flows = r.max_solver_flows;
  return d;
}

// ----- the writer -------------------------------------------------------------------------------

ojson breakdown_json(const TimeBreakdown& b) {
  return {{"rank", b.rank},
          {"compute_s", b.compute_s},
          {"optimizer_s", b.optimizer_s},
          {"exposed_tp_s", b.exposed_tp_s},
          {"exposed_cp_s", b.exposed_cp_s},
          {"exposed_ep_s", b.exposed_ep_s},
          {"exposed_pp_s", b.exposed_pp_s},
          {"exposed_dp_s", b.exposed_dp_s},
          {"bubble_s", b.bubble_s},
          {"sync_wait_s", b.sync_wait_s},
          {"exposed_offload_s", b.exposed_offload_s}};
}

namespace {

ojson layout_json(const SummaryLayout& l) {
  ojson j = {{"tensor_model_parallel_size", l.tensor_model_parallel_size},
             {"pipeline_model_parallel_size", l.pipeline_model_parallel_size},
             {"virtual_pipeline_model_parallel_size", l.virtual_pipeline_model_parallel_size},
             {"context_parallel_size", l.context_parallel_size},
             {"data_parallel_size", l.data_parallel_size},
             {"sequence_parallel", l.sequence_parallel},
             {"micro_batch_size", l.micro_batch_size},
             {"global_batch_size", l.global_batch_size},
             {"num_micro_batches", l.num_micro_batches},
             {"recompute_granularity", to_string(l.recompute_granularity)},
             {"rank_order", l.rank_order}};
  if (l.experts) {
    j["expert_model_parallel_size"] = l.experts->model_parallel_size;
    j["expert_tensor_parallel_size"] = l.experts->tensor_parallel_size;
    j["expert_data_parallel_size"] = l.experts->data_parallel_size;
  }
  auto optional_int = [](const std::optional<int64_t>& v) {
    return v ? ojson(*v) : ojson(nullptr);
  };
  if (!l.pipeline_model_parallel_layout.empty()) {
    j["pipeline_model_parallel_layout"] = l.pipeline_model_parallel_layout;
  }
  j["decoder_first_pipeline_num_layers"] = optional_int(l.decoder_first_pipeline_num_layers);
  j["decoder_last_pipeline_num_layers"] = optional_int(l.decoder_last_pipeline_num_layers);
  j["account_for_embedding_in_pipeline_split"] = l.account_for_embedding_in_pipeline_split;
  j["account_for_loss_in_pipeline_split"] = l.account_for_loss_in_pipeline_split;
  j["layers_per_model_chunk"] = l.layers_per_model_chunk;  // [stage][chunk]
  return j;
}

ojson stage_memory_json(const StageMemory& st) {
  return {{"pp_rank", st.pp_rank},
          {"layers", st.layers},
          {"parameters", st.parameters},
          {"in_flight", st.in_flight},
          {"in_flight_layers", st.in_flight_layers},
          {"weights_bytes", st.weights_bytes},
          {"fp8_weight_copies_bytes", st.fp8_weight_copies_bytes},
          {"gradients_bytes", st.gradients_bytes},
          {"optimizer_bytes", st.optimizer_bytes},
          {"activations_bytes", st.activations_bytes},
          {"embedding_and_logits_bytes", st.embedding_and_logits_bytes},
          {"expert_parameters", st.expert_parameters},
          {"moe_dispatch_buffers_bytes", st.moe_dispatch_buffers_bytes},
          {"total_bytes", st.total_bytes()}};
}

}  // namespace

nlohmann::ordered_json summary_document_json(const SummaryDocument& d) {
  ojson j;
  j["scenario"] = d.scenario;
  j["num_gpus"] = d.num_gpus;
  j["gpu"] = d.gpu;
  j["layout"] = layout_json(d.layout);
  if (d.what_if) j["what_if"] = what_if_json(*d.what_if);
  if (d.base && d.delta_vs_base) {
    const BaseRunMetrics& base = *d.base;
    ojson exposed = exposed_comm_json(base);
    exposed["total"] = base.exposed_comm_s();
    j["base"] = {{"iteration_time_s", base.iteration_time_s},
                 {"tokens_per_s_per_gpu", base.tokens_per_s_per_gpu},
                 {"mfu", base.mfu},
                 {"exposed_comm_s", exposed},
                 {"sync_wait_s", base.sync_wait_s}};
    const DeltaVsBase& delta = *d.delta_vs_base;
    j["delta_vs_base"] = {{"iteration_time_relative", delta.iteration_time_relative},
                          {"tokens_per_s_relative", delta.tokens_per_s_relative},
                          {"mfu_relative", delta.mfu_relative},
                          {"exposed_comm_delta_s", delta.exposed_comm_delta_s},
                          {"speedup", delta.speedup}};
  }
  const ojson fields = summary_fields_json(d.summary);
  for (const auto& [key, value] : fields.items()) {
    if (key != "cost_sources") j[key] = value;
  }
  j["gpu_memory_bytes"] = d.gpu_memory_bytes;
  ojson mem = ojson::array();
  for (const StageMemory& st : d.memory_per_stage) mem.push_back(stage_memory_json(st));
  j["memory_per_stage"] = mem;
  j["cost_sources"] = d.summary.cost_sources;
  ojson links = ojson::array();
  for (const LinkLoad& l : d.busiest_links) {
    links.push_back(
        {{"name", l.name}, {"tier", l.tier}, {"bytes", l.bytes}, {"utilization", l.utilization}});
  }
  j["busiest_links"] = links;
  ojson tiers = ojson::array();
  for (const TierTraffic& t : d.link_tiers) {
    tiers.push_back({{"tier", t.tier},
                     {"links", t.links},
                     {"bytes_total", t.bytes_total},
                     {"bytes_mean", t.bytes_mean},
                     {"bytes_max", t.bytes_max},
                     {"utilization_mean", t.utilization_mean},
                     {"utilization_p99", t.utilization_p99},
                     {"utilization_max", t.utilization_max}});
  }
  j["link_tiers"] = tiers;
  ojson hot = ojson::array();
  for (const LinkLoad& l : d.hot_links) {
    hot.push_back({{"name", l.name},
                   {"tier", l.tier},
                   {"bytes", l.bytes},
                   {"utilization", l.utilization},
                   {"vs_tier_mean", l.vs_tier_mean}});
  }
  j["hot_links"] = hot;
  ojson series = ojson::array();
  for (const LinkSeries& ls : d.link_series) {
    series.push_back({{"name", ls.name},
                      {"tier", ls.tier},
                      {"bin_s", ls.bin_s},
                      {"utilization", ls.utilization}});
  }
  j["link_series"] = series;
  j["critical_rank"] = breakdown_json(d.critical_rank);
  ojson stages = ojson::array();
  for (const TimeBreakdown& b : d.per_stage) stages.push_back(breakdown_json(b));
  j["per_stage"] = stages;
  ojson late = ojson::array();
  for (const LatePeer& p : d.late_peers) {
    late.push_back({{"rank", p.rank},
                    {"group", to_string(p.group)},
                    {"wait_s", p.wait_s},
                    {"waits", p.waits},
                    {"op", p.op},
                    {"largest_wait_s", p.largest_wait_s}});
  }
  j["late_peers"] = late;
  j["collective_algorithms"] = d.collective_algorithms;
  if (d.sim_wall_s) {
    j["sim_wall_s"] = *d.sim_wall_s;
    ojson phases = ojson::object();
    for (const auto& [phase, sec] : d.wall_phases_s) phases[phase] = sec;
    j["wall_phases_s"] = phases;
  }
  j["reductions"] = d.reductions;
  j["replayed_ranks"] = d.replayed_ranks;
  j["events"] = d.events;
  j["ops"] = d.ops;
  j["flows"] = d.flows;
  j["group_flows"] = d.group_flows;
  j["solver_flows"] = d.solver_flows;
  j["max_solver_flows"] = d.max_solver_flows;
  return j;
}

nlohmann::ordered_json summary_json(const Scenario& s, const TopologySpec& topo,
                                    const SimulationResult& r, bool include_wall_time,
                                    const BaseRunMetrics* base) {
  ojson j;
  j["schema_version"] = kSummarySchemaVersion;
  ojson fields = summary_document_json(summary_document(s, topo, r, include_wall_time, base));
  for (auto& [key, value] : fields.items()) j[key] = std::move(value);
  return j;
}

// ----- the reader -------------------------------------------------------------------------------

TimeBreakdown breakdown_from_json(const ojson& j, const JsonPlace& at) {
  TimeBreakdown b;
  b.rank = json_integer(j, "rank", at);
  b.compute_s = json_number(j, "compute_s", at);
  b.optimizer_s = json_number(j, "optimizer_s", at);
  b.exposed_tp_s = json_number(j, "exposed_tp_s", at);
  b.exposed_cp_s = json_number(j, "exposed_cp_s", at);
  b.exposed_ep_s = json_number(j, "exposed_ep_s", at);
  b.exposed_pp_s = json_number(j, "exposed_pp_s", at);
  b.exposed_dp_s = json_number(j, "exposed_dp_s", at);
  b.bubble_s = json_number(j, "bubble_s", at);
  b.sync_wait_s = json_number(j, "sync_wait_s", at);
  // (Documents written before offload was modelled have none: nothing was exposed.)
  if (j.contains("exposed_offload_s")) b.exposed_offload_s = json_number(j, "exposed_offload_s", at);
  return b;
}

namespace {

LatePeer late_peer_from_json(const ojson& j, const JsonPlace& at) {
  LatePeer p;
  p.rank = json_integer(j, "rank", at);
  const std::string group = json_string(j, "group", at);
  bool known = false;
  std::vector<std::string> kinds;
  for (size_t g = 0; g < kNumGroupKinds; ++g) {
    const auto kind = static_cast<GroupKind>(g);
    kinds.emplace_back(to_string(kind));
    if (group == kinds.back()) {
      p.group = kind;
      known = true;
    }
  }
  if (!known) {
    throw Error(fmt::format("{}: '{}' must be a group kind ({}), got '{}'", at.origin,
                            at.key("group").shown(), fmt::join(kinds, ", "), group));
  }
  p.wait_s = json_number(j, "wait_s", at);
  p.waits = json_integer(j, "waits", at);
  p.op = json_string(j, "op", at);
  p.largest_wait_s = json_number(j, "largest_wait_s", at);
  return p;
}

SummaryLayout layout_from_json(const ojson& j, const JsonPlace& at) {
  SummaryLayout l;
  l.tensor_model_parallel_size = json_integer(j, "tensor_model_parallel_size", at);
  l.pipeline_model_parallel_size = json_integer(j, "pipeline_model_parallel_size", at);
  l.virtual_pipeline_model_parallel_size =
      json_integer(j, "virtual_pipeline_model_parallel_size", at);
  l.context_parallel_size = json_integer(j, "context_parallel_size", at);
  l.data_parallel_size = json_integer(j, "data_parallel_size", at);
  l.sequence_parallel = json_bool(j, "sequence_parallel", at);
  l.micro_batch_size = json_integer(j, "micro_batch_size", at);
  l.global_batch_size = json_integer(j, "global_batch_size", at);
  l.num_micro_batches = json_integer(j, "num_micro_batches", at);
  l.recompute_granularity =
      json_enum(j, "recompute_granularity", at, EnumNames<RecomputeGranularity>::table);
  l.rank_order = json_string(j, "rank_order", at);
  if (j.contains("expert_model_parallel_size")) {
    l.experts = SummaryLayout::Experts{json_integer(j, "expert_model_parallel_size", at),
                                       json_integer(j, "expert_tensor_parallel_size", at),
                                       json_integer(j, "expert_data_parallel_size", at)};
  }
  if (j.contains("pipeline_model_parallel_layout")) {
    l.pipeline_model_parallel_layout = json_string(j, "pipeline_model_parallel_layout", at);
  }
  l.decoder_first_pipeline_num_layers =
      json_optional_integer(j, "decoder_first_pipeline_num_layers", at);
  l.decoder_last_pipeline_num_layers =
      json_optional_integer(j, "decoder_last_pipeline_num_layers", at);
  l.account_for_embedding_in_pipeline_split =
      json_bool(j, "account_for_embedding_in_pipeline_split", at);
  l.account_for_loss_in_pipeline_split = json_bool(j, "account_for_loss_in_pipeline_split", at);
  const ojson& stages = json_array(j, "layers_per_model_chunk", at);
  const JsonPlace split = at.key("layers_per_model_chunk");
  for (size_t s = 0; s < stages.size(); ++s) {
    if (!stages[s].is_array()) {
      throw Error(fmt::format("{}: '{}' must be an array of integers, got {}", at.origin,
                              split.index(s).path, stages[s].dump()));
    }
    std::vector<int64_t> chunks;
    for (size_t c = 0; c < stages[s].size(); ++c) {
      if (!stages[s][c].is_number_integer()) {
        throw Error(fmt::format("{}: '{}' must be an integer, got {}", at.origin,
                                split.index(s).index(c).path, stages[s][c].dump()));
      }
      chunks.push_back(stages[s][c].get<int64_t>());
    }
    l.layers_per_model_chunk.push_back(std::move(chunks));
  }
  return l;
}

StageMemory stage_memory_from_json(const ojson& j, const JsonPlace& at) {
  StageMemory st;
  st.pp_rank = json_integer(j, "pp_rank", at);
  st.layers = json_integer(j, "layers", at);
  st.parameters = json_integer(j, "parameters", at);
  st.in_flight = json_integer(j, "in_flight", at);
  st.in_flight_layers = json_integer(j, "in_flight_layers", at);
  st.weights_bytes = json_number(j, "weights_bytes", at);
  st.fp8_weight_copies_bytes = json_number(j, "fp8_weight_copies_bytes", at);
  st.gradients_bytes = json_number(j, "gradients_bytes", at);
  st.optimizer_bytes = json_number(j, "optimizer_bytes", at);
  st.activations_bytes = json_number(j, "activations_bytes", at);
  st.embedding_and_logits_bytes = json_number(j, "embedding_and_logits_bytes", at);
  st.expert_parameters = json_integer(j, "expert_parameters", at);
  st.moe_dispatch_buffers_bytes = json_number(j, "moe_dispatch_buffers_bytes", at);
  return st;  // total_bytes is derived (StageMemory::total_bytes())
}

LinkLoad link_load_from_json(const ojson& j, const JsonPlace& at, bool with_tier_mean) {
  LinkLoad l;
  l.name = json_string(j, "name", at);
  l.tier = json_string(j, "tier", at);
  l.bytes = json_number(j, "bytes", at);
  l.utilization = json_number(j, "utilization", at);
  if (with_tier_mean) l.vs_tier_mean = json_number(j, "vs_tier_mean", at);
  return l;
}

/// Each element of the array j[key], read by `read(element, its place)`.
template <typename T, typename Read>
std::vector<T> array_of(const ojson& j, const std::string& key, const JsonPlace& at, Read read) {
  const ojson& a = json_array(j, key, at);
  std::vector<T> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) out.push_back(read(a[i], at.key(key).index(i)));
  return out;
}

}  // namespace

SummaryDocument summary_document_from_json(const nlohmann::ordered_json& j,
                                           const JsonPlace& where) {
  SummaryDocument d;
  d.scenario = json_string(j, "scenario", where);
  d.num_gpus = json_integer(j, "num_gpus", where);
  d.gpu = json_string(j, "gpu", where);
  d.layout = layout_from_json(json_object(j, "layout", where), where.key("layout"));
  if (j.contains("what_if")) d.what_if = what_if_from_json(j["what_if"], where.key("what_if"));
  if (j.contains("base") || j.contains("delta_vs_base")) {
    const ojson& base = json_object(j, "base", where);
    const JsonPlace b = where.key("base");
    BaseRunMetrics m;
    m.iteration_time_s = json_number(base, "iteration_time_s", b);
    m.tokens_per_s_per_gpu = json_number(base, "tokens_per_s_per_gpu", b);
    m.mfu = json_number(base, "mfu", b);
    read_exposed_comm(base, b, m);
    m.sync_wait_s = json_number(base, "sync_wait_s", b);
    d.base = m;  // exposed_comm_s.total is derived (BaseRunMetrics::exposed_comm_s())
    const ojson& delta = json_object(j, "delta_vs_base", where);
    const JsonPlace dp = where.key("delta_vs_base");
    d.delta_vs_base = DeltaVsBase{
        json_number(delta, "iteration_time_relative", dp),
        json_number(delta, "tokens_per_s_relative", dp), json_number(delta, "mfu_relative", dp),
        json_number(delta, "exposed_comm_delta_s", dp), json_number(delta, "speedup", dp)};
  }
  d.summary = summary_fields_from_json(j, where);
  d.gpu_memory_bytes = json_number(j, "gpu_memory_bytes", where);
  d.memory_per_stage = array_of<StageMemory>(j, "memory_per_stage", where, stage_memory_from_json);
  d.busiest_links = array_of<LinkLoad>(
      j, "busiest_links", where,
      [](const ojson& e, const JsonPlace& at) { return link_load_from_json(e, at, false); });
  d.link_tiers =
      array_of<TierTraffic>(j, "link_tiers", where, [](const ojson& e, const JsonPlace& at) {
        TierTraffic t;
        t.tier = json_string(e, "tier", at);
        t.links = json_integer(e, "links", at);
        t.bytes_total = json_number(e, "bytes_total", at);
        t.bytes_mean = json_number(e, "bytes_mean", at);
        t.bytes_max = json_number(e, "bytes_max", at);
        t.utilization_mean = json_number(e, "utilization_mean", at);
        t.utilization_p99 = json_number(e, "utilization_p99", at);
        t.utilization_max = json_number(e, "utilization_max", at);
        return t;
      });
  d.hot_links = array_of<LinkLoad>(j, "hot_links", where, [](const ojson& e, const JsonPlace& at) {
    return link_load_from_json(e, at, true);
  });
  d.link_series =
      array_of<LinkSeries>(j, "link_series", where, [](const ojson& e, const JsonPlace& at) {
        LinkSeries ls;
        ls.name = json_string(e, "name", at);
        ls.tier = json_string(e, "tier", at);
        ls.bin_s = json_number(e, "bin_s", at);
        ls.utilization = json_numbers(e, "utilization", at);
        return ls;
      });
  d.critical_rank =
      breakdown_from_json(json_object(j, "critical_rank", where), where.key("critical_rank"));
  d.per_stage = array_of<TimeBreakdown>(j, "per_stage", where, breakdown_from_json);
  d.late_peers = array_of<LatePeer>(j, "late_peers", where, late_peer_from_json);
  const ojson& algorithms = json_object(j, "collective_algorithms", where);
  for (const auto& [name, calls] : algorithms.items()) {
    d.collective_algorithms[name] =
        json_integer(algorithms, name, where.key("collective_algorithms"));
  }
  if (j.contains("sim_wall_s")) {
    d.sim_wall_s = json_number(j, "sim_wall_s", where);
    const ojson& phases = json_object(j, "wall_phases_s", where);
    for (const auto& [phase, sec] : phases.items()) {
      d.wall_phases_s.emplace_back(phase, json_number(phases, phase, where.key("wall_phases_s")));
    }
  }
  d.reductions = json_strings(j, "reductions", where);
  d.replayed_ranks = json_integer(j, "replayed_ranks", where);
  d.events = json_integer(j, "events", where);
  d.ops = json_integer(j, "ops", where);
  d.flows = json_integer(j, "flows", where);
  // Absent from files written before closed-form groups existed (schema 1 all the same): 0.
  d.group_flows = j.contains("group_flows") ? json_integer(j, "group_flows", where) : 0;
  d.solver_flows = json_integer(j, "solver_flows", where);
  d.max_solver_flows = json_integer(j, "max_solver_flows", where);
  return d;
}

SummaryDocument read_summary_json(const nlohmann::ordered_json& file, const std::string& origin) {
  check_schema_version(file, origin, kSummarySchemaVersion,
                       "`traintwin simulate --out DIR` writes a current summary.json");
  return summary_document_from_json(file, JsonPlace{origin, ""});
}

}  // namespace traintwin
