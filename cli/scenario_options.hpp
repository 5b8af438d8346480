// Command-line options shared by every subcommand that reads a scenario: the file, `--set
// key=value` overrides and the Megatron-LM flags for the common keys.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/scenario.hpp"

namespace traintwin::cli {

/// Values of the scenario options of one subcommand.
struct ScenarioOptions {
  std::string file;
  std::vector<std::string> set;
  std::optional<int64_t> tensor_model_parallel_size, pipeline_model_parallel_size,
      context_parallel_size, micro_batch_size, global_batch_size,
      num_layers_per_virtual_pipeline_stage, virtual_pipeline_model_parallel_size, num_gpus;
  bool sequence_parallel = false;
  bool use_distributed_optimizer = false;
  std::optional<std::string> recompute_granularity;
  std::optional<std::string> cp_comm_type, fp8_format, fp8_recipe;
  bool fp8_param_gather = false;
  // Live training (training.*) and data (data.*), Megatron-LM's flags.
  std::optional<int64_t> train_iters, lr_warmup_iters, lr_decay_iters, seed, log_interval,
      eval_interval, eval_iters, save_interval;
  std::optional<double> lr, min_lr, weight_decay, clip_grad, adam_beta1, adam_beta2, adam_eps,
      hidden_dropout, attention_dropout, init_method_std;
  std::optional<std::string> lr_decay_style, data_path, split, vocab_file, merge_file;

  /// The overrides in effect: --set entries, then the Megatron flags as their dotted keys
  /// (numbers in their shortest round-trip spelling, strings as YAML scalars: quoted when plain
  /// YAML would read them differently). Throws ConfigError when one key is given twice with
  /// different values.
  std::vector<Override> overrides() const;

  /// Loads the scenario with the overrides applied.
  Scenario load() const;
};

/// Adds the positional SCENARIO argument and the override flags to `cmd`.
void add_scenario_options(CLI::App& cmd, ScenarioOptions& opts);

}  // namespace traintwin::cli
