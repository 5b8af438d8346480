// The scenario schema: one table entry per key of a scenario file (scenarios/*.yaml), with its
// section, type and unit, default, allowed range or values, one-line doc, Megatron-LM flag and
// the Scenario member it fills. Everything that spells a key reads this table: the reader and
// its `--set` overrides (core/scenario_reader.cpp), the unknown-key "did you mean", the single-key
// ranges of the cross-key rules (core/scenario_rules.cpp), the Megatron-LM flags of the command
// line (cli/scenario_options.cpp) and the generated key reference (core/scenario_reference.hpp,
// printed by `traintwin keys` into scenarios/README.md). The enums' names are
// core/scenario_enum_names.hpp's; the table itself is in core/scenario_schema.cpp.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "core/scenario.hpp"
#include "core/scenario_enum_names.hpp"
#include "core/scenario_text.hpp"

namespace traintwin::scenario_schema {

inline constexpr std::string_view kOverrideOrigin = "--set";

// cluster.what_if and its two nested mappings.
inline constexpr std::string_view kWhatIf = "cluster.what_if";
inline constexpr std::string_view kStraggler = "cluster.what_if.straggler";
inline constexpr std::string_view kDegradedLink = "cluster.what_if.degraded_link";
// cluster.reliability (core/reliability.hpp) and its two mappings keyed by component class.
inline constexpr std::string_view kReliability = "cluster.reliability";
inline constexpr std::string_view kFailureRates = "cluster.reliability.failure_rates";
inline constexpr std::string_view kWeibullShapes = "cluster.reliability.weibull_shapes";
/// The component classes of failure_rates and weibull_shapes.
inline constexpr std::array<std::string_view, 9> kFailureComponents = {
    "gpu", "hbm", "nic", "network", "cpu", "host", "software", "sdc", "other"};

// The two spellings of the virtual pipeline size; at most one may be given per source.
inline constexpr std::string_view kVirtualSize = "virtual_pipeline_model_parallel_size";
inline constexpr std::string_view kLayersPerVirtualStage = "num_layers_per_virtual_pipeline_stage";

/// model.architecture's presets and cluster.collective_algorithm's values (strings, no enum).
inline constexpr std::array<std::string_view, 3> kArchitectures = {"gpt", "llama", "nemotron"};
inline constexpr std::array<std::string_view, 4> kCollectiveAlgorithms = {"auto", "ring", "tree",
                                                                          "nvls"};
/// The training precisions a file may name (Precision's fp8 and tf32 are kernel dtypes only).
inline constexpr std::array<std::string_view, 3> kTrainingPrecisions = {"fp32", "fp16", "bf16"};

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

inline constexpr Interval kNonNegative{0, false};
inline constexpr Interval kPositive{0, true};
inline constexpr Interval kUnitHalfOpen{0, false, 1, true};
inline constexpr Interval kUnitOpenClosed{0, true, 1, false};  ///< (0, 1]: a bandwidth factor
inline constexpr Interval kAtLeastOne{1, false};                ///< >= 1: a slowdown factor
/// A what-if factor (core/scenario_rules.cpp checks it): a ratio of hardware rates, 1000x slower
/// or faster at most. Beyond that is no cluster a what-if describes, and the extremes break the
/// simulation itself (a link at 1e-320 of its rate looks deadlocked to SimGrid; a GPU 1e308 x
/// faster gives an MFU above 100 %).
inline constexpr Interval kScale{1e-3, false, 1e3, false};

/// How a key's value is written in the file.
enum class ValueType {
  kInteger,        ///< a plain YAML integer, >= KeySpec::min
  kNumber,         ///< a plain finite YAML number, in KeySpec::range
  kBoolean,        ///< true / false
  kEnum,           ///< one of KeySpec::values, spelt exactly
  kString,         ///< a non-empty string
  kPath,           ///< a path, relative to the scenario file (to the current directory by --set)
  kIntegerOrList,  ///< an integer or a YAML list of integers (model.moe_layer_freq)
  kMapping,        ///< a mapping of the keys whose section is this key's path
};

/// "integer", "number", "boolean", "enum", "string", "path", "integer or list", "mapping".
std::string_view to_string(ValueType t);

/// A reference to the Scenario member of type T that a key fills.
template <typename T>
using FieldRef = T& (*)(Scenario&);

/// The member `ref` names, read-only: for the checks of a scenario that is already built. (The
/// accessor takes a mutable Scenario so that one pointer serves the reader too; it only forms a
/// reference, and nothing is written through this one.)
template <typename T>
const T& get(FieldRef<T> ref, const Scenario& s) {
  return ref(const_cast<Scenario&>(s));
}

/// An enum member (plain or optional) read and written by name.
struct EnumField {
  /// Sets the member to the value spelt `name`; false (member untouched) for an unknown name.
  bool (*set)(Scenario&, std::string_view name);
  /// The member's name; "" for an optional member that holds none.
  std::string_view (*get)(const Scenario&);
};

/// The member a key fills. std::monostate: the reader fills it by its own code (a derived value
/// such as data_parallel_size, a nested mapping, a list), named in KeySpec::doc.
using Binding =
    std::variant<std::monostate, FieldRef<int64_t>, FieldRef<std::optional<int64_t>>,
                 FieldRef<double>, FieldRef<std::optional<double>>, FieldRef<bool>,
                 FieldRef<std::string>, FieldRef<std::filesystem::path>,
                 FieldRef<std::optional<std::filesystem::path>>, EnumField>;

/// `(s.*Section).*Member` as a FieldRef (or `s.*Section` without a Member).
template <auto Section, auto... Member>
constexpr auto field() {
  if constexpr (sizeof...(Member) == 0) {
    return +[](Scenario& s) -> auto& { return s.*Section; };
  } else {
    return +[](Scenario& s) -> auto& { return ((s.*Section) .* ... .* Member); };
  }
}

namespace detail {
template <typename T>
struct Unwrap {
  using type = T;
  static constexpr bool optional = false;
};
template <typename T>
struct Unwrap<std::optional<T>> {
  using type = T;
  static constexpr bool optional = true;
};
}  // namespace detail

/// The enum member `(s.*Section).*Member` (an enum of core/scenario_enum_names.hpp, or an
/// optional of one) as an EnumField.
template <auto Section, auto Member>
EnumField enum_field() {
  using M = std::remove_cvref_t<decltype(std::declval<Scenario&>().*Section.*Member)>;
  using E = typename detail::Unwrap<M>::type;
  return EnumField{
      +[](Scenario& s, std::string_view name) {
        const std::optional<E> v = EnumNames<E>::table.parse(name);
        if (v) (s.*Section).*Member = *v;
        return v.has_value();
      },
      +[](const Scenario& s) -> std::string_view {
        const M& m = (s.*Section).*Member;
        if constexpr (detail::Unwrap<M>::optional) {
          return m ? enum_name(*m) : std::string_view();
        } else {
          return enum_name(m);
        }
      }};
}

/// The allowed names of enum E (its whole table).
template <typename E>
constexpr std::span<const std::string_view> names_of() {
  return kEnumNames<E>;
}

/// One key of the scenario schema.
struct KeySpec {
  std::string_view section;  ///< "" (top level), "model", ..., or "cluster.what_if[.straggler]"
  std::string_view key;      ///< the key inside its section, Megatron-LM's name in snake_case
  ValueType type;
  std::string_view unit = "";  ///< e.g. "layers", "GPUs", "samples"; "" = a count or a ratio
  bool required = false;
  /// The default in words when it is not the member's initial value (derived from other keys,
  /// an architecture preset, "none"); "" = the value `bind` reads from a default Scenario.
  std::string_view default_text = "";
  int64_t min = 1;                           ///< kInteger: the smallest value
  Interval range = kNonNegative;             ///< kNumber: the values allowed
  std::span<const std::string_view> values = {};  ///< kEnum: the names allowed
  std::string_view doc;                      ///< one line: what the key says
  std::string_view flag = "";  ///< the Megatron-LM flag (or traintwin's shorthand), "" = none
  Binding bind = {};
  std::string_view note = "";  ///< kNumber: what the value is, in range messages
  bool needs_experts = false;  ///< only with model.num_moe_experts (an MoE model)
  bool executor_only = false;  ///< live training only; the simulator ignores it

