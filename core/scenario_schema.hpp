// The scenario schema, internal to the scenario reader (core/scenario.cpp) and its cross-key
// rules (core/scenario_rules.cpp): the sections and their keys, the names of each enum's values
// (indexed as the enum), the typed tables of the live-training keys with their ranges, and the
// small text helpers both use (join, contains, the "did you mean" of an unknown key). The public
// types are core/scenario.hpp's; the format is documented in scenarios/README.md.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/scenario.hpp"
#include "core/text.hpp"

namespace traintwin::scenario_schema {

// ----- the schema: sections and their keys ----------------------------------------------------

inline constexpr std::string_view kOverrideOrigin = "--set";

inline constexpr std::array<std::string_view, 6> kRootKeys = {"name",     "model",   "parallelism",
                                                       "training", "cluster", "data"};
inline constexpr std::array<std::string_view, 27> kModelKeys = {
    "architecture",       "num_layers",
    "hidden_size",        "num_attention_heads",
    "num_query_groups",   "kv_channels",
    "ffn_hidden_size",    "seq_length",
    "vocab_size",         "normalization",
    "activation",         "position_embedding_type",
    "rotary_base",
    "untie_embeddings_and_output_weights", "add_bias_linear",
    "num_moe_experts",    "moe_router_topk",
    "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
    "moe_layer_freq",     "moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity", "moe_token_dispatcher_type",
    "moe_router_load_balancing_type", "moe_aux_loss_coeff",
    "moe_grouped_gemm",   "multi_latent_attention"};
inline constexpr std::array<std::string_view, 16> kParallelismKeys = {
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "num_layers_per_virtual_pipeline_stage",
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "context_parallel_size",
    "cp_comm_type",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "sequence_parallel",
    "data_parallel_size",
    "pipeline_schedule",
    "rank_order"};
inline constexpr std::array<std::string_view, 32> kTrainingKeys = {"micro_batch_size",
                                                            "global_batch_size",
                                                            "precision",
                                                            "float32_matmul_precision",
                                                            "recompute_granularity",
                                                            "attention_backend",
                                                            "use_distributed_optimizer",
                                                            "overlap_grad_reduce",
                                                            "overlap_param_gather",
                                                            "tp_comm_overlap",
                                                            "fp8_format",
                                                            "fp8_recipe",
                                                            "fp8_param_gather",
                                                            "train_iters",
                                                            "lr",
                                                            "min_lr",
                                                            "lr_decay_style",
                                                            "lr_warmup_iters",
                                                            "lr_decay_iters",
                                                            "weight_decay",
                                                            "clip_grad",
                                                            "adam_beta1",
                                                            "adam_beta2",
                                                            "adam_eps",
                                                            "hidden_dropout",
                                                            "attention_dropout",
                                                            "init_method_std",
                                                            "seed",
                                                            "log_interval",
                                                            "eval_interval",
                                                            "eval_iters",
                                                            "save_interval"};
inline constexpr std::array<std::string_view, 5> kClusterKeys = {
    "topology", "num_gpus", "collective_algorithm", "what_if", "reliability"};
inline constexpr std::array<std::string_view, 4> kDataKeys = {"data_path", "split", "vocab_file",
                                                       "merge_file"};
// cluster.what_if and its two nested mappings.
inline constexpr std::string_view kWhatIf = "cluster.what_if";
inline constexpr std::string_view kStraggler = "cluster.what_if.straggler";
inline constexpr std::string_view kDegradedLink = "cluster.what_if.degraded_link";
inline constexpr std::array<std::string_view, 6> kWhatIfKeys = {
    "ib_bandwidth_scale", "nvlink_bandwidth_scale", "gpu_speed_scale", "straggler",
    "degraded_link",      "moe_load_imbalance"};
inline constexpr std::array<std::string_view, 2> kStragglerKeys = {"rank", "compute_scale"};
inline constexpr std::array<std::string_view, 2> kDegradedLinkKeys = {"name", "bandwidth_scale"};
// cluster.reliability (core/reliability.hpp) and its two nested mappings, keyed by component.
inline constexpr std::string_view kReliability = "cluster.reliability";
inline constexpr std::string_view kFailureRates = "cluster.reliability.failure_rates";
inline constexpr std::string_view kWeibullShapes = "cluster.reliability.weibull_shapes";
inline constexpr std::array<std::string_view, 15> kReliabilityKeys = {
    "failure_rates",
    "weibull_shapes",
    "planned_interruptions_per_1000_node_days",
    "detection_s",
    "requeue_s",
    "process_start_s",
    "communicator_init_s",
    "communicator_init_s_per_1000_gpus",
    "storage_write_GBps_per_node",
    "storage_read_GBps_per_node",
    "filesystem_GBps",
    "async_save",
    "async_save_stall_s",
    "spare_nodes",
    "node_repair_hours"};
/// The component classes of failure_rates and weibull_shapes.
inline constexpr std::array<std::string_view, 9> kFailureComponents = {
    "gpu", "hbm", "nic", "network", "cpu", "host", "software", "sdc", "other"};
inline constexpr std::array<std::string_view, 4> kCollectiveAlgorithms = {"auto", "ring", "tree", "nvls"};

// The two spellings of the virtual pipeline size; at most one may be given per source.
inline constexpr std::string_view kVirtualSize = "virtual_pipeline_model_parallel_size";
inline constexpr std::string_view kLayersPerVirtualStage = "num_layers_per_virtual_pipeline_stage";

inline constexpr std::array<std::string_view, 3> kArchitectures = {"gpt", "llama", "nemotron"};
inline constexpr std::array<std::string_view, 2> kNormalizations = {"layernorm", "rmsnorm"};
inline constexpr std::array<std::string_view, 3> kActivations = {"gelu", "swiglu", "squared_relu"};
inline constexpr std::array<std::string_view, 2> kPositionEmbeddings = {"learned_absolute", "rope"};
inline constexpr std::array<std::string_view, 2> kFp8Formats = {"hybrid", "e4m3"};
inline constexpr std::array<std::string_view, 4> kFp8Recipes = {"delayed", "tensorwise", "blockwise",
                                                         "mxfp8"};
inline constexpr std::array<std::string_view, 3> kCpCommTypes = {"p2p", "a2a", "all_gather"};
// Indexed as MoeTokenDispatcher and MoeLoadBalancing.
inline constexpr std::array<std::string_view, 2> kMoeDispatchers = {"alltoall", "allgather"};
inline constexpr std::array<std::string_view, 2> kMoeLoadBalancings = {"aux_loss", "none"};
/// The model keys that describe routed experts: each needs model.num_moe_experts.
inline constexpr std::array<std::string_view, 10> kMoeModelKeys = {
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity",
    "moe_token_dispatcher_type",
    "moe_router_load_balancing_type",
    "moe_aux_loss_coeff",
    "moe_grouped_gemm"};


inline constexpr std::array<std::string_view, 3> kRecomputes = {"none", "selective", "full"};
inline constexpr std::array<std::string_view, 3> kFloat32MatmulPrecisions = {"highest", "high",
                                                                      "medium"};
inline constexpr std::array<std::string_view, 2> kAttentionBackends = {"unfused", "flash"};
inline constexpr std::array<std::string_view, 2> kSchedules = {"gpipe", "1f1b"};
inline constexpr std::array<std::string_view, 3> kLrDecayStyles = {"constant", "linear", "cosine"};

/// The allowed values of a real-valued key: finite, from `min` (excluded when min_open) to `max`
/// (excluded when max_open; infinite = no upper bound).
struct Interval {
  double min;
  bool min_open;
  double max = std::numeric_limits<double>::infinity();
  bool max_open = true;

