// A scenario file as a checked YAML tree (core/scenario_tree.hpp): structure checks, `--set`
// overrides, typed getters that place their errors. Next in the flow: core/scenario_reader.cpp.
#include "core/scenario_tree.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/error.hpp"
#include "core/scenario_text.hpp"
#include "core/text.hpp"

namespace traintwin::scenario_reader {

namespace fs = std::filesystem;
using namespace scenario_schema;

namespace {

/// The paths an override may name, from the schema: "name, model.KEY, ..., cluster.KEY,
/// cluster.what_if.KEY[.KEY], data.KEY".
std::string override_paths() {
  std::vector<std::string> parts;
  for (std::string_view root : keys_of("")) {
    if (!is_section(root)) {
      parts.emplace_back(root);
      continue;
    }
    parts.push_back(fmt::format("{}.KEY", root));
    for (std::string_view k : keys_of(root)) {
      const std::string nested = fmt::format("{}.{}", root, k);
      if (!is_nested_mapping(nested)) continue;
      const std::vector<std::string_view> inner = keys_of(nested);
      const bool deeper = std::any_of(inner.begin(), inner.end(), [&nested](std::string_view i) {
        return is_nested_mapping(fmt::format("{}.{}", nested, i));
      });
      parts.push_back(fmt::format("{}.KEY{}", nested, deeper ? "[.KEY]" : ""));
    }
  }
  return join(parts);
}

}  // namespace

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      if (node.Tag() == "!") return fmt::format("the quoted string \"{}\"", node.Scalar());
      return fmt::format("'{}'", node.Scalar());
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

bool is_string_typed(const YAML::Node& node) {
  const std::string& tag = node.Tag();
  return tag == "!" || tag == "tag:yaml.org,2002:str";
}

std::optional<int64_t> parse_integer_text(const std::string& text) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  if (digits.empty()) return std::nullopt;
  int64_t value = 0;
  const char* first = digits.data();
  const char* last = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return value;
}

std::string ScenarioTree::locate(std::string_view path) const {
  const std::string key(path);
  if (from_override_.count(key) != 0) return std::string(kOverrideOrigin);
  // A mapping that exists only through overrides of its keys (--set cluster.what_if.x=...).
  const auto below = from_override_.lower_bound(key + ".");
  if (line_of_.count(key) == 0 && below != from_override_.end() &&
      below->rfind(key + ".", 0) == 0) {
    return std::string(kOverrideOrigin);
  }
  if (auto it = line_of_.find(key); it != line_of_.end()) {
    return fmt::format("{}:{}", origin_, it->second);
  }
  return origin_;
}

void ScenarioTree::check_file() {
  if (!root_.IsMap()) {
    throw ConfigError(fmt::format("{}: expected a mapping with the keys {}, got {}",
                                  where_node(root_), join(keys_of("")), describe(root_)));
  }
  std::map<std::string, int> seen;
  const std::vector<std::string_view> root_keys = keys_of("");
  for (const auto& entry : root_) {
    const std::string key = key_name(entry.first, "");
    check_duplicate(seen, entry.first, key, key);
    if (!contains(root_keys, key)) {
      throw ConfigError(fmt::format("{}: {}: {}", where_node(entry.first), key,
                                    unknown_key_problem(key, root_keys)));
    }
    line_of_[key] = line(entry.first);
    if (is_section(key)) check_section(key, entry.second);
  }
  const YAML::Node par = section("parallelism");
  if (par && par.IsMap() && par[std::string(kVirtualSize)] &&
      par[std::string(kLayersPerVirtualStage)]) {
    fail(fmt::format("parallelism.{}", kLayersPerVirtualStage),
         fmt::format("cannot be given together with parallelism.{} (at {}); give one of them "
                     "(v = num_layers / (pipeline_model_parallel_size x {}))",
                     kVirtualSize, locate(fmt::format("parallelism.{}", kVirtualSize)),
                     kLayersPerVirtualStage));
  }
}

