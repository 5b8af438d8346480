// The cross-key rules of a scenario (core/scenario_reader.cpp reads the keys, then calls
// check_rules): each rule names the key it refuses, the values it allows and why, in one
// ConfigError "<where>: <key>: <problem>"; first_broken_rule() gives the same rule as a value, for
// callers that check many scenarios and keep the invalid ones (the sweep). Next in the flow:
// core/rank_layout.hpp (the layout the rules build to check the groups) and core/pipeline_split.hpp
// (the pipeline split's rules).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/scenario.hpp"

namespace traintwin::scenario_rules {

/// Upper bounds of the sizes (first_broken_rule checks them after the lower ones), each far above
/// any model or cluster trained (the largest: hidden 53,248 wide, 128 heads, 256 experts, a
/// 1M-token context, a 256K vocabulary, ~2e12 parameters, ~1e5 GPUs), so that no count the
/// memory model or the Program derives from them (parameters, tokens, bytes) passes int64's
/// range: hidden_size, ffn_hidden_size, kv_channels and the expert widths.
inline constexpr int64_t kMaxModelWidth = int64_t{1} << 20;
/// num_layers, num_attention_heads, num_query_groups, num_moe_experts.
inline constexpr int64_t kMaxModelCount = int64_t{1} << 16;
/// seq_length and vocab_size, in tokens.
inline constexpr int64_t kMaxTokens = int64_t{1} << 24;
/// Every parallel size (TP, CP, PP, VPP, DP, EP, ETP, HSDP instances) and cluster.num_gpus.
inline constexpr int64_t kMaxParallelSize = int64_t{1} << 24;
/// training.global_batch_size, in samples.
inline constexpr int64_t kMaxGlobalBatch = int64_t{1} << 32;
/// Tokens of one micro-batch: micro_batch_size x seq_length.
inline constexpr int64_t kMaxMicroBatchTokens = int64_t{1} << 26;
/// The model's parameters (every layer counted as an MoE layer when the model has experts).
inline constexpr double kMaxParameters = 1e15;

/// The work bound (kMaxLayerPassesPerRank, core/scenario.hpp) counts context parallelism too: with
/// cp_comm_type p2p or all_gather each CP step adds about a fifth of a layer pass's ops, so the
/// rule is micro-batches x num_layers / PP x (1 + (CP - 1) / 5) <= kMaxLayerPassesPerRank, and it
/// names parallelism.context_parallel_size when CP is what passes it.

/// Returns "where" (file:line, --set, or the origin) for a dotted key path.
using Locator = std::function<std::string(std::string_view key)>;

/// Throws ConfigError "<where(key)>: <key>: <problem>".
[[noreturn]] void rule_error(const Locator& where, std::string_view key,
                             const std::string& problem);

/// A broken rule: the key it refuses and the problem (the value, the rule and the numbers), as
/// check_rules' ConfigError words them after its "<where>: ".
struct RuleBreach {
  std::string key;
  std::string problem;
  /// "<key>: <problem>": check_rules' message without its "<where>: " prefix.
  std::string message() const;
};

/// The mixture-of-experts rules (model.num_moe_experts and the moe_* keys against the layout).
/// Throws ConfigError.
void check_moe(const Scenario& s, const Locator& where);

/// Every cross-key rule of a read scenario (check_moe among them). Throws ConfigError naming the
/// first key that breaks one: "<where(key)>: " + first_broken_rule(s)->message().
void check_rules(const Scenario& s, const Locator& where);

/// The first rule of check_rules() that `s` breaks, in check_rules' order, or nullopt when `s`
/// passes them all: check_rules without the exception (the rules are the same code). Throws only
/// what a rule's own computation throws past check_rules too (InvalidArgument from the pipeline
/// split's sizes, which the size rules before it exclude).
std::optional<RuleBreach> first_broken_rule(const Scenario& s);

}  // namespace traintwin::scenario_rules
