// Placement files; see placement.hpp (format in scenarios/README.md, "Placement files").
#include "sim/placement.hpp"

#include <fmt/format.h>

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/scenario_text.hpp"
#include "core/units.hpp"
#include "core/yaml_document.hpp"

namespace traintwin {
namespace {

constexpr std::array<std::string_view, 8> kJobKeys = {"name",  "scenario",   "set",
                                                      "nodes", "hosts",      "iterations",
                                                      "start", "description"};
constexpr std::array<std::string_view, 6> kAllTopKeys = {
    "name", "description", "topology", "num_nodes", "host_index_base", "jobs"};

/// "<origin>:<line>" of a node (its mark is 0-based).
std::string at(const std::string& origin, const YAML::Node& n) {
  const int line = n.Mark().line;
  return line >= 0 ? fmt::format("{}:{}", origin, line + 1) : origin;
}

/// A non-negative integer from its decimal text; nullopt when it is not one.
std::optional<int64_t> to_index(std::string_view text) {
  if (text.empty() || text.size() > 15) return std::nullopt;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

/// The scalar text of `n`; ConfigError "<where>: <what> must be <kind>" otherwise.
std::string scalar(const YAML::Node& n, const std::string& where, std::string_view kind) {
  if (!n.IsScalar()) throw ConfigError(fmt::format("{}: must be {}", where, kind));
  return n.Scalar();
}

int64_t integer(const YAML::Node& n, const std::string& where, int64_t min) {
  const std::string text = scalar(n, where, "an integer");
  int64_t v = 0;
  try {
    size_t used = 0;
    v = std::stoll(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    throw ConfigError(fmt::format("{}: '{}' is not an integer", where, text));
  }
  if (v < min) throw ConfigError(fmt::format("{}: {} (allowed: >= {})", where, v, min));
  return v;
}

void check_keys(const YAML::Node& map, const std::string& origin, const std::string& prefix,
                const auto& allowed) {
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (!scenario_schema::contains(allowed, key)) {
      throw ConfigError(fmt::format("{}: {}{}: {}", at(origin, kv.first), prefix, key,
                                    scenario_schema::unknown_key_problem(key, allowed)));
    }
  }
}

}  // namespace

std::vector<int64_t> parse_node_range(const std::string& text, const std::string& where) {
  const std::string t = trim(text);
  const size_t dash = t.find('-');
  const auto bad = [&] {
    return ConfigError(fmt::format(
        "{}: '{}' is not a node index or range (allowed: N or A-B with 0 <= A <= B, e.g. 0-63)",
        where, text));
  };
  if (dash == std::string::npos) {
    const auto v = to_index(t);
    if (!v) throw bad();
    return {*v};
  }
  const auto a = to_index(trim(std::string_view(t).substr(0, dash)));
  const auto b = to_index(trim(std::string_view(t).substr(dash + 1)));
  if (!a || !b || *a > *b) throw bad();
  if (*b - *a >= (int64_t{1} << 24)) throw ConfigError(fmt::format("{}: range '{}' too long", where, text));
  std::vector<int64_t> out;
  for (int64_t i = *a; i <= *b; ++i) out.push_back(i);
  return out;
}

std::vector<int64_t> parse_host_list(const std::string& text, int64_t index_base,
                                     const std::string& where) {
  // Split at the commas outside brackets.
  std::vector<std::string> names;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) break;
    if (c == ',' && depth == 0) {
      names.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  names.push_back(trim(cur));
  const auto bad = [&](const std::string& name) {
    return ConfigError(fmt::format(
        "{}: '{}' is not a host name with a node number (allowed: a prefix and a number, node12, "
        "or a prefix and a bracketed list of numbers and ranges, dgx[001-004,010], comma-"
        "separated as Slurm writes host lists)",
        where, name));
  };
  if (depth != 0) throw bad(text);
  std::vector<int64_t> out;
  auto add = [&](int64_t number, const std::string& name) {
    if (number < index_base) {
      throw ConfigError(fmt::format("{}: host '{}' numbered below host_index_base {}", where, name,
                                    index_base));
    }
    out.push_back(number - index_base);
  };
  for (const std::string& name : names) {
    const size_t open = name.find('[');
    if (open == std::string::npos) {
      size_t digits = name.size();
      while (digits > 0 && name[digits - 1] >= '0' && name[digits - 1] <= '9') --digits;
      const auto v = to_index(std::string_view(name).substr(digits));
      if (!v) throw bad(name);
      add(*v, name);
      continue;
    }
    const size_t close = name.find(']', open);
    if (close == std::string::npos || close + 1 != name.size()) throw bad(name);
    const std::string inside = name.substr(open + 1, close - open - 1);
    for (const std::string& part : scenario_schema::split(inside, ',')) {
      std::vector<int64_t> range;
      try {
        range = parse_node_range(part, where);
      } catch (const ConfigError&) {
        throw bad(name);
      }
      for (int64_t v : range) add(v, name);
    }
  }
  return out;
}

Placement parse_placement(const std::string& yaml_text, const std::string& origin,
                          const std::filesystem::path& base_dir) {
  const YAML::Node root = load_single_yaml_document(yaml_text, origin, "placement file");
  if (!root.IsMap()) {
    throw ConfigError(fmt::format("{}: a placement file is a mapping with topology and jobs",
                                  origin));
  }
  check_keys(root, origin, "", kAllTopKeys);
  Placement p;
  p.name = root["name"] ? scalar(root["name"], at(origin, root["name"]) + ": name", "text")
                        : std::filesystem::path(origin).stem().string();
  if (!root["topology"]) {
    throw ConfigError(fmt::format("{}: topology: missing (the topology file of the shared fabric, "
                                  "relative to this file)", origin));
  }
  p.topology_file =
      base_dir / scalar(root["topology"], at(origin, root["topology"]) + ": topology", "a path");
  const int64_t host_base =
      root["host_index_base"]
          ? integer(root["host_index_base"], at(origin, root["host_index_base"]) + ": host_index_base", 0)
          : 0;
  const YAML::Node jobs = root["jobs"];
  if (!jobs || !jobs.IsSequence() || jobs.size() == 0) {
    throw ConfigError(fmt::format("{}: jobs: missing or empty (a list of jobs, each with name, "
                                  "scenario and nodes or hosts)", jobs ? at(origin, jobs) : origin));
  }
  std::map<int64_t, std::string> owner;  // node -> job
  std::set<std::string> names;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const YAML::Node j = jobs[i];
    std::string where = fmt::format("{}: jobs[{}]", at(origin, j), i);
    if (!j.IsMap()) throw ConfigError(where + ": must be a mapping (name, scenario, nodes, ...)");
    check_keys(j, origin, fmt::format("jobs[{}].", i), kJobKeys);
    JobPlacement job;
    job.line = j.Mark().line + 1;
    if (!j["name"]) throw ConfigError(where + ": name: missing");
    job.name = scalar(j["name"], where + ": name", "text");
    if (job.name.empty()) throw ConfigError(where + ": name: empty");
    where = fmt::format("{}: jobs[{}] ({})", at(origin, j), i, job.name);
    if (!names.insert(job.name).second) {
      throw ConfigError(fmt::format("{}: name: a second job named {}", where, job.name));
    }
    if (!j["scenario"]) throw ConfigError(where + ": scenario: missing (a scenario file, relative to this file)");
    job.scenario_file = base_dir / scalar(j["scenario"], where + ": scenario", "a path");
    if (const YAML::Node set = j["set"]) {
      if (!set.IsSequence()) {
        throw ConfigError(where + ": set: must be a list of KEY=VALUE entries, as --set takes "
                                  "them (e.g. [cluster.num_gpus=16])");
      }
      for (const YAML::Node& e : set) {
        const std::string text = scalar(e, where + ": set", "KEY=VALUE entries");
        try {
          job.overrides.push_back(parse_override(text));
        } catch (const ConfigError& err) {
          throw ConfigError(fmt::format("{}: set: {}", where, err.what()));
        }
      }
    }
    if (j["nodes"] && j["hosts"]) {
      throw ConfigError(where + ": nodes and hosts: give one of them, not both");
    }
    if (const YAML::Node n = j["nodes"]) {
      const std::string w = where + ": nodes";
      std::vector<YAML::Node> items;
      if (n.IsSequence()) {
        for (const YAML::Node& e : n) items.push_back(e);
      } else {
        items.push_back(n);
      }
      for (const YAML::Node& e : items) {
        for (const std::string& part :
             scenario_schema::split(scalar(e, w, "node indices and ranges (e.g. [0-63])"), ',')) {
          for (int64_t v : parse_node_range(part, w)) job.nodes.push_back(v);
        }
      }
    } else if (const YAML::Node h = j["hosts"]) {
      job.nodes = parse_host_list(scalar(h, where + ": hosts", "a host list (e.g. node[0-63])"),
                                  host_base, where + ": hosts");
    } else {
      throw ConfigError(where + ": nodes: missing (node indices and ranges, e.g. [0-63], or "
                                "hosts: a host list such as node[0-63])");
    }
    if (job.nodes.empty()) throw ConfigError(where + ": nodes: empty");
    std::set<int64_t> seen;
    for (int64_t n : job.nodes) {
      if (!seen.insert(n).second) {
        throw ConfigError(fmt::format("{}: nodes: node {} is given twice", where, n));
      }
      auto [it, fresh] = owner.try_emplace(n, job.name);
      if (!fresh) {
        throw ConfigError(fmt::format("{}: nodes: node {} is job {}'s too (a node runs one job)",
                                      where, n, it->second));
      }
    }
    if (j["iterations"]) job.iterations = integer(j["iterations"], where + ": iterations", 1);
    if (j["start"]) {
      job.start_s = parse_time_s(scalar(j["start"], where + ": start", "a time (e.g. 0s, 250ms)"),
                                 where + ": start");
    }
    p.jobs.push_back(std::move(job));
  }
  const int64_t highest = owner.rbegin()->first;
  if (const YAML::Node n = root["num_nodes"]) {
    p.num_nodes = integer(n, at(origin, n) + ": num_nodes", 1);
    if (highest >= p.num_nodes) {
      const std::string& job = owner.rbegin()->second;
      size_t i = 0;
      while (p.jobs[i].name != job) ++i;
      throw ConfigError(fmt::format(
          "{}:{}: jobs[{}] ({}): nodes: node {} is not in the fabric of num_nodes {} (allowed: 0 "
          "to {})",
          origin, p.jobs[i].line, i, job, highest, p.num_nodes, p.num_nodes - 1));
    }
  } else {
    p.num_nodes = highest + 1;
  }
  return p;
}

Placement load_placement(const std::filesystem::path& file) {
  const std::string text = read_input_file(file, "placement file", kMaxConfigFileBytes);
  Placement p = parse_placement(text, file.string(), file.parent_path());
  p.file = file;
  return p;
}

}  // namespace traintwin