  /// "section.key", or "key" at the top level.
  std::string path() const;
};

/// Every key, section by section in the file's order: the top level (name and the sections),
/// model, parallelism, training, cluster, cluster.what_if and its two mappings, data.
std::span<const KeySpec> scenario_keys();

/// The entry of the dotted `path` ("parallelism.tensor_model_parallel_size"); nullptr when no
/// key has that path.
const KeySpec* find_key(std::string_view path);

/// The entry of `path`; throws InvalidArgument naming the path when the schema has none.
const KeySpec& key(std::string_view path);

/// The keys allowed inside the mapping at `path` ("" = the top level), in table order; empty for
/// a path that is not a mapping.
std::vector<std::string_view> keys_of(std::string_view path);

/// True for a key path inside a section whose value is itself a mapping of keys
/// (cluster.what_if and its straggler and degraded_link).
bool is_nested_mapping(std::string_view path);

/// True for a top-level key that is a section (model, parallelism, training, cluster, data).
bool is_section(std::string_view key);

/// The default of `k` as the reference prints it: default_text, else the bound member of a
/// default Scenario ("none" for an empty optional); "" for a required key or no binding.
std::string default_of(const KeySpec& k);

/// The allowed values of `k` in words: "one of a, b", ">= 1", "in [0, 1)", "true or false", ...
std::string allowed_of(const KeySpec& k);

}  // namespace traintwin::scenario_schema
