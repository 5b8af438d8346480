// The cross-key rules of a scenario (core/scenario_reader.cpp reads the keys, then calls
// check_rules): each rule names the key it refuses, the values it allows and why, in one
// ConfigError "<where>: <key>: <problem>". Next in the flow: core/rank_layout.hpp (the layout
// the rules build to check the groups) and core/pipeline_split.hpp (the pipeline split's rules).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/scenario.hpp"

namespace traintwin::scenario_rules {

/// Returns "where" (file:line, --set, or the origin) for a dotted key path.
using Locator = std::function<std::string(std::string_view key)>;

/// Throws ConfigError "<where(key)>: <key>: <problem>".
[[noreturn]] void rule_error(const Locator& where, std::string_view key,
                             const std::string& problem);

/// The mixture-of-experts rules (model.num_moe_experts and the moe_* keys against the layout).
/// Throws ConfigError.
void check_moe(const Scenario& s, const Locator& where);

/// Every cross-key rule of a read scenario (check_moe among them). Throws ConfigError naming the
/// first key that breaks one.
void check_rules(const Scenario& s, const Locator& where);

}  // namespace traintwin::scenario_rules
