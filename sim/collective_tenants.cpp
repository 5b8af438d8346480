// Collective tenants; see collective_tenants.hpp.
#include "sim/collective_tenants.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/scenario_text.hpp"
#include "core/units.hpp"
#include "core/yaml_document.hpp"
#include "sim/max_min.hpp"
#include "topologies/graph.hpp"

namespace traintwin {
namespace {

constexpr std::array<std::string_view, 4> kTopKeys = {"description", "topology", "num_gpus",
                                                      "tenants"};
constexpr std::array<std::string_view, 3> kTenantKeys = {"name", "ring", "bytes"};

std::string at(const std::string& origin, const YAML::Node& n) {
  const int line = n.Mark().line;
  return line >= 0 ? fmt::format("{}:{}", origin, line + 1) : origin;
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

int64_t integer(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) throw ConfigError(where + ": must be an integer");
  const std::string text = n.Scalar();
  try {
    size_t used = 0;
    const int64_t v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("{}: '{}' is not an integer", where, text));
}

/// A directed link: a cable (its two vertices and its index among parallel cables) crossed from
/// `from` to `to`.
using DirectedLink = std::tuple<GraphVertexId, GraphVertexId, int64_t>;

}  // namespace

double all_reduce_busbw_factor(int64_t n) {
  return 2.0 * static_cast<double>(n - 1) / static_cast<double>(n);
}

void check_tenant_rings(const std::vector<CollectiveTenant>& tenants, int64_t num_gpus,
                        const std::string& where) {
  const std::string prefix = where.empty() ? std::string() : where + ": ";
  for (size_t i = 0; i < tenants.size(); ++i) {
    const CollectiveTenant& t = tenants[i];
    const std::string who = fmt::format("{}tenants[{}] ({})", prefix, i, t.name);
    if (t.ring.size() < 2) {
      throw ConfigError(fmt::format("{}: ring: {} GPU(s) (allowed: a list of 2 or more distinct "
                                    "GPU indices in ring order)", who, t.ring.size()));
    }
    std::set<int64_t> seen;
    for (int64_t gpu : t.ring) {
      if (gpu < 0 || gpu >= num_gpus) {
        throw ConfigError(fmt::format("{}: ring: GPU {} is outside the fabric (allowed: 0 .. {})",
                                      who, gpu, num_gpus - 1));
      }
      if (!seen.insert(gpu).second) {
        throw ConfigError(fmt::format("{}: ring: GPU {} is given twice (a ring visits each GPU "
                                      "once)", who, gpu));
      }
    }
    if (t.bytes <= 0) {
      throw ConfigError(fmt::format("{}: bytes: {} (allowed: > 0)", who, t.bytes));
    }
  }
}

std::vector<TenantBandwidth> simulate_ring_tenants(const TopologySpec& topo, int64_t num_gpus,
                                                   const std::vector<CollectiveTenant>& tenants) {
  check_tenant_rings(tenants, num_gpus, "");
  const ClusterGraph g = build_cluster_graph(topo, num_gpus);
  // Directed links used by any tenant, numbered in first-use order.
  std::map<DirectedLink, uint32_t> link_index;
  std::vector<double> capacity_Bps;
  std::vector<std::string> link_name;
  std::vector<std::vector<uint32_t>> links_of(tenants.size());  // per tenant, once per ring edge
  std::vector<double> alpha_s(tenants.size(), 0.0);
  std::vector<double> bound_Bps(tenants.size(), std::numeric_limits<double>::infinity());
  for (size_t i = 0; i < tenants.size(); ++i) {
    const std::vector<int64_t>& ring = tenants[i].ring;
    for (size_t k = 0; k < ring.size(); ++k) {
      const GraphRoute r = route(g, ring[k], ring[(k + 1) % ring.size()]);
      alpha_s[i] = std::max(alpha_s[i], route_latency_s(g, r));
      for (size_t h = 0; h < r.edges.size(); ++h) {
        const GraphEdge& e = g.edge(r.edges[h]);
        const DirectedLink key{r.vertices[h], r.vertices[h + 1], e.cable};
        auto [it, added] = link_index.emplace(key, static_cast<uint32_t>(capacity_Bps.size()));
        if (added) {
          capacity_Bps.push_back(e.bandwidth_Bps);
          link_name.push_back(fmt::format("{}->{}", g.vertex(r.vertices[h]).name,
                                          g.vertex(r.vertices[h + 1]).name));
        }
        links_of[i].push_back(it->second);
        bound_Bps[i] = std::min(bound_Bps[i], e.bandwidth_Bps);
      }
    }
  }
  std::vector<MaxMinFlow> flows(tenants.size());
  for (size_t i = 0; i < tenants.size(); ++i) {
    flows[i] = MaxMinFlow{links_of[i], 1.0, bound_Bps[i]};
  }
  std::vector<double> rate_Bps(tenants.size(), 0.0);
  MaxMinScratch scratch;
  weighted_max_min(flows, capacity_Bps, rate_Bps, scratch);

  // Load per link, to name each tenant's bottleneck: a saturated link it crosses.
  std::vector<double> load_Bps(capacity_Bps.size(), 0.0);
  std::vector<std::set<std::string>> users(capacity_Bps.size());
  for (size_t i = 0; i < tenants.size(); ++i) {
    for (uint32_t l : links_of[i]) {
      load_Bps[l] += rate_Bps[i];
      users[l].insert(tenants[i].name);
    }
  }
  std::vector<TenantBandwidth> out;
  for (size_t i = 0; i < tenants.size(); ++i) {
    const CollectiveTenant& t = tenants[i];
    const auto n = static_cast<int64_t>(t.ring.size());
    TenantBandwidth b;
    b.name = t.name;
    b.gpus = n;
    b.bytes = t.bytes;
    b.edge_rate_Bps = rate_Bps[i];
    const double factor = all_reduce_busbw_factor(n);
    b.time_s = 2.0 * static_cast<double>(n - 1) * alpha_s[i] +
               factor * static_cast<double>(t.bytes) / rate_Bps[i];
    b.algbw_GBps = static_cast<double>(t.bytes) / b.time_s / 1e9;
    b.busbw_GBps = b.algbw_GBps * factor;
    if (rate_Bps[i] < bound_Bps[i] * (1 - 1e-9)) {
      for (uint32_t l : links_of[i]) {
        if (load_Bps[l] < capacity_Bps[l] * (1 - 1e-9)) continue;
        const auto crossings = std::count(links_of[i].begin(), links_of[i].end(), l);
        b.bottleneck = fmt::format("{} ({} edge{} of its ring; shared with: {})", link_name[l],
                                   crossings, crossings == 1 ? "" : "s", fmt::join(users[l], ", "));
        break;
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

TenantsFile parse_tenants(const std::string& yaml_text, const std::string& origin,
                          const std::filesystem::path& base_dir) {
  const YAML::Node root = load_single_yaml_document(yaml_text, origin, "tenants file");
  if (!root.IsMap()) {
    throw ConfigError(origin + ": a tenants file is a mapping with topology, num_gpus and tenants");
  }
  check_keys(root, origin, "", kTopKeys);
  TenantsFile f;
  if (!root["topology"] || !root["topology"].IsScalar()) {
    throw ConfigError(origin + ": topology: missing (the topology file, relative to this file)");
  }
  f.topology_file = base_dir / root["topology"].Scalar();
  if (!root["num_gpus"]) throw ConfigError(origin + ": num_gpus: missing (GPUs of the fabric)");
  f.num_gpus = integer(root["num_gpus"], at(origin, root["num_gpus"]) + ": num_gpus");
  if (f.num_gpus < 2) {
    throw ConfigError(fmt::format("{}: num_gpus: {} (allowed: >= 2)", at(origin, root["num_gpus"]),
                                  f.num_gpus));
  }
  const YAML::Node list = root["tenants"];
  if (!list || !list.IsSequence() || list.size() == 0) {
    throw ConfigError(origin + ": tenants: missing or empty (a list of {name, ring, bytes})");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node t = list[i];
    const std::string where = fmt::format("{}: tenants[{}]", at(origin, t), i);
    if (!t.IsMap()) throw ConfigError(where + ": must be a mapping (name, ring, bytes)");
    check_keys(t, origin, fmt::format("tenants[{}].", i), kTenantKeys);
    for (const char* key : {"name", "ring", "bytes"}) {
      if (!t[key]) throw ConfigError(fmt::format("{}: {}: missing", where, key));
    }
    CollectiveTenant c;
    if (!t["name"].IsScalar()) throw ConfigError(where + ": name: must be text");
    c.name = t["name"].Scalar();
    if (!names.insert(c.name).second) {
      throw ConfigError(fmt::format("{}: name: '{}' is given twice (tenant names are unique)",
                                    where, c.name));
    }
    if (!t["ring"].IsSequence()) {
      throw ConfigError(where + ": ring: must be a list of GPU indices in ring order");
    }
    for (size_t k = 0; k < t["ring"].size(); ++k) {
      c.ring.push_back(integer(t["ring"][k], fmt::format("{}: ring[{}]", where, k)));
    }
    if (!t["bytes"].IsScalar()) throw ConfigError(where + ": bytes: must be a size such as 128MiB");
    const double bytes = parse_bytes(t["bytes"].Scalar(), where + ": bytes");
    c.bytes = static_cast<int64_t>(std::llround(bytes));
    f.tenants.push_back(std::move(c));
  }
  check_tenant_rings(f.tenants, f.num_gpus, origin);
  return f;
}

TenantsFile load_tenants(const std::filesystem::path& file) {
  const std::string text = read_input_file(file, "tenants file", kMaxConfigFileBytes);
  TenantsFile f = parse_tenants(text, file.string(), file.parent_path());
  f.file = file;
  return f;
}

}  // namespace traintwin
