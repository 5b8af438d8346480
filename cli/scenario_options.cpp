#include "cli/scenario_options.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <map>

#include "core/error.hpp"

namespace traintwin::cli {

void PipelineSplitFlags::add_to(CLI::Option_group& g) {
  g.add_option("--decoder-first-pipeline-num-layers", decoder_first_pipeline_num_layers,
               "Transformer layers of the first pipeline stage (uneven split)");
  g.add_option("--decoder-last-pipeline-num-layers", decoder_last_pipeline_num_layers,
               "Transformer layers of the last pipeline stage (uneven split)");
  g.add_flag("--account-for-embedding-in-pipeline-split", account_for_embedding_in_pipeline_split,
             "Count the embedding as one layer in the pipeline split");
  g.add_flag("--account-for-loss-in-pipeline-split", account_for_loss_in_pipeline_split,
             "Count the LM head and loss as one layer in the pipeline split");
}

void PipelineSplitFlags::append_overrides(std::vector<Override>& out) const {
  for (const auto& [key, value] :
       {std::pair{"parallelism.decoder_first_pipeline_num_layers", decoder_first_pipeline_num_layers},
        std::pair{"parallelism.decoder_last_pipeline_num_layers", decoder_last_pipeline_num_layers}}) {
    if (value) out.push_back({key, std::to_string(*value)});
  }
  if (account_for_embedding_in_pipeline_split) {
    out.push_back({"parallelism.account_for_embedding_in_pipeline_split", "true"});
  }
  if (account_for_loss_in_pipeline_split) {
    out.push_back({"parallelism.account_for_loss_in_pipeline_split", "true"});
  }
}

void MoeFlags::add_to(CLI::Option_group& g) {
  g.add_option("--num-experts", num_experts, "Routed experts per MoE layer (model.num_moe_experts)");
  g.add_option("--moe-router-topk", moe_router_topk, "Experts each token is routed to (top-k)");
  g.add_option("--moe-ffn-hidden-size", moe_ffn_hidden_size, "Width of one routed expert");
  g.add_option("--moe-shared-expert-intermediate-size", moe_shared_expert_intermediate_size,
               "Width of the shared expert (0 = none)");
  g.add_option("--moe-layer-freq", moe_layer_freq,
               "Every f-th layer is MoE (integer), or a 0/1 list per layer, e.g. [1,0,1,0]");
  g.add_option("--moe-expert-capacity-factor", moe_expert_capacity_factor,
               "Expert capacity factor (tokens beyond it are dropped); not given = dropless");
  g.add_flag("--moe-pad-expert-input-to-capacity", moe_pad_expert_input_to_capacity,
             "Pad every expert's input to its capacity");
  g.add_option("--moe-token-dispatcher-type", moe_token_dispatcher_type, "Token dispatcher")
      ->check(CLI::IsMember({"alltoall", "allgather"}));
  g.add_option("--moe-router-load-balancing-type", moe_router_load_balancing_type,
               "Load balancing of the router")
      ->check(CLI::IsMember({"aux_loss", "none"}));
  g.add_option("--moe-aux-loss-coeff", moe_aux_loss_coeff, "Weight of the auxiliary loss");
  g.add_flag("--moe-grouped-gemm", moe_grouped_gemm, "Run the local experts as grouped GEMMs");
}

void MoeFlags::append_overrides(std::vector<Override>& out) const {
  for (const auto& [key, value] :
       {std::pair{"model.num_moe_experts", num_experts},
        std::pair{"model.moe_router_topk", moe_router_topk},
        std::pair{"model.moe_ffn_hidden_size", moe_ffn_hidden_size},
        std::pair{"model.moe_shared_expert_intermediate_size",
                  moe_shared_expert_intermediate_size}}) {
    if (value) out.push_back({key, std::to_string(*value)});
  }
  if (moe_layer_freq) out.push_back({"model.moe_layer_freq", *moe_layer_freq});
  // Doubles in their shortest round-trip form (see ScenarioOptions::overrides()).
  if (moe_expert_capacity_factor) {
    out.push_back({"model.moe_expert_capacity_factor",
                   fmt::format("{}", *moe_expert_capacity_factor)});
  }
  if (moe_aux_loss_coeff) {
    out.push_back({"model.moe_aux_loss_coeff", fmt::format("{}", *moe_aux_loss_coeff)});
  }
  if (moe_token_dispatcher_type) {
    out.push_back({"model.moe_token_dispatcher_type", *moe_token_dispatcher_type});
  }
  if (moe_router_load_balancing_type) {
    out.push_back({"model.moe_router_load_balancing_type", *moe_router_load_balancing_type});
  }
  if (moe_pad_expert_input_to_capacity) {
    out.push_back({"model.moe_pad_expert_input_to_capacity", "true"});
  }
  if (moe_grouped_gemm) out.push_back({"model.moe_grouped_gemm", "true"});
}

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option("scenario", o.file, "Scenario file (scenarios/*.yaml)")->required();
  add_scenario_flags(cmd, o);
}