void ScenarioTree::apply(const std::vector<Override>& overrides) {
  struct Parsed {
    std::vector<std::string> parts;  // {"name"}, {"section", "key"} or a deeper path
    YAML::Node value;
    std::string section() const { return parts.size() > 1 ? parts.front() : ""; }
    const std::string& key() const { return parts.back(); }
  };
  std::vector<Parsed> parsed;
  std::set<std::string> virtual_keys;
  for (const Override& o : overrides) {
    Parsed item;
    item.parts = split(o.key, '.');
    const std::vector<std::string>& parts = item.parts;
    if (parts.size() == 1 && o.key == "name") {
      // a root key
    } else if (parts.size() == 1 && is_section(o.key)) {
      override_error(o.key, fmt::format("is a section; name a key inside it, e.g. {}.{} "
                                        "(allowed: {})",
                                        o.key, keys_of(o.key).front(), join(keys_of(o.key))));
    } else if (parts.size() >= 2 && is_section(parts[0])) {
      // Each step names a key of the mapping above it; only the last may be a plain value.
      std::string prefix = parts[0];
      for (size_t i = 1; i < parts.size(); ++i) {
        if (!contains(keys_of(prefix), parts[i])) {
          override_error(o.key, unknown_key_problem(parts[i], keys_of(prefix)));
        }
        prefix += "." + parts[i];
        if (i + 1 < parts.size() && !is_nested_mapping(prefix)) {
          override_error(o.key, fmt::format("unknown key ({} holds a value, not a mapping of "
                                            "keys)",
                                            prefix));
        }
      }
    } else {
      override_error(o.key, fmt::format("unknown key (allowed: {})", override_paths()));
    }
    try {
      item.value = YAML::Load(o.value);
    } catch (const YAML::Exception& e) {
      override_error(o.key, fmt::format("value '{}' is not valid YAML: {}", o.value, e.msg));
    }
    // A mapping (a flow mapping {rank: 17, ...} included) is set one dotted key at a time.
    if (is_nested_mapping(o.key) && !item.value.IsNull()) {
      override_error(o.key,
                     fmt::format("is a mapping; set its keys one --set each, e.g. "
                                 "--set {}.{}=VALUE (allowed: {}), or remove it with "
                                 "{}=null",
                                 o.key, keys_of(o.key).front(), join(keys_of(o.key)), o.key));
    }
    const KeySpec* spec = find_key(o.key);
    const bool list_allowed = spec != nullptr && spec->type == ValueType::kIntegerOrList;
    if (!item.value.IsScalar() && !item.value.IsNull() &&
        !(list_allowed && item.value.IsSequence())) {
      override_error(o.key, fmt::format("expected a scalar value{}, got {}",
                                        list_allowed ? " or a list" : "", describe(item.value)));
    }
    if (item.section() == "parallelism" && !item.value.IsNull() &&
        (item.key() == kVirtualSize || item.key() == kLayersPerVirtualStage)) {
      virtual_keys.insert(item.key());
    }
    parsed.push_back(std::move(item));
  }
  if (virtual_keys.size() > 1) {
    override_error(fmt::format("parallelism.{}", kLayersPerVirtualStage),
                   fmt::format("cannot be given together with parallelism.{}; give one of them",
                               kVirtualSize));
  }

  for (const Parsed& item : parsed) {
    const std::string path = join(item.parts, ".");
    const std::vector<std::string> parent(item.parts.begin(), item.parts.end() - 1);
    if (item.value.IsNull()) {
      // "--set KEY=null" (or "KEY="): drop the key (and what it holds), back to its default or
      // derived value.
      if (const YAML::Node map = node_at(join(parent, ".")); map && map.IsMap()) {
        writable(parent).remove(item.key());
      }
      forget(path);
      continue;
    }
    YAML::Node map = writable(parent);
    if (item.section() == "parallelism" &&
        (item.key() == kVirtualSize || item.key() == kLayersPerVirtualStage)) {
      const std::string other(item.key() == kVirtualSize ? kLayersPerVirtualStage : kVirtualSize);
      map.remove(other);
      forget("parallelism." + other);
    }
    map[item.key()] = item.value;
    from_override_.insert(path);
  }
}

[[noreturn]] void ScenarioTree::fail(std::string_view path, const std::string& problem) const {
  throw ConfigError(fmt::format("{}: {}: {}", locate(path), path, problem));
}

