// Reading the JSON files traintwin writes (summary.json, sweep.json) field by field, with errors
// that name the file, the key's path and what was expected: "out/summary.json: missing key
// 'layout.data_parallel_size'", "sweep.json: 'rows[3].metrics.mfu' must be a number, got "x"".
// Also the schema-version check every versioned file starts with. The readers take
// nlohmann::ordered_json, so that an object read keeps the order its writer gave its keys.
//
// The readers that use these (sim/summary_document.cpp, sim/sweep_record.cpp) sit next to the
// writers of the same files, so one struct is written and read by one pair of functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace traintwin {

/// Where a JSON value sits: the file it came from and its key path inside it ("" for the top).
struct JsonPlace {
  std::string origin;  ///< the file (or any name that starts every error message)
  std::string path;    ///< e.g. "layout", "rows[3].configuration"; "" for the top level

  /// The place of `key` inside this one ("layout" + "tp" -> "layout.tp").
  JsonPlace key(const std::string& key) const;
  /// The place of element `i` of the array here ("rows" + 3 -> "rows[3]").
  JsonPlace index(size_t i) const;
  /// The path as error messages show it: the path, or "(top)" for the top level.
  std::string shown() const;
};

/// j[key] where j must be an object. Throws Error "ORIGIN: 'PATH' is not an object" or
/// "ORIGIN: missing key 'PATH.KEY'".
const nlohmann::ordered_json& json_at(const nlohmann::ordered_json& j, const std::string& key,
                                      const JsonPlace& where);
/// j[key] as a number (any JSON number), else Error "'PATH.KEY' must be a number, got V".
double json_number(const nlohmann::ordered_json& j, const std::string& key, const JsonPlace& where);
/// j[key] as an integer, else Error "'PATH.KEY' must be an integer, got V".
int64_t json_integer(const nlohmann::ordered_json& j, const std::string& key,
                     const JsonPlace& where);
/// j[key] as an integer, or nullopt when it is null; Error when missing or of another type.
std::optional<int64_t> json_optional_integer(const nlohmann::ordered_json& j,
                                             const std::string& key, const JsonPlace& where);
/// j[key] as a boolean, else Error "'PATH.KEY' must be true or false, got V".
bool json_bool(const nlohmann::ordered_json& j, const std::string& key, const JsonPlace& where);
/// j[key] as a string, else Error "'PATH.KEY' must be a string, got V".
std::string json_string(const nlohmann::ordered_json& j, const std::string& key,
                        const JsonPlace& where);
/// j[key] as a string, or nullopt when it is null.
std::optional<std::string> json_optional_string(const nlohmann::ordered_json& j,
                                                const std::string& key, const JsonPlace& where);
/// j[key], which must be an array, else Error "'PATH.KEY' must be an array".
const nlohmann::ordered_json& json_array(const nlohmann::ordered_json& j, const std::string& key,
                                         const JsonPlace& where);
/// j[key], which must be an object, else Error "'PATH.KEY' must be an object".
const nlohmann::ordered_json& json_object(const nlohmann::ordered_json& j, const std::string& key,
                                          const JsonPlace& where);
/// j[key] as an array of numbers (each element checked, its index in the message).
std::vector<double> json_numbers(const nlohmann::ordered_json& j, const std::string& key,
                                 const JsonPlace& where);
/// j[key] as an array of strings.
std::vector<std::string> json_strings(const nlohmann::ordered_json& j, const std::string& key,
                                      const JsonPlace& where);

/// Throws Error "ORIGIN: 'PATH' is \"TEXT\"; allowed: A, B, C" for a name outside `allowed`.
[[noreturn]] void json_not_allowed(const JsonPlace& where, const std::string& text,
                                   std::span<const std::string_view> allowed);
/// j[key] as the value `table` names by it (an EnumTable of core/scenario_enum_names.hpp, e.g.
/// EnumNames<RecomputeGranularity>::table); Error naming the key and the allowed names (the
/// table's, in order) for any other text.
template <typename Table>
auto json_enum(const nlohmann::ordered_json& j, const std::string& key, const JsonPlace& where,
               const Table& table) {
  const std::string text = json_string(j, key, where);
  const auto value = table.parse(text);
  if (!value) {
    const auto names = table.names();
    json_not_allowed(where.key(key), text, names);
  }
  return *value;
}

/// Checks the "schema_version" of a file's top-level object against the one version this build
/// reads (`reads`). Throws Error naming `origin`, the version found and `reads` when the top is
/// not an object, the key is missing (a file from before schema versions: `how_to_rewrite` says
/// what writes a current one, e.g. "run `traintwin simulate --out` again"), it is not an
/// integer, or it is another version (newer: written by a newer traintwin).
void check_schema_version(const nlohmann::ordered_json& file, const std::string& origin,
                          int64_t reads, const std::string& how_to_rewrite);

}  // namespace traintwin