void add_scenario_flags(CLI::App& cmd, ScenarioOptions& o) {
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
  o.pipeline_split.add_to(*g);
  g->add_option("--expert-model-parallel-size", o.expert_model_parallel_size,
                "EP size: ranks the routed experts are split over");
  g->add_option("--expert-tensor-parallel-size", o.expert_tensor_parallel_size,
                "ETP size: tensor parallelism inside each expert (default: TP)");
  g->add_option("--kv-channels", o.kv_channels,
                "Channels per attention head (default: hidden size / heads)");
  o.moe.add_to(*g);
  g->add_option("--micro-batch-size", o.micro_batch_size, "Samples per micro-batch");
  g->add_option("--global-batch-size", o.global_batch_size, "Samples per iteration");
  g->add_option("--num-gpus", o.num_gpus, "Cluster size (cluster.num_gpus)");
  g->add_flag("--sequence-parallel", o.sequence_parallel, "Enable sequence parallelism");
  g->add_flag("--use-distributed-optimizer", o.use_distributed_optimizer,
              "Shard optimizer state over data-parallel ranks (ZeRO-1)");
  g->add_option("--recompute-granularity", o.recompute_granularity, "Activation recomputation")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  g->add_option("--cp-comm-type", o.cp_comm_type, "Context-parallel attention exchange")
      ->check(CLI::IsMember({"p2p", "a2a", "all_gather"}));
  g->add_option("--float32-matmul-precision", o.float32_matmul_precision,
                "Arithmetic of fp32 matrix products (PyTorch torch.set_float32_matmul_precision): "
                "highest fp32, high TF32, medium bf16 tensor cores")
      ->check(CLI::IsMember({"highest", "high", "medium"}));
  g->add_option("--fp8-format", o.fp8_format, "FP8 GEMMs: hybrid (E4M3 fwd, E5M2 grads) or e4m3")
      ->check(CLI::IsMember({"hybrid", "e4m3"}));
  g->add_option("--fp8-recipe", o.fp8_recipe, "FP8 scaling recipe")
      ->check(CLI::IsMember({"delayed", "tensorwise", "blockwise", "mxfp8"}));
  g->add_flag("--fp8-param-gather", o.fp8_param_gather,
              "Keep the GEMM weights in FP8 and all-gather them in FP8");

  auto* t = cmd.add_option_group("Megatron-LM training flags",
                                 "Shorthands for --set of the training.* and data.* keys");
  t->add_option("--train-iters", o.train_iters, "Iterations to train (training.train_iters)");
  t->add_option("--lr", o.lr, "Peak learning rate (training.lr)");
  t->add_option("--min-lr", o.min_lr, "Learning-rate floor of the decay (training.min_lr)");
  t->add_option("--lr-decay-style", o.lr_decay_style, "Learning-rate decay after warm-up")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}));
  t->add_option("--lr-warmup-iters", o.lr_warmup_iters, "Linear warm-up iterations");
  t->add_option("--lr-decay-iters", o.lr_decay_iters, "Decay iterations (default: train iters)");
  t->add_option("--weight-decay", o.weight_decay, "AdamW weight decay");
  t->add_option("--clip-grad", o.clip_grad, "Largest global gradient norm (0 = no clipping)");
  t->add_option("--adam-beta1", o.adam_beta1, "Adam beta1");
  t->add_option("--adam-beta2", o.adam_beta2, "Adam beta2");
  t->add_option("--adam-eps", o.adam_eps, "Adam epsilon");
  t->add_option("--hidden-dropout", o.hidden_dropout, "Dropout probability after projections");
  t->add_option("--attention-dropout", o.attention_dropout, "Dropout probability of attention");
  t->add_option("--init-method-std", o.init_method_std, "Std of the normal weight init");
  t->add_option("--seed", o.seed, "Random seed");
  t->add_option("--log-interval", o.log_interval, "Iterations between log lines");
  t->add_option("--eval-interval", o.eval_interval, "Iterations between evaluations");
  t->add_option("--eval-iters", o.eval_iters, "Iterations per evaluation");
  t->add_option("--save-interval", o.save_interval, "Iterations between checkpoints");
  t->add_option("--data-path", o.data_path,
                "Prefix of the .bin/.idx dataset (data.data_path; relative to this directory)");
  t->add_option("--split", o.split, "Train,validation,test weights, e.g. 969,30,1");
  t->add_option("--vocab-file", o.vocab_file, "Tokenizer vocabulary (encoder.json)");
  t->add_option("--merge-file", o.merge_file, "BPE merges (vocab.bpe)");
}

