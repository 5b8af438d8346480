// The cross-key rules of a scenario; see core/scenario_rules.hpp.
#include "core/scenario_rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "core/error.hpp"
#include "core/pipeline_split.hpp"
#include "core/rank_layout.hpp"
#include "core/scenario_schema.hpp"
#include "core/schedule.hpp"

namespace traintwin::scenario_rules {

using namespace scenario_schema;

// ----- cross-key rules ------------------------------------------------------------------------

[[noreturn]] void rule_error(const Locator& where, std::string_view key,
                             const std::string& problem) {
  throw ConfigError(fmt::format("{}: {}: {}", where(key), key, problem));
}

std::string RuleBreach::message() const { return key + ": " + problem; }

namespace {

/// The first broken rule of a check, or nullopt when it passes.
using Breach = std::optional<RuleBreach>;

/// A broken rule as a value.
Breach broken(std::string_view key, std::string problem) {
  return RuleBreach{std::string(key), std::move(problem)};
}

Breach check_positive(std::string_view key, int64_t value) {
  if (value < 1) return broken(key, fmt::format("must be >= 1, got {}", value));
  return std::nullopt;
}

/// `value` <= `max` (the upper bounds of core/scenario_rules.hpp).
Breach check_at_most(std::string_view key, int64_t value, int64_t max, std::string_view what) {
  if (value > max) {
    return broken(key, fmt::format("must be at most {} ({}), got {} (rule: sizes have sane upper "
                                   "bounds, far above any model or cluster trained, so that the "
                                   "counts derived from them stay exact)",
                                   max, what, value));
  }
  return std::nullopt;
}

/// The upper bounds of the sizes, then the parameters of the whole model (in long double: the
/// count itself may pass int64's range), named by the key of its largest part.
Breach size_bound_breach(const Scenario& s) {
  const ModelSpec& m = s.model;
  const ParallelConfig& p = s.parallel;
  const TrainingConfig& t = s.training;
  struct Bound {
    std::string_view key;
    int64_t value;
    int64_t max;
    std::string_view what;
  };
  const std::string_view width = "a width, 2^20";
  const std::string_view count = "2^16";
  const std::string_view parallel = "a parallel size, 2^24";
  const Bound bounds[] = {
      {"model.num_layers", m.num_layers, kMaxModelCount, count},
      {"model.hidden_size", m.hidden_size, kMaxModelWidth, width},
      {"model.num_attention_heads", m.num_attention_heads, kMaxModelCount, count},
      {"model.num_query_groups", m.num_query_groups, kMaxModelCount, count},
      {"model.kv_channels", m.kv_channels, kMaxModelWidth, width},
      {"model.ffn_hidden_size", m.ffn_hidden_size, kMaxModelWidth, width},
      {"model.seq_length", m.seq_length, kMaxTokens, "tokens, 2^24"},
      {"model.vocab_size", m.vocab_size, kMaxTokens, "tokens, 2^24"},
      {"model.num_moe_experts", m.num_moe_experts, kMaxModelCount, count},
      {"model.moe_ffn_hidden_size", m.moe_ffn_hidden_size, kMaxModelWidth, width},
      {"model.moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size,
       kMaxModelWidth, width},
      {"parallelism.tensor_model_parallel_size", p.tensor_model_parallel_size, kMaxParallelSize,
       parallel},
      {"parallelism.context_parallel_size", p.context_parallel_size, kMaxParallelSize, parallel},
      {"parallelism.pipeline_model_parallel_size", p.pipeline_model_parallel_size,
       kMaxParallelSize, parallel},
      {"parallelism.virtual_pipeline_model_parallel_size",
       p.virtual_pipeline_model_parallel_size, kMaxParallelSize, parallel},
      {"parallelism.data_parallel_size", p.data_parallel_size, kMaxParallelSize, parallel},
      {"parallelism.expert_model_parallel_size", p.expert_model_parallel_size, kMaxParallelSize,
       parallel},
      {"parallelism.expert_tensor_parallel_size", p.expert_tensor_parallel_size.value_or(1),
       kMaxParallelSize, parallel},
      {"training.num_distributed_optimizer_instances", t.num_distributed_optimizer_instances,
       kMaxParallelSize, parallel},
      {"cluster.num_gpus", s.cluster.num_gpus, kMaxParallelSize, "GPUs, 2^24"},
      {"training.global_batch_size", t.global_batch_size, kMaxGlobalBatch, "samples, 2^32"},
  };
  for (const Bound& b : bounds) {
    if (Breach x = check_at_most(b.key, b.value, b.max, b.what)) return x;
  }
  if (mul(t.micro_batch_size, m.seq_length) > kMaxMicroBatchTokens) {
    return broken("training.micro_batch_size",
                  fmt::format("{} x model.seq_length = {} x {} tokens per micro-batch, more than "
                              "2^26 = {} (rule: micro_batch_size x seq_length <= 2^26)",
                              t.micro_batch_size, t.micro_batch_size, m.seq_length,
                              kMaxMicroBatchTokens));
  }
  // Parameters, every layer as an MoE layer when the model has experts (an upper bound).
  using F = long double;
  const F h = static_cast<F>(m.hidden_size);
  const auto mlp = [&](int64_t ffn) {
    return h * (static_cast<F>(m.fc1_width_of(ffn)) + static_cast<F>(ffn));
  };
  const F attention = h * (static_cast<F>(m.qkv_width()) + static_cast<F>(m.attention_width()));
  const F experts = m.is_moe() ? static_cast<F>(m.num_moe_experts) * mlp(m.moe_expert_ffn()) +
                                     mlp(m.moe_shared_expert_intermediate_size)
                               : mlp(m.ffn_hidden_size);
  const F layers = static_cast<F>(m.num_layers);
  const F embeddings = 2 * static_cast<F>(m.vocab_size) * h;
  const F total = layers * (attention + experts) + embeddings;
  if (total > static_cast<F>(kMaxParameters)) {
    std::string_view key = "model.num_layers";
    if (embeddings >= layers * (attention + experts)) key = "model.vocab_size";
    else if (m.is_moe() && experts >= attention) key = "model.num_moe_experts";
    else if (experts >= attention) key = "model.ffn_hidden_size";
    else key = "model.hidden_size";
    return broken(key, fmt::format("the model would hold about {:.3g} parameters, more than "
                                   "{:.0e} (rule: at most 1e15 parameters, each layer counted as "
                                   "an MoE layer when the model has experts; the largest models "
                                   "trained hold ~2e12)",
                                   static_cast<double>(total), kMaxParameters));
  }
  return std::nullopt;
}

/// A what-if factor in the schema's kScale (why those bounds: core/scenario_schema.hpp).
Breach check_scale(const std::string& key, const std::optional<double>& value) {
  if (value && !kScale.contains(*value)) {
    return broken(key,
                  fmt::format("must be a number {} (a factor: 1.0 = as the topology file says), "
                              "got {}",
                              kScale.text(), *value));
  }
  return std::nullopt;
}

/// The what-if knobs: positive finite factors, a straggler among the cluster's ranks, a named
/// degraded link (whether the name exists is checked when the platform is built).
Breach what_if_breach(const Scenario& s) {
  const WhatIf& w = s.cluster.what_if;
  const std::string prefix(kWhatIf);
  if (Breach b = check_scale(prefix + ".ib_bandwidth_scale", w.ib_bandwidth_scale)) return b;
  if (Breach b = check_scale(prefix + ".nvlink_bandwidth_scale", w.nvlink_bandwidth_scale))
    return b;
  if (Breach b = check_scale(prefix + ".gpu_speed_scale", w.gpu_speed_scale)) return b;
  if (w.straggler) {
    const std::string key(kStraggler);
    if (Breach b = check_scale(key + ".compute_scale", w.straggler->compute_scale)) return b;
    const int64_t rank = w.straggler->rank;
    if (rank < 0 || rank >= s.cluster.num_gpus) {
      return broken(key + ".rank",
                    fmt::format("{} is outside [0, cluster.num_gpus = {}) (rule: the straggler is "
                                "one of the cluster's global ranks)",
                                rank, s.cluster.num_gpus));
    }
  }
  if (w.degraded_link) {
    const std::string key(kDegradedLink);
    if (Breach b = check_scale(key + ".bandwidth_scale", w.degraded_link->bandwidth_scale))
      return b;
    if (w.degraded_link->name.empty()) {
      return broken(key + ".name",
                    "must name a platform link, e.g. node0-nic0-up or rail0-leaf0-spine0-c0-up");
    }
  }
  return std::nullopt;
}

/// The live-training keys: each in its range, min_lr <= lr, and the warm-up shorter than the
/// decay (Megatron-LM's OptimizerParamScheduler asserts lr_warmup_steps < lr_decay_steps,
/// megatron/core/optimizer_param_scheduler.py).
Breach live_training_breach(const Scenario& s) {
  const TrainingConfig& t = s.training;
  // Each key in its range (the schema's minimum or interval), whoever built the scenario.
  for (const KeySpec& k : scenario_keys()) {
    if (k.section != "training" || !k.executor_only) continue;
    if (const auto* ref = std::get_if<FieldRef<std::optional<int64_t>>>(&k.bind)) {
      const std::optional<int64_t>& v = get(*ref, s);
      if (v && *v < k.min) return broken(k.path(), fmt::format("must be >= {}, got {}", k.min, *v));
    } else if (const auto* iref = std::get_if<FieldRef<int64_t>>(&k.bind)) {
      const int64_t v = get(*iref, s);
      if (v < k.min) return broken(k.path(), fmt::format("must be >= {}, got {}", k.min, v));
    } else if (const auto* oref = std::get_if<FieldRef<std::optional<double>>>(&k.bind)) {
      const std::optional<double>& v = get(*oref, s);
      if (v && !k.range.contains(*v)) {
        return broken(k.path(), fmt::format("must be a finite number {} ({}), got {}",
                                            k.range.text(), k.note, *v));
      }
    } else if (const auto* dref = std::get_if<FieldRef<double>>(&k.bind)) {
      const double v = get(*dref, s);
      if (!k.range.contains(v)) {
        return broken(k.path(), fmt::format("must be a finite number {} ({}), got {}",
                                            k.range.text(), k.note, v));
      }
    }
  }
  if (t.lr && t.min_lr > *t.lr) {
    return broken("training.min_lr",
                  fmt::format("{} is larger than training.lr = {} (rule: 0 <= min_lr <= lr; the "
                              "learning rate decays from lr to min_lr)",
                              t.min_lr, *t.lr));
  }
  const std::optional<int64_t> decay_iters = t.lr_decay_iters ? t.lr_decay_iters : t.train_iters;
  if (decay_iters && t.lr_warmup_iters >= *decay_iters) {
    return broken(
        "training.lr_warmup_iters",
        fmt::format("{} is not smaller than training.lr_decay_iters = {} (train_iters when "
                    "not given) (rule: lr_warmup_iters < lr_decay_iters, as Megatron-LM's "
                    "OptimizerParamScheduler asserts)",
                    t.lr_warmup_iters, *decay_iters));
  }
  return std::nullopt;
}

/// The data section: a well-formed split (the paths need not exist yet).
/// CPU offload (training.optimizer_cpu_offload, training.cpu_offloading), as Megatron-LM
/// asserts it (megatron/training/arguments.py; TransformerConfig.__post_init__). That the
/// topology has a host link is checked against the topology (check_gpu_supports).
Breach offload_breach(const Scenario& s) {
  const TrainingConfig& t = s.training;
  static const Interval& fraction = key("training.optimizer_offload_fraction").range;
  if (!fraction.contains(t.optimizer_offload_fraction)) {
    return broken("training.optimizer_offload_fraction",
                  fmt::format("must be a finite number {} (the share of the optimizer state "
                              "offloaded), got {}",
                              fraction.text(), t.optimizer_offload_fraction));
  }
  if (!t.optimizer_cpu_offload && t.optimizer_offload_fraction != 1.0) {
    return broken("training.optimizer_offload_fraction",
                  fmt::format("{} needs training.optimizer_cpu_offload: true (rule: the "
                              "fraction says how much of the optimizer state it offloads)",
                              t.optimizer_offload_fraction));
  }
  if (t.optimizer_cpu_offload) {
    const std::string_view key = "training.optimizer_cpu_offload";
    if (!t.use_distributed_optimizer) {
      return broken(key, "true needs training.use_distributed_optimizer: true (rule: Megatron-LM "
                         "asserts --use-precision-aware-optimizer, whose code path the hybrid "
                         "device optimizer reuses, and that needs the distributed optimizer)");
    }
    if (t.use_megatron_fsdp) {
      return broken(key, "true with training.use_megatron_fsdp is not supported (rule: "
                         "Megatron-Core's fully sharded optimizer refuses optimizer CPU "
                         "offload; allowed: the distributed optimizer without Megatron-FSDP)");
    }
    if (t.fp8_param_gather && t.fp8_recipe != Fp8Recipe::kDelayed) {
      return broken(key, fmt::format("true with training.fp8_param_gather needs "
                                     "training.fp8_recipe: delayed, got {} (rule: as Megatron-LM)",
                                     to_string(t.fp8_recipe)));
    }
  }
  if (!t.cpu_offloading && t.cpu_offloading_num_layers != 0) {
    return broken("training.cpu_offloading_num_layers",
                  fmt::format("{} needs training.cpu_offloading: true (Megatron-LM turns it on "
                              "for you; here it is said, never implied)",
                              t.cpu_offloading_num_layers));
  }
  if (t.cpu_offloading) {
    const std::string_view key = "training.cpu_offloading";
    const int64_t layers = s.model.num_layers;
    if (t.cpu_offloading_num_layers >= layers) {
      return broken("training.cpu_offloading_num_layers",
                    fmt::format("{} must be below model.num_layers = {} (allowed: 0 to {}; rule: "
                                "Megatron-Core keeps at least one layer's activations on the "
                                "GPU)",
                                t.cpu_offloading_num_layers, layers, layers - 1));
    }
    if (s.parallel.pipeline_model_parallel_size > 1) {
      return broken(key, fmt::format("true needs parallelism.pipeline_model_parallel_size: 1, "
                                     "got {} (rule: Megatron-Core has no pipeline parallelism "
                                     "with CPU offloading)",
                                     s.parallel.pipeline_model_parallel_size));
    }
    if (t.recompute_granularity != RecomputeGranularity::kNone) {
      return broken(key, fmt::format("true needs training.recompute_granularity: none, got {} "
                                     "(rule: Megatron-Core's CPU offloading does not work with "
                                     "activation recomputation)",
                                     to_string(t.recompute_granularity)));
    }
  }
  return std::nullopt;
}

Breach data_breach(const DataConfig& d) {
  try {
    split_fractions(d.split);
  } catch (const InvalidArgument& e) {
    return broken("data.split", e.what());
  }
  return std::nullopt;
}

/// The mixture-of-experts rules (Megatron-LM's arguments.py and TransformerConfig checks).
/// A dense model (num_moe_experts 0) must leave every MoE setting at its default; an MoE model
/// needs 1 <= topk <= E, EP dividing E, ETP dividing the expert width, TP dividing the shared
/// expert, ETP x EP dividing TP x CP x DP (parallel folding), sequence parallelism with TP > 1,
/// ep in the rank order when EP > 1. Multi-latent attention is refused.
/// training.selective_ac_option: op is torchtitan's op-level selective activation checkpointing
/// of its Llama layer (core/scenario.hpp SelectiveAcOption), modelled for that layer only: it
/// needs recompute_granularity selective (torchtitan [activation_checkpoint] mode = "selective"),
/// and the layer the policy's mm count was written for: a dense SwiGLU layer without linear
/// biases (a biased nn.Linear runs aten.addmm, which the policy neither saves nor counts), the
/// SDPA flash kernel, no FP8 (Float8Linear runs _scaled_mm), TP = 1 and CP = 1 (under TP the list
/// also saves the reduce-scatter outputs and the recompute repeats the all-gathers; torchtitan's
/// CP swaps the SDPA kernel for ring attention: neither is modelled).
Breach selective_ac_breach(const Scenario& s) {
  const TrainingConfig& t = s.training;
  if (t.selective_ac_option != SelectiveAcOption::kOp) return std::nullopt;
  const char* key = "training.selective_ac_option";
  auto needs = [&](const std::string& what, const std::string& got) {
    return broken(key, fmt::format("op needs {}, got {} (rule: torchtitan's op-level selective "
                                   "activation checkpointing is modelled for its Llama layer only)",
                                   what, got));
  };
  if (t.recompute_granularity != RecomputeGranularity::kSelective) {
    return broken(key, fmt::format("op needs training.recompute_granularity: selective, got {} "
                                   "(rule: it says what selective recomputation recomputes, as "
                                   "torchtitan's selective_ac_option under mode = \"selective\")",
                                   to_string(t.recompute_granularity)));
  }
  const ModelSpec& m = s.model;
  if (m.activation != Activation::kSwiglu) {
    return needs("model.activation: swiglu", to_string(m.activation));
  }
  if (m.add_bias_linear) return needs("model.add_bias_linear: false", "true");
  if (m.is_moe()) return needs("a dense model (model.num_moe_experts: 0)", fmt::format("{}", m.num_moe_experts));
  if (!stores_no_scores(t.attention_backend)) {
    return needs("training.attention_backend: flash or fused", to_string(t.attention_backend));
  }
  if (t.fp8()) return needs("no FP8 (training.fp8_format absent)", to_string(*t.fp8_format));
  if (s.parallel.tensor_model_parallel_size != 1) {
    return needs("parallelism.tensor_model_parallel_size: 1",
                 fmt::format("{}", s.parallel.tensor_model_parallel_size));
  }
  if (s.parallel.context_parallel_size != 1) {
    return needs("parallelism.context_parallel_size: 1",
                 fmt::format("{}", s.parallel.context_parallel_size));
  }
  return std::nullopt;
}

Breach moe_breach(const Scenario& s) {
  const ModelSpec& m = s.model;
  const ParallelConfig& p = s.parallel;
  const std::optional<double>& imbalance = s.cluster.what_if.moe_load_imbalance;
  if (m.multi_latent_attention) {
    return broken(
        "model.multi_latent_attention",
        "true is not supported yet (DeepSeek-V3's multi-latent attention); remove the key "
        "or set it to false");
  }
  if (m.num_moe_experts < 0) {
    return broken(
        "model.num_moe_experts",
        fmt::format("must be >= 1 (0 in code = a dense model), got {}", m.num_moe_experts));
  }
  const int64_t ep = p.expert_model_parallel_size;
  if (Breach b = check_positive("parallelism.expert_model_parallel_size", ep)) return b;
  if (p.expert_tensor_parallel_size) {
    if (Breach b = check_positive("parallelism.expert_tensor_parallel_size",
                                  *p.expert_tensor_parallel_size))
      return b;
  }
  if (!m.is_moe()) {
    // Every MoE setting away from its default, with the key that holds it.
    const ModelSpec dense;
    const std::array<std::pair<std::string_view, bool>, 14> given = {{
        {"model.moe_router_topk", m.moe_router_topk != dense.moe_router_topk},
        {"model.moe_ffn_hidden_size", m.moe_ffn_hidden_size != 0},
        {"model.moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size != 0},
        {"model.moe_layer_freq", !m.moe_layer_pattern.empty()},
        {"model.moe_expert_capacity_factor", m.moe_expert_capacity_factor.has_value()},
        {"model.moe_pad_expert_input_to_capacity", m.moe_pad_expert_input_to_capacity},
        {"model.moe_token_dispatcher_type",
         m.moe_token_dispatcher_type != dense.moe_token_dispatcher_type},
        {"model.moe_router_load_balancing_type",
         m.moe_router_load_balancing_type != dense.moe_router_load_balancing_type},
        {"model.moe_aux_loss_coeff", m.moe_aux_loss_coeff != dense.moe_aux_loss_coeff},
        {"model.moe_grouped_gemm", m.moe_grouped_gemm},
        {"model.moe_permute_fusion", m.moe_permute_fusion},
        {"parallelism.expert_model_parallel_size", ep != 1},
        {"parallelism.expert_tensor_parallel_size", p.expert_tensor_parallel_size.has_value()},
        {"cluster.what_if.moe_load_imbalance", imbalance.has_value()},
    }};
    for (const auto& [key, is_given] : given) {
      if (is_given) {
        return broken(key,
                      "needs model.num_moe_experts >= 1 (rule: MoE settings apply to a model with "
                      "routed experts; this model is dense)");
      }
    }
    return std::nullopt;
  }
  const int64_t experts = m.num_moe_experts;
  if (m.moe_router_topk < 1 || m.moe_router_topk > experts) {
    return broken(
        "model.moe_router_topk",
        fmt::format("{} is outside [1, model.num_moe_experts = {}] (rule: each token goes "
                    "to k distinct experts)",
                    m.moe_router_topk, experts));
  }
  if (m.moe_ffn_hidden_size < 0) {
    return broken("model.moe_ffn_hidden_size",
                  fmt::format("must be >= 1, got {}", m.moe_ffn_hidden_size));
  }
  if (m.moe_shared_expert_intermediate_size < 0) {
    return broken("model.moe_shared_expert_intermediate_size",
                  fmt::format("must be >= 1, got {}", m.moe_shared_expert_intermediate_size));
  }
  if (!m.moe_layer_pattern.empty()) {
    if (static_cast<int64_t>(m.moe_layer_pattern.size()) != m.num_layers) {
      return broken(
          "model.moe_layer_freq",
          fmt::format("a list of {} entries for model.num_layers = {} layers (rule: one 0 "
                      "or 1 per layer)",
                      m.moe_layer_pattern.size(), m.num_layers));
    }
    if (std::any_of(m.moe_layer_pattern.begin(), m.moe_layer_pattern.end(),
                    [](int e) { return e != 0 && e != 1; })) {
      return broken("model.moe_layer_freq", "entries must be 0 (dense layer) or 1 (MoE layer)");
    }
    if (std::none_of(m.moe_layer_pattern.begin(), m.moe_layer_pattern.end(),
                     [](int e) { return e == 1; })) {
      return broken("model.moe_layer_freq",
                    "has no 1: no layer would be an MoE layer (rule: a dense model leaves "
                    "model.num_moe_experts out)");
    }
  }
  // The schema is static: looked up once (a lookup walks the key table).
  static const Interval& capacity = key("model.moe_expert_capacity_factor").range;
  if (m.moe_expert_capacity_factor && !capacity.contains(*m.moe_expert_capacity_factor)) {
    return broken("model.moe_expert_capacity_factor",
                  fmt::format("must be a finite number {} (null = dropless), got {}",
                              capacity.text(), *m.moe_expert_capacity_factor));
  }
  if (m.moe_pad_expert_input_to_capacity && !m.moe_expert_capacity_factor) {
    return broken("model.moe_pad_expert_input_to_capacity",
                  "true needs model.moe_expert_capacity_factor (rule: as Megatron-Core, padding "
                  "fills each expert to its capacity; a dropless MoE has none)");
  }
  // The schema is static: looked up once (a lookup walks the key table).
  static const Interval& coeff = key("model.moe_aux_loss_coeff").range;
  if (!coeff.contains(m.moe_aux_loss_coeff)) {
    return broken("model.moe_aux_loss_coeff", fmt::format("must be a finite number {}, got {}",
                                                          coeff.text(), m.moe_aux_loss_coeff));
  }
  if (experts % ep != 0) {
    return broken(
        "parallelism.expert_model_parallel_size",
        fmt::format("{} does not divide model.num_moe_experts = {} (rule: "
                    "num_moe_experts % expert_model_parallel_size == 0; each EP rank holds "
                    "E / EP whole experts)",
                    ep, experts));
  }
  const int64_t etp = p.expert_tp();
  const std::string etp_key = p.expert_tensor_parallel_size
                                  ? "parallelism.expert_tensor_parallel_size"
                                  : "parallelism.tensor_model_parallel_size";
  const std::string etp_text =
      p.expert_tensor_parallel_size
          ? fmt::format("expert_tensor_parallel_size = {}", etp)
          : fmt::format("tensor_model_parallel_size = {} (the expert TP size when "
                        "expert_tensor_parallel_size is not given)",
                        etp);
  if (m.moe_expert_ffn() % etp != 0) {
    return broken(etp_key,
                  fmt::format("{} does not divide the routed expert width {} = {} (rule: each "
                              "expert's FC1/FC2 are split over the expert TP ranks)",
                              etp_text,
                              m.moe_ffn_hidden_size > 0 ? "model.moe_ffn_hidden_size"
                                                        : "model.ffn_hidden_size",
                              m.moe_expert_ffn()));
  }
  const int64_t tp = p.tensor_model_parallel_size;
  if (m.moe_shared_expert_intermediate_size % tp != 0) {
    return broken("parallelism.tensor_model_parallel_size",
                  fmt::format("{} does not divide model.moe_shared_expert_intermediate_size = {} "
                              "(rule: the shared expert is a dense MLP split over TP)",
                              tp, m.moe_shared_expert_intermediate_size));
  }
  // Megatron-Core's parallel folding: the TP x CP x DP ranks of one pipeline stage are regrouped
  // as ETP x EP x expert-DP (parallel_state.initialize_model_parallel asserts the divisibility).
  const int64_t stage_ranks = mul(mul(tp, p.context_parallel_size), p.data_parallel_size);
  if (stage_ranks % mul(etp, ep) != 0) {
    return broken("parallelism.expert_model_parallel_size",
                  fmt::format("{} x {} = {} does not divide tensor_model_parallel_size x "
                              "context_parallel_size x data_parallel_size = {} x {} x {} = {} "
                              "(rule: parallel folding regroups the ranks of a pipeline stage as "
                              "expert TP x EP x expert DP)",
                              ep, etp_text, mul(etp, ep), tp, p.context_parallel_size,
                              p.data_parallel_size, stage_ranks));
  }
  // Megatron-LM (arguments.py): "When using MoE and tensor parallelism, sequence parallelism
  // must be used."
  if (tp > 1 && !p.sequence_parallel) {
    return broken(
        "parallelism.sequence_parallel",
        fmt::format("must be true for an MoE model with tensor_model_parallel_size = {} > 1 "
                    "(rule: as Megatron-LM asserts, MoE with TP needs sequence "
                    "parallelism)",
                    tp));
  }
  if (ep > 1) {
    const std::vector<std::string> dims = split(p.rank_order, '-');
    if (std::find(dims.begin(), dims.end(), "ep") == dims.end()) {
      return broken("parallelism.rank_order",
                    fmt::format("'{}' has no ep while expert_model_parallel_size = {} > 1 (rule: "
                                "the order places every dimension of size > 1, e.g. Megatron's "
                                "tp-cp-ep-dp-pp, the default)",
                                p.rank_order, ep));
    }
  }
  // The busiest expert takes at most every token once, E / k times the mean of T k / E.
  const double most_imbalance =
      static_cast<double>(experts) / static_cast<double>(m.moe_router_topk);
  if (imbalance && !(std::isfinite(*imbalance) && *imbalance >= 1 &&
                     *imbalance <= std::max(1.0, most_imbalance))) {
    return broken("cluster.what_if.moe_load_imbalance",
                  fmt::format("must be a finite number >= 1 and at most model.num_moe_experts "
                              "/ model.moe_router_topk = {} / {} = {:g} (the busiest expert's "
                              "tokens over the mean; 1 = balanced, {:g} = every token routed to "
                              "it), got {}",
                              experts, m.moe_router_topk, std::max(1.0, most_imbalance),
                              std::max(1.0, most_imbalance), *imbalance));
  }
  return std::nullopt;
}

}  // namespace

void check_moe(const Scenario& s, const Locator& where) {
  if (Breach b = moe_breach(s)) rule_error(where, b->key, b->problem);
}

std::optional<RuleBreach> first_broken_rule(const Scenario& s) {
  const ModelSpec& m = s.model;
  const ParallelConfig& p = s.parallel;
  const TrainingConfig& t = s.training;

  // Sizes (the file reader already checks them; a Scenario built in code may not be).
  if (Breach b = check_positive("model.num_layers", m.num_layers)) return b;
  if (Breach b = check_positive("model.hidden_size", m.hidden_size)) return b;
  if (Breach b = check_positive("model.num_attention_heads", m.num_attention_heads)) return b;
  if (Breach b = check_positive("model.ffn_hidden_size", m.ffn_hidden_size)) return b;
  if (Breach b = check_positive("model.num_query_groups", m.query_groups())) return b;
  if (Breach b = check_positive("model.seq_length", m.seq_length)) return b;
  if (Breach b = check_positive("model.vocab_size", m.vocab_size)) return b;
  if (Breach b =
          check_positive("parallelism.tensor_model_parallel_size", p.tensor_model_parallel_size))
    return b;
  if (Breach b = check_positive("parallelism.pipeline_model_parallel_size",
                                p.pipeline_model_parallel_size))
    return b;
  if (Breach b = check_positive("parallelism.virtual_pipeline_model_parallel_size",
                                p.virtual_pipeline_model_parallel_size))
    return b;
  if (Breach b = check_positive("parallelism.context_parallel_size", p.context_parallel_size))
    return b;
  if (Breach b = check_positive("parallelism.data_parallel_size", p.data_parallel_size)) return b;
  if (Breach b = check_positive("training.num_distributed_optimizer_instances",
                                t.num_distributed_optimizer_instances))
    return b;
  if (Breach b = check_positive("training.micro_batch_size", t.micro_batch_size)) return b;
  if (Breach b = check_positive("training.global_batch_size", t.global_batch_size)) return b;
  if (Breach b = check_positive("cluster.num_gpus", s.cluster.num_gpus)) return b;
  if (Breach b = size_bound_breach(s)) return b;

  if (!contains(kArchitectures, m.architecture)) {
    return broken("model.architecture", fmt::format("'{}' is not supported (allowed: {})",
                                                    m.architecture, join(kArchitectures)));
  }

  const int64_t tp = p.tensor_model_parallel_size;
  const int64_t pp = p.pipeline_model_parallel_size;
  const int64_t v = p.virtual_pipeline_model_parallel_size;
  const int64_t cp = p.context_parallel_size;
  const int64_t dp = p.data_parallel_size;

  // Model shape. With kv_channels the head dimension is given, and h need not be a multiple of
  // a (Megatron-LM asserts hidden_size % num_attention_heads == 0 only to derive kv_channels).
  if (m.kv_channels < 0) {
    return broken(
        "model.kv_channels",
        fmt::format("must be >= 1, got {} (0 in code = hidden_size / num_attention_heads)",
                    m.kv_channels));
  }
  if (m.kv_channels == 0 && m.hidden_size % m.num_attention_heads != 0) {
    return broken("model.hidden_size",
                  fmt::format("{} is not divisible by model.num_attention_heads = {} "
                              "(rule: hidden_size % num_attention_heads == 0 unless "
                              "model.kv_channels gives the head dimension)",
                              m.hidden_size, m.num_attention_heads));
  }
  // Tensor parallelism splits attention heads and the MLP's inner dimension.
  if (m.num_attention_heads % tp != 0) {
    return broken("parallelism.tensor_model_parallel_size",
                  fmt::format("{} does not divide model.num_attention_heads = {} "
                              "(rule: num_attention_heads % tensor_model_parallel_size == 0)",
                              tp, m.num_attention_heads));
  }
  // Grouped-query attention: each K/V head serves a / g query heads, and TP splits K/V heads.
  const int64_t g = m.query_groups();
  if (m.num_attention_heads % g != 0) {
    return broken("model.num_query_groups",
                  fmt::format("{} does not divide model.num_attention_heads = {} "
                              "(rule: num_attention_heads % num_query_groups == 0)",
                              g, m.num_attention_heads));
  }
  if (g % tp != 0) {
    return broken("parallelism.tensor_model_parallel_size",
                  fmt::format("{} does not divide model.num_query_groups = {} "
                              "(rule: num_query_groups % tensor_model_parallel_size == 0; each TP "
                              "rank holds whole K/V heads, as Megatron-LM asserts)",
                              tp, g));
  }
  // The schema is static: looked up once (a lookup walks the key table).
  static const Interval& base = key("model.rotary_base").range;
  if (!base.contains(m.rotary_base)) {
    return broken("model.rotary_base",
                  fmt::format("must be a finite number {} (RoPE's base, Megatron --rotary-base), "
                              "got {}",
                              base.text(), m.rotary_base));
  }
  if (m.position_embedding_type == PositionEmbedding::kRope && m.head_dim() % 2 != 0) {
    return broken(
        "model.position_embedding_type",
        fmt::format("rope needs an even head dimension (model.kv_channels, else "
                    "hidden_size / num_attention_heads), got {} (rule: RoPE rotates pairs "
                    "of channels)",
                    m.head_dim()));
  }
  if (m.ffn_hidden_size % tp != 0) {
    return broken("parallelism.tensor_model_parallel_size",
                  fmt::format("{} does not divide model.ffn_hidden_size = {} "
                              "(rule: ffn_hidden_size % tensor_model_parallel_size == 0)",
                              tp, m.ffn_hidden_size));
  }
  // Sequence parallelism shards the TP group's activations: without TP it has nothing to shard.
  // (Megatron-LM silently disables it; traintwin never downgrades a requested setting.)
  if (p.sequence_parallel && tp == 1) {
    return broken("parallelism.sequence_parallel",
                  "true needs parallelism.tensor_model_parallel_size > 1, got 1 "
                  "(rule: sequence parallelism shards activations over the TP group)");
  }
  // Megatron-LM: "Tensor parallel communication/GEMM overlap can happen only when sequence
  // parallelism is enabled".
  if (t.tp_comm_overlap && !p.sequence_parallel) {
    return broken("training.tp_comm_overlap",
                  "true needs parallelism.sequence_parallel: true "
                  "(rule: TP communication/GEMM overlap works on sequence-parallel collectives)");
  }
  // Megatron-LM's arguments.py turns the async all-reduce off under sequence parallelism, whose
  // gradient reduce-scatter overlaps the weight gradient regardless: false would not be honoured.
  if (!t.async_tensor_model_parallel_allreduce && p.sequence_parallel) {
    return broken("training.async_tensor_model_parallel_allreduce",
                  "false needs parallelism.sequence_parallel: false (rule: under sequence "
                  "parallelism the input gradient's reduce-scatter always overlaps the weight "
                  "gradient, as Megatron runs it)");
  }
  // megatron/core/fusions/fused_cross_entropy.py casts the logits' gradient to torch.bfloat16
  // (calculate_gradients), so fp16 and fp32 logits would get a gradient of the wrong dtype.
  if (t.cross_entropy_loss_fusion && t.precision != Precision::kBf16) {
    return broken("training.cross_entropy_loss_fusion",
                  fmt::format("true needs training.precision: bf16 (got {}; rule: Megatron's "
                              "fused cross entropy returns a bf16 gradient)",
                              to_string(t.precision)));
  }
  if (t.cross_entropy_loss_fusion && t.cross_entropy_loss != CrossEntropyLoss::kVocabParallel) {
    return broken("training.cross_entropy_loss_fusion",
                  fmt::format("true needs training.cross_entropy_loss: vocab_parallel (got {}; "
                              "rule: the fusion is of Megatron's vocab-parallel cross entropy)",
                              to_string(t.cross_entropy_loss)));
  }
  // Without gradient accumulation fusion the Program adds each micro-batch's param.grad into the
  // main gradient buffer that Megatron's DistributedDataParallel keeps over the micro-batches
  // (megatron/model/distributed.py _make_param_hook); ZeRO-2/3 (Megatron-FSDP) reduce-scatters
  // every micro-batch's gradients through hooks of its own, which this pass does not describe.
  if (!t.gradient_accumulation_fusion && t.zero_stage() >= 2) {
    return broken("training.gradient_accumulation_fusion",
                  fmt::format("false needs a zero stage below 2 (got {}; rule: the unfused "
                              "accumulation is Megatron DDP's param hook into its gradient "
                              "buffer, which ZeRO-2/3 does not keep)",
                              t.zero_stage()));
  }
  // Context parallelism: Megatron-Core splits the sequence into 2 x CP chunks, rank i holding
  // chunks i and 2 CP - 1 - i (causal load balance), so 2 x CP must divide seq_length.
  if (cp > 1 && m.seq_length % mul(2, cp) != 0) {
    return broken(
        "parallelism.context_parallel_size",
        fmt::format("{} needs model.seq_length = {} divisible by 2 x context_parallel_size"
                    " = {} (rule: the sequence is split into 2 x CP chunks for causal load"
                    " balance)",
                    cp, m.seq_length, mul(2, cp)));
  }
  if (cp > 1 && p.cp_comm_type == CpCommType::kA2a && (m.num_attention_heads / tp) % cp != 0) {
    return broken("parallelism.cp_comm_type",
                  fmt::format("a2a needs context_parallel_size = {} to divide the attention heads "
                              "per TP rank, num_attention_heads / tensor_model_parallel_size = {} "
                              "(rule: the all-to-all re-shards heads over CP)",
                              cp, m.num_attention_heads / tp));
  }
  if (cp > 1 && p.cp_comm_type == CpCommType::kA2a && (g / tp) % cp != 0) {
    return broken("parallelism.cp_comm_type",
                  fmt::format("a2a needs context_parallel_size = {} to divide the query groups per "
                              "TP rank, num_query_groups / tensor_model_parallel_size = {} "
                              "(rule: the all-to-all re-shards K/V heads over CP)",
                              cp, g / tp));
  }
  // FP8 runs its GEMMs in FP8 on top of a 16-bit model (Transformer Engine).
  if (t.fp8() && t.precision == Precision::kFp32) {
    return broken("training.fp8_format",
                  fmt::format("{} needs training.precision bf16 or fp16, got fp32 (rule: FP8 GEMMs "
                              "run on top of 16-bit training, as Megatron-LM's --fp8-format)",
                              to_string(*t.fp8_format)));
  }
  if (t.fp8_param_gather && !t.fp8()) {
    return broken(
        "training.fp8_param_gather",
        "true needs training.fp8_format (rule: FP8 parameters exist only in FP8 training)");
  }
  if (t.float32_matmul_precision != Float32MatmulPrecision::kHighest &&
      t.precision != Precision::kFp32) {
    return broken("training.float32_matmul_precision",
                  fmt::format("{} needs training.precision fp32, got {} (rule: it sets the "
                              "arithmetic of fp32 matrix products, as PyTorch's "
                              "torch.set_float32_matmul_precision; allowed with {}: highest)",
                              to_string(t.float32_matmul_precision), to_string(t.precision),
                              to_string(t.precision)));
  }
  if (t.precision == Precision::kFp8 || t.precision == Precision::kTf32 ||
      t.precision == Precision::kFp32Bf16) {
    return broken("training.precision",
                  fmt::format("{} is not a training precision (allowed: fp32, fp16, bf16); use "
                              "training.fp8_format on top of bf16, or "
                              "training.float32_matmul_precision high or medium on top of fp32",
                              to_string(t.precision)));
  }

  // Pipeline split: Megatron-Core's rules, even or uneven (core/pipeline_split.hpp).
  {
    std::vector<ChunkLayers> split;
    if (auto problem = try_pipeline_layer_split(m, p, split)) {
      return broken(problem->key, std::move(problem->problem));
    }
  }

  // World size.
  const int64_t world = mul(mul(mul(tp, cp), pp), dp);
  if (world != s.cluster.num_gpus) {
    return broken("cluster.num_gpus",
                  fmt::format("{} != tensor_model_parallel_size x context_parallel_size x "
                              "pipeline_model_parallel_size x data_parallel_size = "
                              "{} x {} x {} x {} = {} (rule: num_gpus = TP x CP x PP x DP)",
                              s.cluster.num_gpus, tp, cp, pp, dp, world));
  }

  // Batch.
  const int64_t per_step = mul(t.micro_batch_size, dp);
  if (t.global_batch_size % per_step != 0) {
    return broken("training.global_batch_size",
                  fmt::format("{} is not divisible by training.micro_batch_size x "
                              "parallelism.data_parallel_size = {} x {} = {} "
                              "(rule: global_batch_size % (micro_batch_size x DP) == 0)",
                              t.global_batch_size, t.micro_batch_size, dp, per_step));
  }

  // Work bound: a rank's Program holds ~20 ops per layer, micro-batch and pass; past
  // kMaxLayerPassesPerRank it would not fit a machine's memory (rather than dying of bad_alloc
  // minutes later, the file is refused here, naming the key that is out of scale).
  if (t.global_batch_size % per_step == 0 && m.num_layers % mul(pp, v) == 0) {
    const int64_t micro_batches = t.global_batch_size / per_step;
    const int64_t layers_per_stage = m.num_layers / pp;
    const int64_t passes = mul(micro_batches, layers_per_stage);
    // Context parallelism's ring (p2p) or gathered blocks (all_gather) add ops per CP step to
    // every layer pass: about a fifth of a pass's ops each (Llama 3.1 8B, 4096 passes: 100,681
    // ops at CP 1, 256,329 at CP 8, 747,805 at CP 32); the Ulysses all-to-all (a2a) adds none.
    const int64_t cp_steps = p.cp_comm_type == CpCommType::kA2a ? 0 : cp - 1;
    const int64_t weighted = mul(passes, 5 + cp_steps) / 5;
    if (passes <= kMaxLayerPassesPerRank && weighted > kMaxLayerPassesPerRank) {
      return broken(
          "parallelism.context_parallel_size",
          fmt::format("{} makes the {} layer passes per rank and iteration (micro-batches x "
                      "num_layers / PP = {} x {} / {}) hold the ops of {} (x (1 + (CP - 1) / 5): "
                      "each CP step of cp_comm_type {} adds about a fifth of a layer pass's "
                      "ops), more than the {} a Program may hold (rule: micro-batches x "
                      "num_layers / PP x (1 + (CP - 1) / 5) <= {}; cp_comm_type a2a adds no ops "
                      "per CP step)",
                      cp, passes, micro_batches, m.num_layers, pp, weighted,
                      to_string(p.cp_comm_type), kMaxLayerPassesPerRank,
                      kMaxLayerPassesPerRank));
    }
    if (passes > kMaxLayerPassesPerRank) {
      const bool batch = micro_batches >= layers_per_stage;
      return broken(
          batch ? "training.global_batch_size" : "model.num_layers",
          fmt::format("{} micro-batches (global_batch_size / (micro_batch_size x DP) = {} / "
                      "({} x {})) x {} layers per pipeline stage (num_layers / PP = {} / {}) "
                      "= {} layer passes per rank and iteration, more than the {} a "
                      "Program may hold (rule: micro-batches x num_layers / PP <= {})",
                      micro_batches, t.global_batch_size, t.micro_batch_size, dp, layers_per_stage,
                      m.num_layers, pp, passes, kMaxLayerPassesPerRank, kMaxLayerPassesPerRank));
    }
  }

  // Zero-bubble schedules (Qi et al. 2024): ZB-H1 and ZB-H2 one model chunk and at least PP
  // micro-batches; ZB-V (arXiv:2401.10241 v2, sec. 6) and DualPipeV (deepseek-ai/DualPipe) two
  // model chunks in the V placement and at least 2 x PP micro-batches (their warm-ups run 2p
  // forwards, core/schedule.hpp zb_v_schedule, dualpipev_schedule).
  if (splits_backward(p.pipeline_schedule)) {
    const std::string_view skey = "parallelism.pipeline_schedule";
    // DualPipe (DeepSeek-V3 report sec. 3.2.1; deepseek-ai/DualPipe dualpipe.py, whose step()
    // asserts num_ranks % 2 == 0, num_chunks % 2 == 0 and num_chunks >= num_ranks * 2): an even
    // PP, two model chunks (the two parameter copies, each a whole stage), an even number of
    // micro-batches, at least 2 x PP (half enter from each end).
    if (bidirectional(p.pipeline_schedule)) {
      if (pp < 2 || pp % 2 != 0) {
        return broken(
            "parallelism.pipeline_model_parallel_size",
            fmt::format("{} with pipeline_schedule dualpipe; it needs an even PP >= 2 (rule: "
                        "DualPipe pairs rank r with rank PP - 1 - r, dualpipe.py asserts "
                        "num_ranks % 2 == 0; allowed with an odd PP: gpipe, 1f1b, zb-h1, zb-h2, "
                        "zb-v, dualpipev)",
                        pp));
      }
      if (v != 2) {
        return broken(
            skey, fmt::format("dualpipe needs parallelism.virtual_pipeline_model_parallel_size: "
                              "2, got {} (rule: rank r holds two parameter copies as its model "
                              "chunks, stage r of the forward direction and stage PP - 1 - r of "
                              "the reverse one, each a whole stage of the split over PP stages; "
                              "num_layers_per_virtual_pipeline_stage, which halves stages, does "
                              "not give them)",
                              v));
      }
      const int64_t micro_batches = t.global_batch_size / per_step;
      if (micro_batches % 2 != 0 || micro_batches < 2 * pp) {
        return broken(
            "training.global_batch_size",
            fmt::format("{} gives global_batch_size / (micro_batch_size x DP) = {} / ({} x {}) "
                        "= {} micro-batches; dualpipe needs an even number of them, at least "
                        "2 x pipeline_model_parallel_size = {} (rule: half enter from each end "
                        "and each direction's warm-up runs PP forwards through the two copies; "
                        "dualpipe.py asserts num_chunks % 2 == 0 and num_chunks >= "
                        "num_ranks * 2)",
                        t.global_batch_size, t.global_batch_size, t.micro_batch_size, dp,
                        micro_batches, 2 * pp));
      }
    }
    const bool zb_v = v_shaped(p.pipeline_schedule);
    const std::string name = to_string(p.pipeline_schedule);
    if (zb_v && v != 2) {
      return broken(
          skey, fmt::format("{} needs parallelism.virtual_pipeline_model_parallel_size: 2 (or "
                            "num_layers_per_virtual_pipeline_stage = num_layers / (2 x PP)), got "
                            "{} (rule: {} holds two model chunks per rank, stages r and "
                            "2p - 1 - r; allowed values with v = 1: gpipe, 1f1b, zb-h1, zb-h2)",
                            name, v, name));
    }
    // (DualPipe splits over the PP stages of one direction, v = 1: first/last counts apply.)
    if (zb_v && !bidirectional(p.pipeline_schedule) &&
        (p.decoder_first_pipeline_num_layers || p.decoder_last_pipeline_num_layers)) {
      return broken(
          skey,
          fmt::format(
              "{} is not combined with parallelism.decoder_first_pipeline_num_layers or "
              "decoder_last_pipeline_num_layers (rule: those keys size the first and the last "
              "rank, each chunk of a rank taking its share; the V puts stages r and 2p - 1 - r "
              "on rank r, the first and the last stage both on rank 0; allowed with them: gpipe, "
              "1f1b, zb-h1, zb-h2; with {}, account_for_embedding_in_pipeline_split and "
              "account_for_loss_in_pipeline_split, which count per stage, do combine)",
              name, name));
    }
    if (!zb_v && v > 1) {
      return broken(
          skey, fmt::format("{} needs parallelism.virtual_pipeline_model_parallel_size: 1, got {} "
                            "(rule: ZB-H1 and ZB-H2 have one model chunk per rank; allowed with "
                            "v > 1: 1f1b, and zb-v, dualpipe or dualpipev with v = 2)",
                            to_string(p.pipeline_schedule), v));
    }
    const int64_t micro_batches = t.global_batch_size / per_step;
    const int64_t need = zb_v ? 2 * pp : pp;
    if (micro_batches < need) {
      return broken(
          skey, fmt::format("{} needs at least {} micro-batches, got global_batch_size / "
                            "(micro_batch_size x DP) = {} / ({} x {}) = {} (rule: ZB-H1 and ZB-H2 "
                            "fill the bubbles with the W's of PP micro-batches, ZB-V's and "
                            "DualPipeV's warm-ups run 2 x PP chunk forwards; allowed values: "
                            "gpipe, 1f1b, zb-h1, zb-h2, zb-v, dualpipe, dualpipev)",
                            to_string(p.pipeline_schedule),
                            zb_v ? fmt::format("2 x pipeline_model_parallel_size = {}", need)
                                 : fmt::format("pipeline_model_parallel_size = {}", need),
                            t.global_batch_size, t.micro_batch_size, dp, micro_batches));
    }
  }

  // Interleaved 1F1B (v > 1 model chunks per pipeline rank).
  if (v > 1) {
    const std::string_view vkey = "parallelism.virtual_pipeline_model_parallel_size";
    const bool zb_v = v_shaped(p.pipeline_schedule);
    if (p.pipeline_schedule != PipelineScheduleKind::k1F1B && !zb_v) {
      return broken(
          vkey, fmt::format("{} model chunks need parallelism.pipeline_schedule: 1f1b (or zb-v, "
                            "dualpipe or dualpipev with 2 chunks), got {} (rule: only 1F1B "
                            "interleaves model chunks, ZB-V and DualPipeV place two in a V and "
                            "DualPipe holds two copies; GPipe, ZB-H1 and ZB-H2 have none)",
                            v, to_string(p.pipeline_schedule)));
    }
    if (pp < 2) {
      return broken(
          vkey, fmt::format("{} model chunks need parallelism.pipeline_model_parallel_size > 1, "
                            "got {} (rule: the interleaved schedule needs a pipeline)",
                            v, pp));
    }
    const int64_t micro_batches = t.global_batch_size / per_step;
    if (!zb_v && micro_batches % pp != 0) {
      return broken(
          vkey, fmt::format("{} model chunks need the number of micro-batches, "
                            "global_batch_size / (micro_batch_size x DP) = {} / ({} x {}) = {}, "
                            "to be divisible by pipeline_model_parallel_size = {} "
                            "(rule: Megatron-LM's interleaved schedule)",
                            v, t.global_batch_size, t.micro_batch_size, dp, micro_batches, pp));
    }
  }

  // Distributed-optimizer overlap (Megatron-LM: --overlap-param-gather needs the distributed
  // optimizer and --overlap-grad-reduce).
  if (t.overlap_param_gather && !t.use_distributed_optimizer) {
    return broken("training.overlap_param_gather",
                  "true needs training.use_distributed_optimizer: true "
                  "(rule: only the distributed optimizer all-gathers parameters)");
  }
  // Megatron-FSDP (Megatron-LM's Megatron-FSDP user guide: --use-megatron-fsdp goes with
  // --use-distributed-optimizer; the sharding strategy applies to Megatron-FSDP only).
  if (t.use_megatron_fsdp && !t.use_distributed_optimizer) {
    return broken("training.use_megatron_fsdp",
                  "true needs training.use_distributed_optimizer: true (rule: as Megatron-LM's "
                  "Megatron-FSDP)");
  }
  if (!t.use_megatron_fsdp &&
      t.data_parallel_sharding_strategy != DataParallelShardingStrategy::kNoShard) {
    return broken("training.data_parallel_sharding_strategy",
                  fmt::format("{} needs training.use_megatron_fsdp: true (without it, "
                              "use_distributed_optimizer shards the optimizer state: ZeRO-1)",
                              to_string(t.data_parallel_sharding_strategy)));
  }
  // ZeRO-3's unit schedule: resharding and prefetching apply to gathered parameters only.
  if (t.zero_stage() < 3) {
    for (const auto& [changed, key, value] :
         {std::tuple{!t.reshard_after_forward, "training.reshard_after_forward", std::string("false")},
          std::tuple{t.fsdp_prefetch_depth != 1, "training.fsdp_prefetch_depth",
                     std::to_string(t.fsdp_prefetch_depth)}}) {
      if (!changed) continue;
      return broken(key, fmt::format("{} needs training.use_megatron_fsdp: true with "
                                     "training.data_parallel_sharding_strategy: "
                                     "optim_grads_params (ZeRO-3), got ZeRO-{} (rule: only "
                                     "sharded parameters are gathered, resharded and "
                                     "prefetched; allowed without them: the default)",
                                     value, t.zero_stage()));
    }
  }
  // HSDP (Megatron-Core's --num-distributed-optimizer-instances: the distributed optimizer
  // sharded inside each instance, asserted to need --use-distributed-optimizer).
  if (const int64_t n = t.num_distributed_optimizer_instances; n > 1) {
    const std::string key = "training.num_distributed_optimizer_instances";
    if (!t.use_distributed_optimizer) {
      return broken(key,
                    fmt::format("{} needs training.use_distributed_optimizer: true (rule: HSDP "
                                "shards inside each of the {} instances, as Megatron-LM)",
                                n, n));
    }
    const int64_t dp_cp = p.data_parallel_size * p.context_parallel_size;
    if (dp_cp % n != 0) {
      std::string divisors;
      for (int64_t d = 1; d <= dp_cp; ++d) {
        if (dp_cp % d == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
      }
      return broken(key,
                    fmt::format("{} does not divide data_parallel_size x context_parallel_size = "
                                "{} x {} = {} (allowed: {}; rule: every instance holds "
                                "DP x CP / N ranks)",
                                n, p.data_parallel_size, p.context_parallel_size, dp_cp, divisors));
    }
    if (m.is_moe()) {
      return broken(key,
                    fmt::format("{} with a mixture of experts is not modelled (the expert-data-"
                                "parallel groups have no HSDP split here; allowed: 1)",
                                n));
    }
  }
  if (t.overlap_param_gather && !t.overlap_grad_reduce) {
    return broken("training.overlap_param_gather",
                  "true needs training.overlap_grad_reduce: true (rule: as Megatron-LM)");
  }
  if (Breach b = offload_breach(s)) return b;
  if (Breach b = selective_ac_breach(s)) return b;

  if (Breach b = moe_breach(s)) return b;
  if (Breach b = what_if_breach(s)) return b;
  if (Breach b = live_training_breach(s)) return b;
  if (Breach b = data_breach(s.data)) return b;

  // Rank order: a permutation of tp, cp, ep, dp, pp, as the rank layout parses it.
  // An MoE model needs its expert groups (Megatron-Core asserts the two generators agree on the
  // pipeline groups).
  try {
    const RankLayout layout = layout_of(s);
    if (m.is_moe()) layout.check_expert_groups();
  } catch (const InvalidArgument& e) {
    return broken("parallelism.rank_order", e.what());
  }
  return std::nullopt;
}

void check_rules(const Scenario& s, const Locator& where) {
  if (Breach b = first_broken_rule(s)) rule_error(where, b->key, b->problem);
}

}  // namespace traintwin::scenario_rules
