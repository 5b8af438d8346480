#include "sim/summary.hpp"

#include <algorithm>

#include "core/flops.hpp"
#include "core/memory.hpp"

namespace traintwin {

SimulationSummary summarize(const Scenario& s, const TopologySpec& topo, const SimulationResult& r) {
  SimulationSummary out;
  const double t = r.iteration_time_s;
  const double gpus = static_cast<double>(s.cluster.num_gpus);
  const double tokens = static_cast<double>(s.training.global_batch_size * s.model.seq_length);
  const double peak = topo.gpu.peak_FLOPs(s.training.precision);
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
  out.exposed_pp_s = r.critical.exposed_pp_s;
  out.exposed_dp_s = r.critical.exposed_dp_s;
  out.compute_s = r.critical.compute_s;
  out.optimizer_s = r.critical.optimizer_s;
  for (const StageMemory& m : memory_per_stage(s)) {
    out.peak_memory_bytes = std::max(out.peak_memory_bytes, m.total_bytes());
  }
  out.fits_in_memory = out.peak_memory_bytes <= topo.gpu.memory_bytes;
  double total = 0;
  for (const auto& [src, sec] : r.compute_s_by_source) total += sec;
  for (CostSource src : {CostSource::kMeasured, CostSource::kScaled, CostSource::kRoofline}) {
    auto it = r.compute_s_by_source.find(src);
    out.cost_sources[to_string(src)] = total > 0 && it != r.compute_s_by_source.end() ? it->second / total : 0.0;
  }
  return out;
}

namespace {

nlohmann::ordered_json breakdown_json(const TimeBreakdown& b) {
  return {{"rank", b.rank},           {"compute_s", b.compute_s},       {"optimizer_s", b.optimizer_s},
          {"exposed_tp_s", b.exposed_tp_s}, {"exposed_pp_s", b.exposed_pp_s},
          {"exposed_dp_s", b.exposed_dp_s}, {"bubble_s", b.bubble_s}};
}

}  // namespace

nlohmann::ordered_json summary_json(const Scenario& s, const TopologySpec& topo,
                                    const SimulationResult& r, bool include_wall_time) {
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
                 {"recompute_granularity", to_string(s.training.recompute_granularity)}};
  j["iteration_time_s"] = m.iteration_time_s;
  j["tokens_per_s"] = m.tokens_per_s;
  j["tokens_per_s_per_gpu"] = m.tokens_per_s_per_gpu;
  j["model_tflops_per_gpu"] = m.model_tflops_per_gpu;
  j["mfu"] = m.mfu;
  j["hfu"] = m.hfu;
  j["mfu_formula"] =
      "MFU = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) / (iteration_time x GPUs x dense peak) "
      "(Korthikanti et al. 2022 model FLOPs; HFU adds recomputed work, Narayanan et al. SC'21 eq. 3 "
      "for full recomputation)";
  j["pipeline_bubble_fraction"] = m.pipeline_bubble_fraction;
  j["exposed_comm_s"] = {{"tp", m.exposed_tp_s}, {"pp", m.exposed_pp_s}, {"dp", m.exposed_dp_s}};
  j["compute_s"] = m.compute_s;
  j["optimizer_s"] = m.optimizer_s;
  j["peak_memory_bytes"] = m.peak_memory_bytes;
  j["fits_in_memory"] = m.fits_in_memory;
  j["gpu_memory_bytes"] = topo.gpu.memory_bytes;
  nlohmann::ordered_json mem = nlohmann::ordered_json::array();
  for (const StageMemory& st : memory_per_stage(s)) {
    mem.push_back({{"pp_rank", st.pp_rank},
                   {"layers", st.layers},
                   {"parameters", st.parameters},
                   {"in_flight", st.in_flight},
                   {"weights_bytes", st.weights_bytes},
                   {"gradients_bytes", st.gradients_bytes},
                   {"optimizer_bytes", st.optimizer_bytes},
                   {"activations_bytes", st.activations_bytes},
                   {"embedding_and_logits_bytes", st.embedding_and_logits_bytes},
                   {"total_bytes", st.total_bytes()}});
  }
  j["memory_per_stage"] = mem;
  j["cost_sources"] = m.cost_sources;
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const LinkLoad& l : r.busiest_links) {
    links.push_back({{"name", l.name}, {"tier", l.tier}, {"bytes", l.bytes}, {"utilization", l.utilization}});
  }
  j["busiest_links"] = links;
  j["critical_rank"] = breakdown_json(r.critical);
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const TimeBreakdown& b : r.per_stage) stages.push_back(breakdown_json(b));
  j["per_stage"] = stages;
  j["collective_algorithms"] = r.collective_algorithms;
  if (include_wall_time) j["sim_wall_s"] = r.sim_wall_s;
  j["replayed_ranks"] = r.replayed_ranks;
  j["events"] = r.events;
  j["ops"] = r.ops;
  j["flows"] = r.flows;
  return j;
}

}  // namespace traintwin