  bool contains(double v) const {
    return std::isfinite(v) && (min_open ? v > min : v >= min) &&
           (std::isinf(max) || (max_open ? v < max : v <= max));
  }
  /// "> 0", ">= 0" or "in [0, 1)".
  std::string text() const {
    if (std::isinf(max)) return fmt::format("{} {}", min_open ? ">" : ">=", min);
    return fmt::format("in {}{}, {}{}", min_open ? '(' : '[', min, max, max_open ? ')' : ']');
  }
};

/// A real-valued key of the training section with a default (Megatron-LM's) and its range.
struct RealKey {
  std::string_view key;
  double TrainingConfig::*field;
  Interval range;
  std::string_view note;  ///< what the value is, for messages
};

inline constexpr Interval kNonNegative{0, false};
inline constexpr Interval kPositive{0, true};
inline constexpr Interval kUnitHalfOpen{0, false, 1, true};

const std::array<RealKey, 9> kRealTrainingKeys = {{
    {"min_lr", &TrainingConfig::min_lr, kNonNegative, "the floor the learning rate decays to"},
    {"weight_decay", &TrainingConfig::weight_decay, kNonNegative, "AdamW weight decay"},
    {"clip_grad", &TrainingConfig::clip_grad, kNonNegative,
     "the largest global gradient norm; 0 = no clipping"},
    {"adam_beta1", &TrainingConfig::adam_beta1, kUnitHalfOpen, "Adam's first-moment decay"},
    {"adam_beta2", &TrainingConfig::adam_beta2, kUnitHalfOpen, "Adam's second-moment decay"},
    {"adam_eps", &TrainingConfig::adam_eps, kPositive, "Adam's denominator term"},
    {"hidden_dropout", &TrainingConfig::hidden_dropout, kUnitHalfOpen, "a probability"},
    {"attention_dropout", &TrainingConfig::attention_dropout, kUnitHalfOpen, "a probability"},
    {"init_method_std", &TrainingConfig::init_method_std, kPositive,
     "the standard deviation of the weight initialization"},
}};

/// An integer key of the training section with a default and its minimum.
struct IntKey {
  std::string_view key;
  int64_t TrainingConfig::*field;
  int64_t min;
};

const std::array<IntKey, 5> kIntTrainingKeys = {{
    {"lr_warmup_iters", &TrainingConfig::lr_warmup_iters, 0},
    {"seed", &TrainingConfig::seed, 0},
    {"log_interval", &TrainingConfig::log_interval, 1},
    {"eval_interval", &TrainingConfig::eval_interval, 1},
    {"eval_iters", &TrainingConfig::eval_iters, 0},
}};

/// An optional integer key of the training section (no default) and its minimum.
struct OptionalIntKey {
  std::string_view key;
  std::optional<int64_t> TrainingConfig::*field;
  int64_t min;
};

const std::array<OptionalIntKey, 3> kOptionalIntTrainingKeys = {{
    {"train_iters", &TrainingConfig::train_iters, 1},
    {"lr_decay_iters", &TrainingConfig::lr_decay_iters, 1},
    {"save_interval", &TrainingConfig::save_interval, 1},
}};

/// The keys allowed inside the mapping at `path`: a section name of kRootKeys other than "name",
/// or one of the nested mappings (cluster.what_if and its straggler and degraded_link).
inline std::vector<std::string_view> keys_of(std::string_view path) {
  auto vec = [](const auto& arr) { return std::vector<std::string_view>(arr.begin(), arr.end()); };
  if (path == "model") return vec(kModelKeys);
  if (path == "parallelism") return vec(kParallelismKeys);
  if (path == "training") return vec(kTrainingKeys);
  if (path == "cluster") return vec(kClusterKeys);
  if (path == "data") return vec(kDataKeys);
  if (path == kWhatIf) return vec(kWhatIfKeys);
  if (path == kStraggler) return vec(kStragglerKeys);
  if (path == kReliability) return vec(kReliabilityKeys);
  if (path == kFailureRates || path == kWeibullShapes) return vec(kFailureComponents);
  if (path == kDegradedLink) return vec(kDegradedLinkKeys);
  return {};
}

/// True for a key path inside a section whose value is itself a mapping of keys.
inline bool is_nested_mapping(std::string_view path) {
  return path == kWhatIf || path == kStraggler || path == kDegradedLink || path == kReliability ||
         path == kFailureRates || path == kWeibullShapes;
}

inline bool is_section(std::string_view key) {
  return key == "model" || key == "parallelism" || key == "training" || key == "cluster" ||
         key == "data";
}

template <typename Range>
inline std::string join(const Range& items, std::string_view sep = ", ") {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

template <typename Range>
inline bool contains(const Range& items, std::string_view value) {
  return std::find(std::begin(items), std::end(items), value) != std::end(items);
}

/// "unknown key; did you mean X? (allowed: ...)".
template <typename Range>
inline std::string unknown_key_problem(std::string_view key, const Range& allowed) {
  const std::string_view best =
      closest_match(key, std::vector<std::string_view>(std::begin(allowed), std::end(allowed)));
  std::string hint;
  if (!best.empty()) hint = fmt::format("; did you mean {}?", best);
  return fmt::format("unknown key{} (allowed: {})", hint, join(allowed));
}

/// a x b, saturating at INT64_MAX (all operands are >= 1 when this is used).
inline int64_t mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::numeric_limits<int64_t>::max();
  return out;
}

/// Splits "a.b" into {"a", "b"}.
inline std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

inline std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

}  // namespace traintwin::scenario_schema