namespace {

/// `text` as a YAML scalar that reads back as `text`: as is when plain YAML reads it so (e.g.
/// 969,30,1 or data/doc), else double-quoted with backslash escapes (e.g. "null", "a: b").
std::string yaml_scalar(const std::string& text) {
  try {
    const YAML::Node node = YAML::Load(text);
    if (!text.empty() && node.IsScalar() && node.Scalar() == text) return text;
  } catch (const YAML::Exception&) {
    // not plain YAML: quote it
  }
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

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
  pipeline_split.append_overrides(out);
  flag("parallelism.expert_model_parallel_size", expert_model_parallel_size);
  flag("parallelism.expert_tensor_parallel_size", expert_tensor_parallel_size);
  flag("model.kv_channels", kv_channels);
  moe.append_overrides(out);
  flag("training.micro_batch_size", micro_batch_size);
  flag("training.global_batch_size", global_batch_size);
  flag("cluster.num_gpus", num_gpus);
  if (sequence_parallel) out.push_back({"parallelism.sequence_parallel", "true"});
  if (use_distributed_optimizer) out.push_back({"training.use_distributed_optimizer", "true"});
  if (recompute_granularity) out.push_back({"training.recompute_granularity", *recompute_granularity});
  if (cp_comm_type) out.push_back({"parallelism.cp_comm_type", *cp_comm_type});
  if (float32_matmul_precision) {
    out.push_back({"training.float32_matmul_precision", *float32_matmul_precision});
  }
  if (fp8_format) out.push_back({"training.fp8_format", *fp8_format});
  if (fp8_recipe) out.push_back({"training.fp8_recipe", *fp8_recipe});
  if (fp8_param_gather) out.push_back({"training.fp8_param_gather", "true"});
  flag("training.train_iters", train_iters);
  flag("training.lr_warmup_iters", lr_warmup_iters);
  flag("training.lr_decay_iters", lr_decay_iters);
  flag("training.seed", seed);
  flag("training.log_interval", log_interval);
  flag("training.eval_interval", eval_interval);
  flag("training.eval_iters", eval_iters);
  flag("training.save_interval", save_interval);
  // Doubles in their shortest round-trip form ("0.0006", "1e-08"), which the reader parses back
  // to the same value (std::to_string would print 6 decimals).
  auto real = [&](const char* key, const std::optional<double>& value) {
    if (value) out.push_back({key, fmt::format("{}", *value)});
  };
  real("training.lr", lr);
  real("training.min_lr", min_lr);
  real("training.weight_decay", weight_decay);
  real("training.clip_grad", clip_grad);
  real("training.adam_beta1", adam_beta1);
  real("training.adam_beta2", adam_beta2);
  real("training.adam_eps", adam_eps);
  real("training.hidden_dropout", hidden_dropout);
  real("training.attention_dropout", attention_dropout);
  real("training.init_method_std", init_method_std);
  auto text = [&](const char* key, const std::optional<std::string>& value) {
    if (value) out.push_back({key, yaml_scalar(*value)});
  };
  text("training.lr_decay_style", lr_decay_style);
  text("data.data_path", data_path);
  text("data.split", split);
  text("data.vocab_file", vocab_file);
  text("data.merge_file", merge_file);
  check_given_once(out);
  return out;
}

void check_given_once(const std::vector<Override>& overrides) {
  std::map<std::string, std::string> seen;
  for (const auto& ov : overrides) {
    auto [it, inserted] = seen.emplace(ov.key, ov.value);
    if (!inserted && it->second != ov.value) {
      throw ConfigError("command line: " + ov.key + " is given twice with different values ('" +
                        it->second + "' and '" + ov.value + "')");
    }
  }
}

Scenario ScenarioOptions::load() const { return load_scenario(file, overrides()); }

}  // namespace traintwin::cli
