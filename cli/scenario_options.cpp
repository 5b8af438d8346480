#include "cli/scenario_options.hpp"

#include <map>

#include "core/error.hpp"

namespace traintwin::cli {

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option("scenario", o.file, "Scenario file (scenarios/*.yaml)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--set", o.set, "Override any scenario key: --set parallelism.tensor_model_parallel_size=4")
      ->type_name("KEY=VALUE");
  auto* g = cmd.add_option_group("Megatron-LM flags", "Shorthands for --set of the common keys");
  g->add_option("--tensor-model-parallel-size", o.tensor_model_parallel_size, "TP size");
  g->add_option("--pipeline-model-parallel-size", o.pipeline_model_parallel_size, "PP size");
  g->add_option("--context-parallel-size", o.context_parallel_size, "CP size");
  g->add_option("--virtual-pipeline-model-parallel-size", o.virtual_pipeline_model_parallel_size,
                "Model chunks per pipeline rank (interleaved 1F1B when > 1)");
  g->add_option("--num-layers-per-virtual-pipeline-stage", o.num_layers_per_virtual_pipeline_stage,
                "Layers per virtual pipeline stage (interleaved 1F1B)");
  g->add_option("--micro-batch-size", o.micro_batch_size, "Samples per micro-batch");
  g->add_option("--global-batch-size", o.global_batch_size, "Samples per iteration");
  g->add_option("--num-gpus", o.num_gpus, "Cluster size (cluster.num_gpus)");
  g->add_flag("--sequence-parallel", o.sequence_parallel, "Enable sequence parallelism");
  g->add_flag("--use-distributed-optimizer", o.use_distributed_optimizer,
              "Shard optimizer state over data-parallel ranks (ZeRO-1)");
  g->add_option("--recompute-granularity", o.recompute_granularity, "Activation recomputation")
      ->check(CLI::IsMember({"none", "selective", "full"}));
}

std::vector<Override> ScenarioOptions::overrides() const {
  std::vector<Override> out;
  for (const auto& s : set) out.push_back(parse_override(s));
  auto flag = [&](const char* key, const auto& value) {
    if (value) out.push_back({key, std::to_string(*value)});
  };
  flag("parallelism.tensor_model_parallel_size", tensor_model_parallel_size);
  flag("parallelism.pipeline_model_parallel_size", pipeline_model_parallel_size);
  flag("parallelism.context_parallel_size", context_parallel_size);
  flag("parallelism.virtual_pipeline_model_parallel_size", virtual_pipeline_model_parallel_size);
  flag("parallelism.num_layers_per_virtual_pipeline_stage", num_layers_per_virtual_pipeline_stage);
  flag("training.micro_batch_size", micro_batch_size);
  flag("training.global_batch_size", global_batch_size);
  flag("cluster.num_gpus", num_gpus);
  if (sequence_parallel) out.push_back({"parallelism.sequence_parallel", "true"});
  if (use_distributed_optimizer) out.push_back({"training.use_distributed_optimizer", "true"});
  if (recompute_granularity) out.push_back({"training.recompute_granularity", *recompute_granularity});
  std::map<std::string, std::string> seen;
  for (const auto& ov : out) {
    auto [it, inserted] = seen.emplace(ov.key, ov.value);
    if (!inserted && it->second != ov.value) {
      throw ConfigError("command line: " + ov.key + " is given twice with different values ('" +
                        it->second + "' and '" + ov.value + "')");
    }
  }
  return out;
}

Scenario ScenarioOptions::load() const { return load_scenario(file, overrides()); }

}  // namespace traintwin::cli
