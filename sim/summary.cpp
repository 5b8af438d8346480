#include "sim/summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/flops.hpp"
#include "core/memory.hpp"
#include "core/pipeline_split.hpp"

namespace traintwin {

SimulationSummary summarize(const Scenario& s, const TopologySpec& topo, const SimulationResult& r) {
  return summarize(s, topo, static_cast<const IterationMetrics&>(r), r.compute_s_by_source);
}

SimulationSummary summarize(const Scenario& s, const TopologySpec& topo, const IterationMetrics& r,
                            const std::map<CostSource, double>& compute_s_by_source) {
  SimulationSummary out;
  const double t = r.iteration_time_s;
  const double gpus = static_cast<double>(s.cluster.num_gpus);
  const double tokens = static_cast<double>(s.training.global_batch_size * s.model.seq_length);
  const double peak = topo.gpu.peak_FLOPs(gemm_precision(s.training));
  const double model = model_flops_per_iteration(s.model, s.training.global_batch_size);
  const double hardware = hardware_flops_per_iteration(s.model, s.training.global_batch_size,
                                                       s.training.recompute_granularity);
  out.iteration_time_s = t;
  if (t > 0) {
    out.tokens_per_s = tokens / t;
    out.tokens_per_s_per_gpu = out.tokens_per_s / gpus;
    out.model_tflops_per_gpu = model / t / gpus / 1e12;
    out.mfu = model_flops_utilization(model, t, s.cluster.num_gpus, peak);
    out.hfu = model_flops_utilization(hardware, t, s.cluster.num_gpus, peak);
    out.pipeline_bubble_fraction = r.critical.bubble_s / t;
  }
  out.exposed_tp_s = r.critical.exposed_tp_s;
  out.exposed_cp_s = r.critical.exposed_cp_s;
  out.exposed_ep_s = r.critical.exposed_ep_s;
  out.exposed_pp_s = r.critical.exposed_pp_s;
  out.exposed_dp_s = r.critical.exposed_dp_s;
  out.compute_s = r.critical.compute_s;
  out.optimizer_s = r.critical.optimizer_s;
  for (const StageMemory& m : memory_per_stage(s)) {
    out.peak_memory_bytes = std::max(out.peak_memory_bytes, m.total_bytes());
  }
  out.fits_in_memory = out.peak_memory_bytes <= topo.gpu.memory_bytes;
  double total = 0;
  for (const auto& [src, sec] : compute_s_by_source) total += sec;
  for (CostSource src : {CostSource::kMeasured, CostSource::kScaled, CostSource::kRoofline}) {
    auto it = compute_s_by_source.find(src);
    out.cost_sources[to_string(src)] = total > 0 && it != compute_s_by_source.end() ? it->second / total : 0.0;
  }
  return out;
}

nlohmann::ordered_json summary_fields_json(const Scenario& s, const SimulationSummary& m) {
  nlohmann::ordered_json j;
  j["iteration_time_s"] = m.iteration_time_s;
  j["tokens_per_s"] = m.tokens_per_s;
  j["tokens_per_s_per_gpu"] = m.tokens_per_s_per_gpu;
  j["model_tflops_per_gpu"] = m.model_tflops_per_gpu;
  j["mfu"] = m.mfu;
  j["hfu"] = m.hfu;
  j["mfu_formula"] = fmt::format(
      "MFU = model FLOPs / (iteration_time x GPUs x dense {} peak); {} (for GPT with ffn = 4h: "
      "72 B s l h^2 (1 + s/(6h) + V/(12 l h)), Korthikanti et al. 2022); HFU adds recomputed "
      "work (Narayanan et al. SC'21 eq. 3 for full recomputation)",
      to_string(gemm_precision(s.training)), model_flops_formula(s.model));
  j["pipeline_bubble_fraction"] = m.pipeline_bubble_fraction;
  j["exposed_comm_s"] = {{"tp", m.exposed_tp_s}, {"cp", m.exposed_cp_s}, {"ep", m.exposed_ep_s},
                         {"pp", m.exposed_pp_s}, {"dp", m.exposed_dp_s}};
  j["compute_s"] = m.compute_s;
  j["optimizer_s"] = m.optimizer_s;
  j["peak_memory_bytes"] = m.peak_memory_bytes;
  j["fits_in_memory"] = m.fits_in_memory;
  j["cost_sources"] = m.cost_sources;
  return j;
}

void to_json(nlohmann::json& j, const SimulationSummary& m) {
  j = nlohmann::json{{"iteration_time_s", m.iteration_time_s},
                     {"tokens_per_s", m.tokens_per_s},
                     {"tokens_per_s_per_gpu", m.tokens_per_s_per_gpu},
                     {"model_tflops_per_gpu", m.model_tflops_per_gpu},
                     {"mfu", m.mfu},
                     {"hfu", m.hfu},
                     {"pipeline_bubble_fraction", m.pipeline_bubble_fraction},
                     {"exposed_tp_s", m.exposed_tp_s},
                     {"exposed_cp_s", m.exposed_cp_s},
                     {"exposed_ep_s", m.exposed_ep_s},
                     {"exposed_pp_s", m.exposed_pp_s},
                     {"exposed_dp_s", m.exposed_dp_s},
                     {"compute_s", m.compute_s},
                     {"optimizer_s", m.optimizer_s},
                     {"peak_memory_bytes", m.peak_memory_bytes},
                     {"fits_in_memory", m.fits_in_memory},
                     {"cost_sources", m.cost_sources}};
}

void from_json(const nlohmann::json& j, SimulationSummary& m) {
  j.at("iteration_time_s").get_to(m.iteration_time_s);
  j.at("tokens_per_s").get_to(m.tokens_per_s);
  j.at("tokens_per_s_per_gpu").get_to(m.tokens_per_s_per_gpu);
  j.at("model_tflops_per_gpu").get_to(m.model_tflops_per_gpu);
  j.at("mfu").get_to(m.mfu);
  j.at("hfu").get_to(m.hfu);
  j.at("pipeline_bubble_fraction").get_to(m.pipeline_bubble_fraction);
  j.at("exposed_tp_s").get_to(m.exposed_tp_s);
  j.at("exposed_cp_s").get_to(m.exposed_cp_s);
  j.at("exposed_ep_s").get_to(m.exposed_ep_s);
  j.at("exposed_pp_s").get_to(m.exposed_pp_s);
  j.at("exposed_dp_s").get_to(m.exposed_dp_s);
  j.at("compute_s").get_to(m.compute_s);
  j.at("optimizer_s").get_to(m.optimizer_s);
  j.at("peak_memory_bytes").get_to(m.peak_memory_bytes);
  j.at("fits_in_memory").get_to(m.fits_in_memory);
  j.at("cost_sources").get_to(m.cost_sources);
}

BaseRunMetrics base_run_metrics(const SimulationSummary& m) {
  BaseRunMetrics b;
  b.iteration_time_s = m.iteration_time_s;
  b.tokens_per_s_per_gpu = m.tokens_per_s_per_gpu;
  b.mfu = m.mfu;
  b.exposed_tp_s = m.exposed_tp_s;
  b.exposed_cp_s = m.exposed_cp_s;
  b.exposed_ep_s = m.exposed_ep_s;
  b.exposed_pp_s = m.exposed_pp_s;
  b.exposed_dp_s = m.exposed_dp_s;
  return b;
}

nlohmann::ordered_json what_if_json(const WhatIf& w) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (w.ib_bandwidth_scale) j["ib_bandwidth_scale"] = *w.ib_bandwidth_scale;
  if (w.nvlink_bandwidth_scale) j["nvlink_bandwidth_scale"] = *w.nvlink_bandwidth_scale;
  if (w.gpu_speed_scale) j["gpu_speed_scale"] = *w.gpu_speed_scale;
  if (w.straggler) {
    j["straggler"] = {{"rank", w.straggler->rank},
                      {"compute_scale", w.straggler->compute_scale}};
  }
  if (w.degraded_link) {
    j["degraded_link"] = {{"name", w.degraded_link->name},
                          {"bandwidth_scale", w.degraded_link->bandwidth_scale}};
  }
  return j;
}

