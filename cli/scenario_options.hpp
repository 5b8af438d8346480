// Command-line options shared by every subcommand that reads a scenario: the file, `--set
// key=value` overrides and the Megatron-LM flags, one per schema key that names a flag
// (core/scenario_schema.hpp).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "core/scenario_schema.hpp"

namespace traintwin::cli {

/// The Megatron-LM flags of the scenario schema (core/scenario_schema.hpp, KeySpec::flag), each
/// typed as its key: integers and numbers parsed by CLI11, enum names checked against the allowed
/// values, texts, lists and on/off switches.
class SchemaFlags {
 public:
  /// Adds to `group` the flag of every key that has one and that `pick` accepts, in the
  /// schema's order, with the key's doc and path as help.
  void add_to(CLI::Option_group& group,
              const std::function<bool(const scenario_schema::KeySpec&)>& pick);
  /// Appends the flags given as overrides of their keys, in the order they were added: integers
  /// in decimal, numbers in their shortest round-trip spelling, enum names and lists as given,
  /// strings and paths as YAML scalars (quoted when plain YAML would read them differently),
  /// switches as true.
  void append_overrides(std::vector<Override>& out) const;

 private:
  std::vector<std::string> order_;  // key paths, as added
  std::map<std::string, std::optional<int64_t>> integers_;
  std::map<std::string, std::optional<double>> numbers_;
  std::map<std::string, std::optional<std::string>> raw_;   // enum names, integer lists
  std::map<std::string, std::optional<std::string>> text_;  // strings and paths
  std::map<std::string, bool> switches_;
};

/// Megatron-LM's five flags of the uneven pipeline split (core/pipeline_split.hpp), for `sweep`
/// (which keeps them for every layout): --pipeline-model-parallel-layout,
/// --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers,
/// --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split, from the
/// schema.
struct PipelineSplitFlags {
  /// Adds the five flags to `group`.
  void add_to(CLI::Option_group& group);
  /// Appends the flags given as their parallelism.* overrides.
  void append_overrides(std::vector<Override>& out) const;

 private:
  SchemaFlags flags_;
};

/// Values of the scenario options of one subcommand.
struct ScenarioOptions {
  std::string file;
  std::vector<std::string> set;
  /// Every Megatron-LM flag of the schema: "Megatron-LM flags" (the simulated keys) and
  /// "Megatron-LM training flags" (live training and data).
  SchemaFlags megatron, megatron_training;

  /// The overrides in effect: --set entries, then the Megatron flags as their dotted keys
  /// (SchemaFlags::append_overrides). Throws ConfigError when one key is given twice with
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