[[noreturn]] void ScenarioTree::override_error(std::string_view key, const std::string& problem) {
  throw ConfigError(fmt::format("{}: {}: {}", kOverrideOrigin, key, problem));
}

int ScenarioTree::line(const YAML::Node& node) { return node.Mark().line + 1; }

std::string ScenarioTree::where_node(const YAML::Node& node) const {
  if (node.Mark().line < 0) return origin_;
  return fmt::format("{}:{}", origin_, line(node));
}

std::string ScenarioTree::key_name(const YAML::Node& key, const std::string& prefix) const {
  if (!key.IsScalar()) {
    throw ConfigError(fmt::format("{}: {}: expected a key name, got {}", where_node(key),
                                  prefix.empty() ? "(top level)" : prefix, describe(key)));
  }
  return key.Scalar();
}

void ScenarioTree::check_duplicate(std::map<std::string, int>& seen, const YAML::Node& key_node,
                     const std::string& key, const std::string& path) const {
  auto [it, inserted] = seen.emplace(key, line(key_node));
  if (!inserted) {
    throw ConfigError(fmt::format("{}: {}: duplicate key (first given at line {})",
                                  where_node(key_node), path, it->second));
  }
}

void ScenarioTree::check_section(const std::string& name, const YAML::Node& node) {
  if (node.IsNull()) return;  // "section:" with every key commented out: an empty section
  if (!node.IsMap()) {
    throw ConfigError(fmt::format("{}: {}: expected a mapping of {} keys, got {} (allowed: {})",
                                  locate(name), name, name, describe(node), join(keys_of(name))));
  }
  const std::vector<std::string_view> allowed = keys_of(name);
  std::map<std::string, int> seen;
  for (const auto& entry : node) {
    const std::string key = key_name(entry.first, name);
    const std::string path = name + "." + key;
    check_duplicate(seen, entry.first, key, path);
    if (!contains(allowed, key)) {
      throw ConfigError(fmt::format("{}: {}: {}", where_node(entry.first), path,
                                    unknown_key_problem(key, allowed)));
    }
    line_of_[path] = line(entry.first);
    if (is_nested_mapping(path)) check_section(path, entry.second);
  }
}

