// A scenario file as a checked YAML tree, internal to core/scenario_reader.cpp: the structure
// checks (mappings, known and duplicate keys, with file:line), the `--set` overrides applied on
// the tree, and typed getters that place every error at the key's line, at "--set", or at the
// file. The keys and their nesting are core/scenario_schema.hpp's table. Next in the flow:
// core/scenario_reader.cpp extracts the Scenario from the tree.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/scenario.hpp"
#include "core/scenario_schema.hpp"

namespace traintwin::scenario_reader {

/// "section.key", or "key" for a root key.
inline std::string path_of(const std::string& sec, const std::string& key) {
  return sec.empty() ? key : sec + "." + key;
}

/// How a YAML value looks, for "expected X, got Y" messages ("an empty value", "a sequence",
/// "'text'", "the quoted string \"text\"", ...).
std::string describe(const YAML::Node& node);

/// True for a scalar that YAML types as a string no matter its text (quoted, or tagged !!str).
bool is_string_typed(const YAML::Node& node);

/// A decimal integer ("12", "+12", "-3"), or nullopt for any other text.
std::optional<int64_t> parse_integer_text(const std::string& text);

/// One scenario file's YAML tree: checks its structure, applies overrides, and reads typed
/// values. Remembers the line of each key in the file and which keys came from overrides, to
/// place every message; every failure is a ConfigError.
class ScenarioTree {
 public:
  /// `origin`: the file name used in messages ("<scenario>" for text); `root`: its document.
  ScenarioTree(std::string origin, YAML::Node root)
      : origin_(std::move(origin)), root_(std::move(root)) {}

  /// Where the key `path` ("section.key", "section" or "name") was given.
  std::string locate(std::string_view path) const;
  /// Checks the file as written: a mapping of known sections, each a mapping of known keys, no
  /// duplicates, and not both spellings of the virtual pipeline size.
  void check_file();
  /// Applies `--set` overrides on the tree. Keys are checked against the schema; an override of
  /// one spelling of the virtual pipeline size removes the other from the file.
  void apply(const std::vector<Override>& overrides);

 protected:
  /// Throws ConfigError "<where>: <path>: <problem>" (where: locate(path)).
  [[noreturn]] void fail(std::string_view path, const std::string& problem) const;
  /// The node at a dotted path ("" = the root); undefined when a step is absent or not a mapping.
  YAML::Node node_at(const std::string& path) const;
  /// The section node (undefined/null when absent or empty).
  YAML::Node section(const std::string& name) const;
  /// Fails when section `name` is absent or empty.
  void require_section(const std::string& name) const;
  /// The value node of `section.key` ("" section: a root key; the section may be a dotted
  /// path to a nested mapping); undefined when absent.
  YAML::Node value(const std::string& sec, const std::string& key) const;
  /// Throws ConfigError "<where the section is>: <sec.key>: missing required key".
  [[noreturn]] void missing(const std::string& sec, const std::string& key) const;
  /// An integer >= `min` (1 unless told), or nullopt when absent and not required.
  std::optional<int64_t> get_int(const std::string& sec, const std::string& key,
                                 bool required = true, int64_t min = 1) const;
  /// A what-if factor: a number ("2", "2.0", "0.5", "1e-1"; its range is a rule,
  /// core/scenario_rules.cpp's check_scale), or nullopt when absent and not required.
  std::optional<double> get_scale(const std::string& sec, const std::string& key,
                                  bool required = false) const;
  /// A finite number (a plain YAML scalar: "2", "0.5", "1e-8"), or nullopt when absent. Only the
  /// type is checked here; `range` is named in the message (check_rules() checks it).
  std::optional<double> get_number(const std::string& sec, const std::string& key,
                                   const scenario_schema::Interval& range) const;
  /// `text` as a path: one from the file is relative to the file's folder, one from --set to
  /// the current directory (it was typed there). The file need not exist yet.
  std::filesystem::path resolve(const std::string& path, const std::filesystem::path& text,
                                const std::filesystem::path& base_dir) const;
  /// An optional path key, resolved as resolve() does.
  std::optional<std::filesystem::path> get_path(const std::string& sec, const std::string& key,
                                   const std::filesystem::path& base_dir) const;
  /// true/false (YAML 1.2 core spellings: true, True, TRUE, false, False, FALSE).
  std::optional<bool> get_bool(const std::string& sec, const std::string& key) const;
  /// A non-empty scalar string.
  std::optional<std::string> get_string(const std::string& sec, const std::string& key,
                                        bool required) const;
  /// A required non-empty scalar string.
  std::string get_string(const std::string& sec, const std::string& key) const;
  /// One of `allowed`, as its text.
  std::optional<std::string> get_enum_text(const std::string& sec, const std::string& key,
                                           std::span<const std::string_view> allowed,
                                           bool required = false) const;

 private:
  /// Throws ConfigError "--set: <key>: <problem>".
  [[noreturn]] static void override_error(std::string_view key, const std::string& problem);
  /// 1-based line of `node` in the file.
  static int line(const YAML::Node& node);
  /// "file:line" of `node` (the file alone when it has no mark).
  std::string where_node(const YAML::Node& node) const;
  /// The text of a mapping key; complex keys (sequences, mappings) are rejected.
  std::string key_name(const YAML::Node& key, const std::string& prefix) const;
  /// Fails when `key` was already seen in the same mapping (names its first line).
  void check_duplicate(std::map<std::string, int>& seen, const YAML::Node& key_node,
                       const std::string& key, const std::string& path) const;
  /// Checks the mapping at `name` (a section, or a nested mapping such as cluster.what_if) and,
  /// recursively, the nested mappings it holds.
  void check_section(const std::string& name, const YAML::Node& node);
  /// The mapping at `parts` ({} = the root) that overrides can write into; absent, empty or
  /// scalar steps are replaced by empty mappings. Rebinds handles with reset(), never with
  /// assignment (assigning to a YAML::Node bound to a tree node overwrites the tree).
  YAML::Node writable(const std::vector<std::string>& parts);
  /// Forgets where `path` and every key below it came from (removed by an override).
  void forget(const std::string& path);

  std::string origin_;
  YAML::Node root_;
  std::map<std::string, int> line_of_;  // "section.key" -> 1-based line in the file
  std::set<std::string> from_override_;
};

}  // namespace traintwin::scenario_reader
