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