YAML::Node ScenarioTree::node_at(const std::string& path) const {
  const YAML::Node& root = root_;
  if (path.empty()) return root;
  YAML::Node cur = root;
  for (const std::string& part : split(path, '.')) {
    if (!cur.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& map = cur;
    const YAML::Node next = map[part];
    if (!next) return YAML::Node(YAML::NodeType::Undefined);
    cur.reset(next);
  }
  return cur;
}

YAML::Node ScenarioTree::writable(const std::vector<std::string>& parts) {
  YAML::Node cur = root_;
  for (const std::string& part : parts) {
    const YAML::Node& view = cur;
    const YAML::Node existing = view[part];
    if (!existing || !existing.IsMap()) cur[part] = YAML::Node(YAML::NodeType::Map);
    const YAML::Node next = cur[part];
    cur.reset(next);
  }
  return cur;
}

void ScenarioTree::forget(const std::string& path) {
  const auto below = [&path](const std::string& k) {
    return k == path || k.rfind(path + ".", 0) == 0;
  };
  std::erase_if(line_of_, [&below](const auto& entry) { return below(entry.first); });
  std::erase_if(from_override_, below);
}

YAML::Node ScenarioTree::section(const std::string& name) const {
  const YAML::Node& root = root_;
  return root[name];
}

void ScenarioTree::require_section(const std::string& name) const {
  const YAML::Node sec = section(name);
  if (!sec || sec.IsNull()) {
    fail(name, fmt::format("missing required section (it holds: {})", join(keys_of(name))));
  }
}

YAML::Node ScenarioTree::value(const std::string& sec, const std::string& key) const {
  return node_at(path_of(sec, key));
}

[[noreturn]] void ScenarioTree::missing(const std::string& sec, const std::string& key) const {
  const std::string path = path_of(sec, key);
  // Place it at the section's line when the section is there.
  throw ConfigError(
      fmt::format("{}: {}: missing required key", locate(sec.empty() ? "" : sec), path));
}

std::optional<int64_t> ScenarioTree::get_int(const std::string& sec, const std::string& key,
                               bool required, int64_t min) const {
  const YAML::Node node = value(sec, key);
  const std::string path = path_of(sec, key);
  if (!node) {
    if (required) missing(sec, key);
    return std::nullopt;
  }
  std::optional<int64_t> parsed;
  if (node.IsScalar() && !is_string_typed(node)) parsed = parse_integer_text(node.Scalar());
  if (!parsed) {
    fail(path, fmt::format("expected an integer >= {}, got {}", min, describe(node)));
  }
  if (*parsed < min) fail(path, fmt::format("must be >= {}, got {}", min, *parsed));
  return parsed;
}

std::optional<double> ScenarioTree::get_scale(const std::string& sec, const std::string& key,
                                bool required) const {
  const YAML::Node node = value(sec, key);
  const std::string path = path_of(sec, key);
  if (!node) {
    if (required) missing(sec, key);
    return std::nullopt;
  }
  std::optional<double> parsed;
  if (node.IsScalar() && !is_string_typed(node)) parsed = parse_number_text(node.Scalar());
  if (!parsed) {
    fail(path, fmt::format("expected a number {} (a factor such as 2.0 or 0.5), got {}",
                           kScale.text(), describe(node)));
  }
  return parsed;
}

std::optional<double> ScenarioTree::get_number(const std::string& sec, const std::string& key,
                                 const Interval& range) const {
  const YAML::Node node = value(sec, key);
  if (!node) return std::nullopt;
  std::optional<double> parsed;
  if (node.IsScalar() && !is_string_typed(node)) parsed = parse_number_text(node.Scalar());
  if (!parsed) {
    fail(path_of(sec, key),
         fmt::format("expected a finite number {}, got {}", range.text(), describe(node)));
  }
  return parsed;
}

fs::path ScenarioTree::resolve(const std::string& path, const fs::path& text, const fs::path& base_dir) const {
  if (text.is_relative() && !base_dir.empty() && from_override_.count(path) == 0) {
    return (base_dir / text).lexically_normal();
  }
  return text;
}

std::optional<fs::path> ScenarioTree::get_path(const std::string& sec, const std::string& key,
                                 const fs::path& base_dir) const {
  const std::optional<std::string> text = get_string(sec, key, false);
  if (!text) return std::nullopt;
  return resolve(path_of(sec, key), *text, base_dir);
}

std::optional<bool> ScenarioTree::get_bool(const std::string& sec, const std::string& key) const {
  const YAML::Node node = value(sec, key);
  if (!node) return std::nullopt;
  if (node.IsScalar() && !is_string_typed(node)) {
    const std::string& text = node.Scalar();
    if (text == "true" || text == "True" || text == "TRUE") return true;
    if (text == "false" || text == "False" || text == "FALSE") return false;
  }
  fail(path_of(sec, key),
       fmt::format("expected a boolean (true or false), got {}", describe(node)));
}

std::optional<std::string> ScenarioTree::get_string(const std::string& sec, const std::string& key,
                                      bool required) const {
  const YAML::Node node = value(sec, key);
  if (!node) {
    if (required) missing(sec, key);
    return std::nullopt;
  }
  if (!node.IsScalar() || node.Scalar().empty()) {
    fail(path_of(sec, key), fmt::format("expected a non-empty string, got {}", describe(node)));
  }
  return node.Scalar();
}

std::string ScenarioTree::get_string(const std::string& sec, const std::string& key) const {
  return get_string(sec, key, true).value();
}

std::optional<std::string> ScenarioTree::get_enum_text(const std::string& sec, const std::string& key,
                                         std::span<const std::string_view> allowed,
                                         bool required) const {
  const YAML::Node node = value(sec, key);
  if (!node) {
    if (required) missing(sec, key);
    return std::nullopt;
  }
  if (!node.IsScalar() || !contains(allowed, node.Scalar())) {
    fail(path_of(sec, key),
         fmt::format("{} is not allowed (allowed: {})", describe(node), join(allowed)));
  }
  return node.Scalar();
}

}  // namespace traintwin::scenario_reader
