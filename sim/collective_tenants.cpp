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

constexpr std::array<std::string_view, 5> kTopKeys = {"description", "topology", "num_gpus",
                                                      "routing", "tenants"};
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

const char* to_string(TenantRouting r) {
  return r == TenantRouting::kEcmp ? "ecmp" : "d_mod_k";
}

std::vector<TenantBandwidth> simulate_ring_tenants(const TopologySpec& topo, int64_t num_gpus,
                                                   const std::vector<CollectiveTenant>& tenants,
                                                   TenantRouting routing) {
  check_tenant_rings(tenants, num_gpus, "");
  if (topo.fabric.planes > 1) {
    // The graph's routes take one plane; a ring edge split over two is not modelled here.
    throw ConfigError(fmt::format(
        "topology '{}': fabric.kind {}: ring tenants are timed on one route per ring edge "
        "(allowed: rail_optimized_fat_tree)",
        topo.name, topo.fabric.kind));
  }
  if (topo.has_overrides()) {
    // The graph's routes are the fabric's as wired: no override, no route around a down element.
    throw ConfigError(fmt::format(
        "topology '{}': link_overrides / switch_overrides: ring tenants are timed on the graph's "
        "routes and rates as wired (allowed: a topology without overrides; the replay, "
        "`collective` or `simulate`, honours them)",
        topo.name));
  }
  const ClusterGraph g = build_cluster_graph(topo, num_gpus);
  const FabricPlan& plan = g.plan();
  const bool ecmp = routing == TenantRouting::kEcmp;
  if (ecmp && plan.tiers != 2) {
    throw ConfigError(fmt::format(
        "routing: ecmp is modelled on fabrics of one pod (a leaf's uplinks all to spines); "
        "'{}' of {} GPUs builds {} pods of a three-tier fat tree (allowed: d_mod_k)",
        topo.name, num_gpus, plan.pods));
  }
  // Directed links used by any route, numbered in first-use order.
  std::map<DirectedLink, uint32_t> link_index;
  std::vector<double> capacity_Bps;
  std::vector<std::string> link_name;
  const auto& graph = g.graph();
  auto links_of_path = [&](const std::vector<GraphVertexId>& vertices,
                           const std::vector<int64_t>& cables) {
    std::vector<uint32_t> ids;
    for (size_t h = 0; h + 1 < vertices.size(); ++h) {
      GraphEdgeId e{};
      bool found = false;
      for (auto [it, end] = boost::out_edges(vertices[h], graph); it != end && !found; ++it) {
        if (boost::target(*it, graph) == vertices[h + 1] && graph[*it].cable == cables[h]) {
          e = *it;
          found = true;
        }
      }
      if (!found) throw Error("collective tenants: a route crosses a cable the graph lacks");
      const DirectedLink key{vertices[h], vertices[h + 1], cables[h]};
      auto [at, added] = link_index.emplace(key, static_cast<uint32_t>(capacity_Bps.size()));
      if (added) {
        capacity_Bps.push_back(graph[e].bandwidth_Bps);
        link_name.push_back(
            fmt::format("{}->{}", g.vertex(vertices[h]).name, g.vertex(vertices[h + 1]).name));
      }
      ids.push_back(at->second);
    }
    return ids;
  };
  // Per tenant, per ring edge: the routes it may take (D-mod-K's; under ECMP, one per spine of
  // the pod for an edge that leaves its leaf).
  std::vector<std::vector<std::vector<std::vector<uint32_t>>>> options(tenants.size());
  std::vector<double> alpha_s(tenants.size(), 0.0);
  std::vector<double> bound_Bps(tenants.size(), std::numeric_limits<double>::infinity());
  std::vector<std::pair<size_t, size_t>> hashed;  // (tenant, ring edge) with a choice
  for (size_t i = 0; i < tenants.size(); ++i) {
    const std::vector<int64_t>& ring = tenants[i].ring;
    for (size_t k = 0; k < ring.size(); ++k) {
      const GraphRoute r = route(g, ring[k], ring[(k + 1) % ring.size()]);
      alpha_s[i] = std::max(alpha_s[i], route_latency_s(g, r));
      bound_Bps[i] = std::min(bound_Bps[i], route_bottleneck_Bps(g, r));
      std::vector<int64_t> cables;
      for (const GraphEdgeId& e : r.edges) cables.push_back(g.edge(e).cable);
      auto& edge_options = options[i].emplace_back();
      // NIC -> leaf -> spine -> leaf -> NIC: under ECMP the spine is any of the pod's.
      const bool via_spine = r.vertices.size() == 5 &&
                             g.vertex(r.vertices[2]).kind == VertexKind::kSpine;
      if (!ecmp || !via_spine || plan.spines_per_pod < 2) {
        edge_options.push_back(links_of_path(r.vertices, cables));
        continue;
      }
      const int64_t rail = g.vertex(r.vertices[2]).rail;
      for (int64_t y = 0; y < plan.spines_per_pod; ++y) {
        std::vector<GraphVertexId> v = r.vertices;
        v[2] = g.spine(rail, y);
        edge_options.push_back(links_of_path(v, cables));
      }
      hashed.emplace_back(i, k);
    }
  }
  double outcomes = 1;
  for (size_t h = 0; h < hashed.size(); ++h) outcomes *= static_cast<double>(plan.spines_per_pod);
  if (outcomes > static_cast<double>(kMaxEcmpOutcomes)) {
    throw ConfigError(fmt::format(
        "routing: ecmp: {} ring edges leave their leaf, {} spines each: {:.0f} outcomes, more "
        "than the {} solved (allowed: fewer tenants or ring edges across spines, or d_mod_k)",
        hashed.size(), plan.spines_per_pod, outcomes, kMaxEcmpOutcomes));
  }
  // Every outcome (a spine per hashed edge, as a mixed-radix counter), each equally likely.
  std::vector<size_t> choice(hashed.size(), 0);
  std::vector<double> busbw_sum(tenants.size(), 0.0), rate_sum(tenants.size(), 0.0),
      time_sum(tenants.size(), 0.0);
  std::vector<int64_t> limited(tenants.size(), 0);
  std::vector<std::string> bottleneck(tenants.size());
  std::vector<std::vector<uint32_t>> links_of(tenants.size());
  std::vector<MaxMinFlow> flows(tenants.size());
  std::vector<double> rate_Bps(tenants.size(), 0.0);
  MaxMinScratch scratch;
  const auto n_outcomes = static_cast<int64_t>(outcomes);
  // The hashed edge of each (tenant, ring edge), or -1 where its route is fixed.
  std::vector<std::vector<int64_t>> hashed_of(tenants.size());
  for (size_t i = 0; i < tenants.size(); ++i) hashed_of[i].assign(options[i].size(), -1);
  for (size_t h = 0; h < hashed.size(); ++h) {
    hashed_of[hashed[h].first][hashed[h].second] = static_cast<int64_t>(h);
  }
  std::vector<double> load_Bps(capacity_Bps.size(), 0.0);
  for (int64_t o = 0; o < n_outcomes; ++o) {
    for (size_t i = 0; i < tenants.size(); ++i) {
      links_of[i].clear();
      for (size_t k = 0; k < options[i].size(); ++k) {
        const int64_t h = hashed_of[i][k];
        const std::vector<uint32_t>& path = options[i][k][h < 0 ? 0 : choice[static_cast<size_t>(h)]];
        links_of[i].insert(links_of[i].end(), path.begin(), path.end());
      }
      flows[i] = MaxMinFlow{links_of[i], 1.0, bound_Bps[i]};
    }
    weighted_max_min(flows, capacity_Bps, rate_Bps, scratch);
    // Load per link, to name each tenant's bottleneck: a saturated link it crosses.
    std::fill(load_Bps.begin(), load_Bps.end(), 0.0);
    for (size_t i = 0; i < tenants.size(); ++i) {
      for (uint32_t l : links_of[i]) load_Bps[l] += rate_Bps[i];
    }
    for (size_t i = 0; i < tenants.size(); ++i) {
      const CollectiveTenant& t = tenants[i];
      const auto n = static_cast<int64_t>(t.ring.size());
      const double factor = all_reduce_busbw_factor(n);
      const double time_s = 2.0 * static_cast<double>(n - 1) * alpha_s[i] +
                            factor * static_cast<double>(t.bytes) / rate_Bps[i];
      time_sum[i] += time_s;
      rate_sum[i] += rate_Bps[i];
      busbw_sum[i] += static_cast<double>(t.bytes) / time_s / 1e9 * factor;
      if (rate_Bps[i] < bound_Bps[i] * (1 - 1e-9)) {
        ++limited[i];
        if (!bottleneck[i].empty()) continue;  // named in the first outcome that limited it
        for (uint32_t l : links_of[i]) {
          if (load_Bps[l] < capacity_Bps[l] * (1 - 1e-9)) continue;
          const auto crossings = std::count(links_of[i].begin(), links_of[i].end(), l);
          std::set<std::string> users;
          for (size_t j = 0; j < tenants.size(); ++j) {
            if (std::find(links_of[j].begin(), links_of[j].end(), l) != links_of[j].end()) {
              users.insert(tenants[j].name);
            }
          }
          bottleneck[i] = fmt::format("{} ({} edge{} of its ring; shared with: {})", link_name[l],
                                      crossings, crossings == 1 ? "" : "s", fmt::join(users, ", "));
          break;
        }
      }
    }
    for (size_t h = 0; h < choice.size(); ++h) {  // next outcome
      if (++choice[h] < static_cast<size_t>(plan.spines_per_pod)) break;
      choice[h] = 0;
    }
  }
  std::vector<TenantBandwidth> out;
  const double count = outcomes;
  for (size_t i = 0; i < tenants.size(); ++i) {
    const CollectiveTenant& t = tenants[i];
    TenantBandwidth b;
    b.name = t.name;
    b.gpus = static_cast<int64_t>(t.ring.size());
    b.bytes = t.bytes;
    b.edge_rate_Bps = rate_sum[i] / count;
    b.time_s = time_sum[i] / count;
    b.busbw_GBps = busbw_sum[i] / count;
    b.algbw_GBps = b.busbw_GBps / all_reduce_busbw_factor(b.gpus);
    if (!hashed.empty() && limited[i] > 0) {
      b.bottleneck = fmt::format("ECMP: a link shared with another ring edge in {} of {} hash "
                                 "outcomes, e.g. {}",
                                 limited[i], n_outcomes, bottleneck[i]);
    } else {
      b.bottleneck = bottleneck[i];
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
  if (root["routing"]) {
    const std::string r = root["routing"].IsScalar() ? root["routing"].Scalar() : std::string();
    if (r == "ecmp") {
      f.routing = TenantRouting::kEcmp;
    } else if (r != "d_mod_k") {
      throw ConfigError(fmt::format("{}: routing: '{}' (allowed: d_mod_k, ecmp)",
                                    at(origin, root["routing"]), r));
    }
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