std::string describe_what_if(const WhatIf& w) {
  std::vector<std::string> parts;
  if (w.ib_bandwidth_scale) {
    parts.push_back(fmt::format("ib_bandwidth_scale {:g}", *w.ib_bandwidth_scale));
  }
  if (w.nvlink_bandwidth_scale) {
    parts.push_back(fmt::format("nvlink_bandwidth_scale {:g}", *w.nvlink_bandwidth_scale));
  }
  if (w.gpu_speed_scale) parts.push_back(fmt::format("gpu_speed_scale {:g}", *w.gpu_speed_scale));
  if (w.straggler) {
    parts.push_back(fmt::format("straggler rank {} x {:g} compute", w.straggler->rank,
                                w.straggler->compute_scale));
  }
  if (w.degraded_link) {
    parts.push_back(fmt::format("degraded_link {} x {:g} bandwidth", w.degraded_link->name,
                                w.degraded_link->bandwidth_scale));
  }
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

double relative_change(double value, double base) { return base != 0 ? (value - base) / base : 0; }

namespace {

nlohmann::ordered_json breakdown_json(const TimeBreakdown& b) {
  return {{"rank", b.rank},           {"compute_s", b.compute_s},       {"optimizer_s", b.optimizer_s},
          {"exposed_tp_s", b.exposed_tp_s}, {"exposed_cp_s", b.exposed_cp_s},
          {"exposed_ep_s", b.exposed_ep_s}, {"exposed_pp_s", b.exposed_pp_s},
          {"exposed_dp_s", b.exposed_dp_s}, {"bubble_s", b.bubble_s}};
}

}  // namespace

nlohmann::ordered_json summary_json(const Scenario& s, const TopologySpec& topo,
                                    const SimulationResult& r, bool include_wall_time,
                                    const BaseRunMetrics* base) {
  const SimulationSummary m = summarize(s, topo, r);
  nlohmann::ordered_json j;
  j["scenario"] = s.name;
  j["num_gpus"] = s.cluster.num_gpus;
  j["gpu"] = topo.gpu.name;
  j["layout"] = {{"tensor_model_parallel_size", s.parallel.tensor_model_parallel_size},
                 {"pipeline_model_parallel_size", s.parallel.pipeline_model_parallel_size},
                 {"virtual_pipeline_model_parallel_size", s.parallel.virtual_pipeline_model_parallel_size},
                 {"context_parallel_size", s.parallel.context_parallel_size},
                 {"data_parallel_size", s.parallel.data_parallel_size},
                 {"sequence_parallel", s.parallel.sequence_parallel},
                 {"micro_batch_size", s.training.micro_batch_size},
                 {"global_batch_size", s.training.global_batch_size},
                 {"num_micro_batches", s.num_micro_batches()},
                 {"recompute_granularity", to_string(s.training.recompute_granularity)},
                 {"rank_order", s.parallel.rank_order}};
  if (s.model.is_moe()) {
    j["layout"]["expert_model_parallel_size"] = s.parallel.expert_model_parallel_size;
    j["layout"]["expert_tensor_parallel_size"] = s.parallel.expert_tp();
    j["layout"]["expert_data_parallel_size"] = s.parallel.expert_data_parallel_size();
  }
  // The pipeline split (core/pipeline_split.hpp): Megatron's four keys and its result.
  const ParallelConfig& par = s.parallel;
  auto optional_int = [](const std::optional<int64_t>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  j["layout"]["decoder_first_pipeline_num_layers"] =
      optional_int(par.decoder_first_pipeline_num_layers);
  j["layout"]["decoder_last_pipeline_num_layers"] = optional_int(par.decoder_last_pipeline_num_layers);
  j["layout"]["account_for_embedding_in_pipeline_split"] =
      par.account_for_embedding_in_pipeline_split;
  j["layout"]["account_for_loss_in_pipeline_split"] = par.account_for_loss_in_pipeline_split;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (int64_t stage = 0; stage < par.pipeline_model_parallel_size; ++stage) {
    nlohmann::ordered_json chunks = nlohmann::ordered_json::array();
    for (int64_t c = 0; c < par.virtual_pipeline_model_parallel_size; ++c) {
      chunks.push_back(chunk_layers(s, stage, c).num_layers);
    }
    layers.push_back(chunks);
  }
  j["layout"]["layers_per_model_chunk"] = layers;  // [stage][chunk]
  if (s.cluster.what_if.any()) j["what_if"] = what_if_json(s.cluster.what_if);
  if (base != nullptr) {
    const BaseRunMetrics now = base_run_metrics(m);
    j["base"] = {{"iteration_time_s", base->iteration_time_s},
                 {"tokens_per_s_per_gpu", base->tokens_per_s_per_gpu},
                 {"mfu", base->mfu},
                 {"exposed_comm_s",
                  {{"tp", base->exposed_tp_s},
                   {"cp", base->exposed_cp_s},
                   {"ep", base->exposed_ep_s},
                   {"pp", base->exposed_pp_s},
                   {"dp", base->exposed_dp_s},
                   {"total", base->exposed_comm_s()}}}};
    j["delta_vs_base"] = {
        {"iteration_time_relative", relative_change(now.iteration_time_s, base->iteration_time_s)},
        {"tokens_per_s_relative",
         relative_change(now.tokens_per_s_per_gpu, base->tokens_per_s_per_gpu)},
        {"mfu_relative", relative_change(now.mfu, base->mfu)},
        {"exposed_comm_delta_s", now.exposed_comm_s() - base->exposed_comm_s()},
        {"speedup",
         now.iteration_time_s > 0 ? base->iteration_time_s / now.iteration_time_s : 0.0}};
  }
  const nlohmann::ordered_json fields = summary_fields_json(s, m);
  for (const auto& [key, value] : fields.items()) {
    if (key != "cost_sources") j[key] = value;
  }
  j["gpu_memory_bytes"] = topo.gpu.memory_bytes;
  nlohmann::ordered_json mem = nlohmann::ordered_json::array();
  for (const StageMemory& st : memory_per_stage(s)) {
    mem.push_back({{"pp_rank", st.pp_rank},
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
                   {"total_bytes", st.total_bytes()}});
  }
  j["memory_per_stage"] = mem;
  j["cost_sources"] = m.cost_sources;
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const LinkLoad& l : r.busiest_links) {
    links.push_back({{"name", l.name}, {"tier", l.tier}, {"bytes", l.bytes}, {"utilization", l.utilization}});
  }
  j["busiest_links"] = links;
  nlohmann::ordered_json tiers = nlohmann::ordered_json::array();
  for (const TierTraffic& t : r.link_tiers) {
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
  nlohmann::ordered_json hot = nlohmann::ordered_json::array();
  for (const LinkLoad& l : r.hot_links) {
    hot.push_back({{"name", l.name}, {"tier", l.tier}, {"bytes", l.bytes},
                   {"utilization", l.utilization}, {"vs_tier_mean", l.vs_tier_mean}});
  }
  j["hot_links"] = hot;
  nlohmann::ordered_json series = nlohmann::ordered_json::array();
  for (const LinkSeries& ls : r.link_series) {
    series.push_back({{"name", ls.name}, {"tier", ls.tier}, {"bin_s", ls.bin_s},
                      {"utilization", ls.utilization}});
  }
  j["link_series"] = series;
  j["critical_rank"] = breakdown_json(r.critical);
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const TimeBreakdown& b : r.per_stage) stages.push_back(breakdown_json(b));
  j["per_stage"] = stages;
  j["collective_algorithms"] = r.collective_algorithms;
  if (include_wall_time) {
    j["sim_wall_s"] = r.sim_wall_s;
    nlohmann::ordered_json phases = nlohmann::ordered_json::object();
    for (const auto& [phase, sec] : r.wall_phases_s) phases[phase] = sec;
    j["wall_phases_s"] = phases;
  }
  j["reductions"] = r.reductions;
  j["replayed_ranks"] = r.replayed_ranks;
  j["events"] = r.events;
  j["ops"] = r.ops;
  j["flows"] = r.flows;
  j["solver_flows"] = r.solver_flows;
  j["max_solver_flows"] = r.max_solver_flows;
  return j;
}

}  // namespace traintwin
