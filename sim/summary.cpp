#include "sim/summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/flops.hpp"
#include "core/memory.hpp"
#include "core/memory_reserve.hpp"
#include "core/pipeline_split.hpp"
#include "core/rank_layout.hpp"

namespace traintwin {

SimulationSummary summarize(const Scenario& s, const TopologySpec& topo, const SimulationResult& r) {
  return summarize(s, topo, static_cast<const IterationMetrics&>(r), r.compute_s_by_source);
}

std::vector<double> gpu_memory_per_stage_bytes(const Scenario& s, const JobGpus& job) {
  const int64_t stages = s.parallel.pipeline_model_parallel_size;
  if (!job.mixed() || job.rank_type.empty()) {
    return std::vector<double>(static_cast<size_t>(stages), job.smallest_memory_bytes());
  }
  if (static_cast<int64_t>(job.rank_type.size()) != s.cluster.num_gpus) {
    throw InvalidArgument(fmt::format("gpu_memory_per_stage_bytes: {} ranks' GPUs for {} GPUs",
                                      job.rank_type.size(), s.cluster.num_gpus));
  }
  std::vector<double> out(static_cast<size_t>(stages), 0.0);
  const RankLayout layout = layout_of(s);
  for (int64_t r = 0; r < s.cluster.num_gpus; ++r) {
    const double m = job.types[job.rank_type[static_cast<size_t>(r)]].memory_bytes;
    double& cap = out[static_cast<size_t>(layout.coord(r).pp)];
    cap = cap > 0 ? std::min(cap, m) : m;
  }
  return out;
}

SimulationSummary summarize(const Scenario& s, const TopologySpec& topo, const IterationMetrics& r,
                            const std::map<CostSource, double>& compute_s_by_source) {
  SimulationSummary out;
  const double t = r.iteration_time_s;
  const double gpus = static_cast<double>(s.cluster.num_gpus);
  const double tokens = static_cast<double>(s.training.global_batch_size * s.model.seq_length);
  // A mixed cluster: the peak of the job's GPUs on average (MFU against the sum of their
  // peaks), and each stage's memory against its own GPUs.
  const JobGpus job = job_gpus(topo, s.cluster.num_gpus);
  const double peak = job.mean_peak_FLOPs(gemm_precision(s.training));
  const double model = model_flops_per_iteration(s.model, s.training.global_batch_size);
  const double hardware = hardware_flops_per_iteration(s.model, s.training.global_batch_size,
                                                       s.training.recompute_granularity,
                                                       s.training.selective_ac_option);
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
  out.sync_wait_s = r.critical.sync_wait_s;
  out.exposed_offload_s = r.critical.exposed_offload_s;
  out.compute_s = r.critical.compute_s;
  out.optimizer_s = r.critical.optimizer_s;
  const std::vector<double> capacity = gpu_memory_per_stage_bytes(s, job);
  out.fits_in_memory = true;
  const std::vector<StageMemory> stages = memory_per_stage(s);
  for (const StageMemory& m : stages) {
    out.peak_memory_bytes = std::max(out.peak_memory_bytes, m.total_bytes());
    if (m.total_bytes() > capacity[static_cast<size_t>(m.pp_rank)]) out.fits_in_memory = false;
  }
  const LayoutMemoryFit fit = layout_memory_fit(s, stages, capacity);
  out.memory_verdict = to_string(fit.verdict);
  out.memory_reserve_bytes = fit.largest_reserve_bytes;
  double total = 0;
  for (const auto& [src, sec] : compute_s_by_source) total += sec;
  for (CostSource src : {CostSource::kMeasured, CostSource::kScaled, CostSource::kRoofline}) {
    auto it = compute_s_by_source.find(src);
    out.cost_sources[to_string(src)] = total > 0 && it != compute_s_by_source.end() ? it->second / total : 0.0;
  }
  out.mfu_formula = mfu_formula_text(s);
  return out;
}

std::string mfu_formula_text(const Scenario& s) {
  return fmt::format(
      "MFU = model FLOPs / (iteration_time x GPUs x dense {} peak); {} (for GPT with ffn = 4h: "
      "72 B s l h^2 (1 + s/(6h) + V/(12 l h)), Korthikanti et al. 2022); HFU adds recomputed "
      "work (Narayanan et al. SC'21 eq. 3 for full recomputation)",
      to_string(gemm_precision(s.training)), model_flops_formula(s.model));
}

nlohmann::ordered_json summary_fields_json(const SimulationSummary& m) {
  nlohmann::ordered_json j;
  j["iteration_time_s"] = m.iteration_time_s;
  j["tokens_per_s"] = m.tokens_per_s;
  j["tokens_per_s_per_gpu"] = m.tokens_per_s_per_gpu;
  j["model_tflops_per_gpu"] = m.model_tflops_per_gpu;
  j["mfu"] = m.mfu;
  j["hfu"] = m.hfu;
  j["mfu_formula"] = m.mfu_formula;
  j["pipeline_bubble_fraction"] = m.pipeline_bubble_fraction;
  j["exposed_comm_s"] = exposed_comm_json(m);
  j["sync_wait_s"] = m.sync_wait_s;
  j["exposed_offload_s"] = m.exposed_offload_s;
  j["compute_s"] = m.compute_s;
  j["optimizer_s"] = m.optimizer_s;
  j["peak_memory_bytes"] = m.peak_memory_bytes;
  j["fits_in_memory"] = m.fits_in_memory;
  j["memory_verdict"] = m.memory_verdict;
  j["memory_reserve_bytes"] = m.memory_reserve_bytes;
  j["cost_sources"] = m.cost_sources;
  return j;
}

SimulationSummary summary_fields_from_json(const nlohmann::ordered_json& j,
                                           const JsonPlace& where) {
  SimulationSummary m;
  m.iteration_time_s = json_number(j, "iteration_time_s", where);
  m.tokens_per_s = json_number(j, "tokens_per_s", where);
  m.tokens_per_s_per_gpu = json_number(j, "tokens_per_s_per_gpu", where);
  m.model_tflops_per_gpu = json_number(j, "model_tflops_per_gpu", where);
  m.mfu = json_number(j, "mfu", where);
  m.hfu = json_number(j, "hfu", where);
  m.mfu_formula = json_string(j, "mfu_formula", where);
  m.pipeline_bubble_fraction = json_number(j, "pipeline_bubble_fraction", where);
  read_exposed_comm(j, where, m);
  m.sync_wait_s = json_number(j, "sync_wait_s", where);
  // (Documents written before offload was modelled have none: nothing was exposed.)
  if (j.contains("exposed_offload_s")) {
    m.exposed_offload_s = json_number(j, "exposed_offload_s", where);
  }
  m.compute_s = json_number(j, "compute_s", where);
  m.optimizer_s = json_number(j, "optimizer_s", where);
  m.peak_memory_bytes = json_number(j, "peak_memory_bytes", where);
  m.fits_in_memory = json_bool(j, "fits_in_memory", where);
  // (Documents written before the reserve was judged have neither: left unrecorded.)
  if (j.contains("memory_verdict")) {
    m.memory_verdict = json_string(j, "memory_verdict", where);
    m.memory_reserve_bytes = json_number(j, "memory_reserve_bytes", where);
  }
  const nlohmann::ordered_json& sources = json_object(j, "cost_sources", where);
  for (const auto& [source, share] : sources.items()) {
    m.cost_sources[source] = json_number(sources, source, where.key("cost_sources"));
  }
  return m;
}

void to_json(nlohmann::json& j, const SimulationSummary& m) {
  j = nlohmann::json(summary_fields_json(m));
}

void from_json(const nlohmann::json& j, SimulationSummary& m) {
  m = summary_fields_from_json(nlohmann::ordered_json(j), JsonPlace{"summary from a worker", ""});
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
  b.sync_wait_s = m.sync_wait_s;
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
  if (w.moe_load_imbalance) j["moe_load_imbalance"] = *w.moe_load_imbalance;
  return j;
}

WhatIf what_if_from_json(const nlohmann::ordered_json& j, const JsonPlace& where) {
  if (!j.is_object()) {
    throw Error(fmt::format("{}: '{}' is not an object", where.origin, where.shown()));
  }
  WhatIf w;
  if (j.contains("ib_bandwidth_scale")) {
    w.ib_bandwidth_scale = json_number(j, "ib_bandwidth_scale", where);
  }
  if (j.contains("nvlink_bandwidth_scale")) {
    w.nvlink_bandwidth_scale = json_number(j, "nvlink_bandwidth_scale", where);
  }
  if (j.contains("gpu_speed_scale")) w.gpu_speed_scale = json_number(j, "gpu_speed_scale", where);
  if (j.contains("straggler")) {
    const nlohmann::ordered_json& st = json_object(j, "straggler", where);
    w.straggler = Straggler{json_integer(st, "rank", where.key("straggler")),
                            json_number(st, "compute_scale", where.key("straggler"))};
  }
  if (j.contains("degraded_link")) {
    const nlohmann::ordered_json& d = json_object(j, "degraded_link", where);
    w.degraded_link = DegradedLink{json_string(d, "name", where.key("degraded_link")),
                                   json_number(d, "bandwidth_scale", where.key("degraded_link"))};
  }
  if (j.contains("moe_load_imbalance")) {
    w.moe_load_imbalance = json_number(j, "moe_load_imbalance", where);
  }
  return w;
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
  if (w.moe_load_imbalance) {
    parts.push_back(fmt::format("moe_load_imbalance {:g}", *w.moe_load_imbalance));
  }
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

double relative_change(double value, double base) { return base != 0 ? (value - base) / base : 0; }

}  // namespace traintwin
