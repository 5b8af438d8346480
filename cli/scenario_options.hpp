// Command-line options shared by every subcommand that reads a scenario: the file, `--set
// key=value` overrides and the Megatron-LM flags for the common keys.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/scenario.hpp"

namespace traintwin::cli {

/// Megatron-LM's four flags of the uneven pipeline split (core/pipeline_split.hpp), shared by
/// the subcommands that read a scenario and by `sweep` (which keeps them for every layout).
struct PipelineSplitFlags {
  std::optional<int64_t> decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers;
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;

  /// Adds --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers,
  /// --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split.
  void add_to(CLI::Option_group& group);
  /// Appends the flags given as their parallelism.* overrides.
  void append_overrides(std::vector<Override>& out) const;
};

/// Megatron-LM's mixture-of-experts model flags (--num-experts, --moe-*), as the model.*
/// keys of core/scenario.hpp; shared by the subcommands that read a scenario and by `sweep`.
struct MoeFlags {
  std::optional<int64_t> num_experts, moe_router_topk, moe_ffn_hidden_size,
      moe_shared_expert_intermediate_size;
  /// An integer f or a list "[1,0,1,0]" (YAML), as model.moe_layer_freq.
  std::optional<std::string> moe_layer_freq;
  std::optional<double> moe_expert_capacity_factor, moe_aux_loss_coeff;
  std::optional<std::string> moe_token_dispatcher_type, moe_router_load_balancing_type;
  bool moe_pad_expert_input_to_capacity = false;
  bool moe_grouped_gemm = false;

  /// Adds --num-experts, --moe-router-topk, --moe-ffn-hidden-size,
  /// --moe-shared-expert-intermediate-size, --moe-layer-freq, --moe-expert-capacity-factor,
  /// --moe-pad-expert-input-to-capacity, --moe-token-dispatcher-type,
  /// --moe-router-load-balancing-type, --moe-aux-loss-coeff and --moe-grouped-gemm.
  void add_to(CLI::Option_group& group);
  /// Appends the flags given as their model.* overrides.
  void append_overrides(std::vector<Override>& out) const;
};

/// Values of the scenario options of one subcommand.
struct ScenarioOptions {
  std::string file;
  std::vector<std::string> set;
  std::optional<int64_t> tensor_model_parallel_size, pipeline_model_parallel_size,
      context_parallel_size, micro_batch_size, global_batch_size,
      num_layers_per_virtual_pipeline_stage, virtual_pipeline_model_parallel_size, num_gpus;
  PipelineSplitFlags pipeline_split;
  std::optional<int64_t> expert_model_parallel_size, expert_tensor_parallel_size, kv_channels;
  MoeFlags moe;
  bool sequence_parallel = false;
  bool use_distributed_optimizer = false;
  std::optional<std::string> recompute_granularity;
  std::optional<std::string> cp_comm_type, fp8_format, fp8_recipe, float32_matmul_precision;
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

/// Throws ConfigError naming the key when `overrides` give one key two different values (a
/// --set and a Megatron flag, say).
void check_given_once(const std::vector<Override>& overrides);

/// Adds the positional SCENARIO argument and the override flags to `cmd`.
void add_scenario_options(CLI::App& cmd, ScenarioOptions& opts);

/// Adds the override flags only (--set and the Megatron-LM flags), for a subcommand that names
/// its scenario otherwise (validate --live SCENARIO).
void add_scenario_flags(CLI::App& cmd, ScenarioOptions& opts);

}  // namespace traintwin::cli
