// A scaling study read from a sweep's records (see scaling_study.hpp).
#include "sim/scaling_study.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

#include "core/error.hpp"

namespace traintwin {

std::vector<ScalingPoint> best_per_gpu_count(const std::vector<SweepRecord>& records) {
  std::map<int64_t, size_t> best;  // num_gpus -> record
  for (size_t i = 0; i < records.size(); ++i) {
    const SweepRecord& r = records[i];
    if (r.status != SweepStatus::kRanked) continue;
    auto [it, fresh] = best.try_emplace(r.configuration.num_gpus, i);
    if (!fresh && r.rank < records[it->second].rank) it->second = i;
  }
  std::vector<ScalingPoint> out;
  for (const auto& [gpus, i] : best) out.push_back({gpus, i});
  return out;
}

bool is_scaling_study(const std::vector<SweepRecord>& records) {
  std::set<int64_t> counts;
  for (const SweepRecord& r : records) {
    if (r.status == SweepStatus::kRanked) counts.insert(r.configuration.num_gpus);
  }
  return counts.size() >= 2;
}

std::string scaling_layout_label(const SweepRecordConfiguration& c) {
  const std::string experts = c.expert_model_parallel_size > 1 ||
                                      c.expert_tensor_parallel_size != c.tensor_model_parallel_size
                                  ? fmt::format(" EP {} ETP {}", c.expert_model_parallel_size,
                                                c.expert_tensor_parallel_size)
                                  : "";
  std::string label = fmt::format(
      "TP {} CP {} PP {} VPP {}{} mbs {} recompute {} SP {} dist-opt {} fp8 {}",
      c.tensor_model_parallel_size, c.context_parallel_size, c.pipeline_model_parallel_size,
      c.virtual_pipeline_model_parallel_size, experts, c.micro_batch_size,
      to_string(c.recompute_granularity), c.sequence_parallel ? "on" : "off",
      c.use_distributed_optimizer ? "on" : "off", c.fp8_format == "none" ? "off" : c.fp8_format);
  if (c.pipeline_schedule != PipelineScheduleKind::k1F1B) {
    label += fmt::format(" schedule {}", to_string(c.pipeline_schedule));
  }
  return label;
}

TrainingTime training_time(double tokens, double tokens_per_s, int64_t num_gpus) {
  if (!(tokens > 0) || !(tokens_per_s > 0) || num_gpus < 1) {
    throw InvalidArgument(
        fmt::format("training_time: needs tokens > 0, tokens/s > 0 and GPUs >= 1, got {}, {}, {}",
                    tokens, tokens_per_s, num_gpus));
  }
  const double days = tokens / tokens_per_s / 86400.0;
  return {days, days * 24.0 * static_cast<double>(num_gpus)};
}

}  // namespace traintwin
