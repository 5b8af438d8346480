// The cluster graph: wiring plan, construction, checks, routes, counts and bisection bandwidth.
// See topologies/graph.hpp.
#include "topologies/graph.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/connected_components.hpp>
#include <boost/graph/visitors.hpp>
#include <limits>
#include <utility>

#include "core/error.hpp"
#include "core/units.hpp"

namespace traintwin {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The largest divisor of `n` (>= 1) that is <= `limit`; 1 when none is.
int64_t largest_divisor_at_most(int64_t n, int64_t limit) {
  for (int64_t d = std::min(n, limit); d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

/// Checks the TopologySpec fields the plan relies on; the loader enforces the same rules, but a
/// spec can be built in code.
void check_spec(const TopologySpec& t) {
  const auto fail = [&](const std::string& what) {
    throw ConfigError(fmt::format("topology '{}': {}", t.name, what));
  };
  const FabricSpec& f = t.fabric;
  if (t.node.gpus_per_node < 1) {
    fail(fmt::format("node.gpus_per_node = {} (allowed: >= 1)", t.node.gpus_per_node));
  }
  if (t.nic.nics_per_node < 1 || t.node.gpus_per_node % t.nic.nics_per_node != 0) {
    fail(fmt::format("nic.nics_per_node = {} (allowed: a divisor of node.gpus_per_node = {})",
                     t.nic.nics_per_node, t.node.gpus_per_node));
  }
  const int64_t planes = f.kind == "dual_plane_rail_fat_tree" ? 2 : 1;
  if ((f.kind != "rail_optimized_fat_tree" && planes == 1) || f.planes != planes) {
    fail(fmt::format("fabric.kind = \"{}\" with {} planes (allowed: rail_optimized_fat_tree with "
                     "1, dual_plane_rail_fat_tree with 2)",
                     f.kind, f.planes));
  }
  if (f.tiers != 2 && f.tiers != 3) {
    fail(fmt::format("fabric.tiers = {} (allowed: 2, 3)", f.tiers));
  }
  if (f.switch_radix < 2 || (f.tiers == 3 && f.switch_radix % 2 != 0)) {
    fail(fmt::format("fabric.switch_radix = {} (allowed: >= 2, even with three tiers)",
                     f.switch_radix));
  }
  if (f.oversubscription_down < 1 || f.oversubscription_up < 1) {
    fail(fmt::format("fabric.oversubscription = {}:{} (allowed: positive integers down:up)",
                     f.oversubscription_down, f.oversubscription_up));
  }
  if (f.spine_oversubscription_down < 1 || f.spine_oversubscription_up < 1) {
    fail(fmt::format("fabric.spine_oversubscription = {}:{} (allowed: positive integers down:up)",
                     f.spine_oversubscription_down, f.spine_oversubscription_up));
  }
  if (f.tiers != 3 && (f.spine_oversubscription_down != 1 || f.spine_oversubscription_up != 1)) {
    fail(fmt::format("fabric.spine_oversubscription = {}:{} with {} tiers (allowed: three tiers)",
                     f.spine_oversubscription_down, f.spine_oversubscription_up, f.tiers));
  }
  if (t.node.domain_gpus() < t.node.gpus_per_node ||
      t.node.domain_gpus() % t.node.tray_gpus() != 0 ||
      t.node.gpus_per_node % t.node.tray_gpus() != 0) {
    fail(
        fmt::format("node: {} GPUs used of an NVLink domain of {} in trays of {} (allowed: "
                    "whole trays, at most the domain)",
                    t.node.gpus_per_node, t.node.domain_gpus(), t.node.tray_gpus()));
  }
  // One leaf per rail of the whole domain (the spare GPUs' rails exist but are not built).
  if (f.leaf_switches_per_scalable_unit != fabric_rails(t) * planes) {
    fail(fmt::format(
        "fabric.leaf_switches_per_scalable_unit = {}, but a rail-optimized fabric has one leaf "
        "per rail{} (allowed: nic.nics_per_node{} = {})",
        f.leaf_switches_per_scalable_unit, planes > 1 ? " and plane" : "",
        planes > 1 ? " x 2 planes" : "", fabric_rails(t) * planes));
  }
  const int64_t down = leaf_down_ports(f);
  if (f.nodes_per_scalable_unit < 1 || f.nodes_per_scalable_unit > down) {
    fail(fmt::format(
        "fabric.nodes_per_scalable_unit = {} does not fit a leaf with {} ports toward nodes "
        "(radix {}, oversubscription {}:{}) (allowed: 1 to {})",
        f.nodes_per_scalable_unit, down, f.switch_radix, f.oversubscription_down,
        f.oversubscription_up, down));
  }
  const int64_t up =
      ceil_div(f.nodes_per_scalable_unit * f.oversubscription_up, f.oversubscription_down);
  if (f.nodes_per_scalable_unit + up > f.switch_radix) {
    fail(fmt::format("a leaf needs {} ports down and {} up for {}:{}, more than its radix {}",
                     f.nodes_per_scalable_unit, up, f.oversubscription_down, f.oversubscription_up,
                     f.switch_radix));
  }
  const std::pair<const char*, double> positive[] = {
      {"node.nvlink_bandwidth", t.node.nvlink_bandwidth_Bps},
      {"nic.line_rate", t.nic.line_rate_Bps},
      {"fabric.link_rate", f.link_rate_Bps}};
  for (const auto& [key, value] : positive) {
    if (!(value > 0)) fail(fmt::format("{} = {} B/s (allowed: > 0)", key, value));
  }
  const std::pair<const char*, double> non_negative[] = {
      {"node.nvlink_latency", t.node.nvlink_latency_s},
      {"nic.latency", t.nic.latency_s},
      {"fabric.hop_latency", f.hop_latency_s}};
  for (const auto& [key, value] : non_negative) {
    if (!(value >= 0)) fail(fmt::format("{} = {} s (allowed: >= 0)", key, value));
  }
}

/// The edge between `from` and `to` with parallel-cable index `cable`; InvalidArgument if absent
/// (a graph broken after validation).
GraphEdgeId find_cable(const ClusterGraph& g, GraphVertexId from, GraphVertexId to, int64_t cable) {
  const auto& graph = g.graph();
  for (auto [e, end] = boost::out_edges(from, graph); e != end; ++e) {
    if (boost::target(*e, graph) == to && graph[*e].cable == cable) return *e;
  }
  throw InvalidArgument(fmt::format("cluster graph: no cable #{} between '{}' and '{}'", cable,
                                    graph[from].name, graph[to].name));
}

/// Whether switch/NIC vertex `v` of the destination's rail has node `dst_node` below it.
bool contains_node(const ClusterGraph& g, const GraphVertex& v, int64_t dst_node) {
  const FabricPlan& p = g.plan();
  const int64_t su = dst_node / p.nodes_per_leaf;
  switch (v.kind) {
    case VertexKind::kNic:
      return v.node == dst_node;
    case VertexKind::kLeaf:
      return v.index == su;
    case VertexKind::kSpine:
      return v.pod == su / p.leaves_per_pod;
    case VertexKind::kCore:
      return true;
    default:
      return false;
  }
}

/// Appends the hop `from` -> `to` over cable `cable` to `r`.
void step(const ClusterGraph& g, GraphRoute& r, GraphVertexId to, int64_t cable) {
  r.edges.push_back(find_cable(g, r.vertices.back(), to, cable));
  r.vertices.push_back(to);
}

/// "1 cable", "8 cables", "1 leaf", "7 leaves".
std::string plural(int64_t n, const char* one, const char* many = nullptr) {
  if (n == 1) return fmt::format("1 {}", one);
  return many != nullptr ? fmt::format("{} {}", n, many) : fmt::format("{} {}s", n, one);
}

std::string percent(double part, double whole) {
  return whole > 0 ? fmt::format("{:.0f}%", 100.0 * part / whole) : std::string("-");
}

}  // namespace

const char* to_string(VertexKind kind) {
  switch (kind) {
    case VertexKind::kGpu:
      return "gpu";
    case VertexKind::kNvSwitch:
      return "nvswitch";
    case VertexKind::kNic:
      return "nic";
    case VertexKind::kLeaf:
      return "leaf";
    case VertexKind::kSpine:
      return "spine";
    case VertexKind::kCore:
      return "core";
  }
  return "?";
}

const char* to_string(LinkTier tier) {
  switch (tier) {
    case LinkTier::kNvlink:
      return "nvlink";
    case LinkTier::kPcie:
      return "pcie";
    case LinkTier::kNic:
      return "nic";
    case LinkTier::kLeafSpine:
      return "leaf-spine";
    case LinkTier::kSpineCore:
      return "spine-core";
  }
  return "?";
}

std::vector<int64_t> FabricPlan::xgft_down() const {
  if (tiers == 2) return {nodes_per_leaf, leaves_per_pod};
  return {nodes_per_leaf, leaves_per_pod, pods};
}

std::vector<int64_t> FabricPlan::xgft_up() const {
  if (tiers == 2) return {1, spines_per_pod};
  return {1, spines_per_pod, cores_per_spine};
}

std::vector<int64_t> FabricPlan::xgft_cables() const {
  if (tiers == 2) return {1, cables_leaf_spine};
  return {1, cables_leaf_spine, cables_spine_core};
}

FabricPlan plan_fabric(const TopologySpec& t, int64_t num_gpus) {
  check_spec(t);
  check_cluster_size(t, num_gpus);
  const FabricSpec& f = t.fabric;
  FabricPlan p;
  p.num_gpus = num_gpus;
  p.gpus_per_node = t.node.gpus_per_node;
  p.num_nodes = num_gpus / p.gpus_per_node;
  p.planes = f.planes;
  p.rails = t.nic.nics_per_node * f.planes;
  p.tiers = f.tiers;
  p.radix = f.switch_radix;
  p.nodes_per_leaf = f.nodes_per_scalable_unit;
  p.leaf_uplinks = ceil_div(p.nodes_per_leaf * f.oversubscription_up, f.oversubscription_down);
  p.leaves_per_rail = ceil_div(p.num_nodes, p.nodes_per_leaf);
  const int64_t k = p.radix;
  const int64_t s = p.leaves_per_rail;
  const int64_t u = p.leaf_uplinks;
  // A three-tier fabric whose leaves all fit one pod is built without its (idle) core tier.
  if (p.tiers == 3 && s <= k / 2) p.tiers = 2;
  if (p.tiers == 2) {
    if (s > k) {  // unreachable after check_cluster_size (at most k leaves for all rails)
      throw ConfigError(
          fmt::format("topology '{}': {} leaves per rail exceed the {} ports of a two-tier spine",
                      t.name, s, k));
    }
    p.pods = 1;
    p.leaves_per_pod = s;
    // One cable per leaf-spine pair (u spines): the same capacity as bundles of parallel cables,
    // and SimGrid's D-mod-K routing spreads flows over spines but not over parallel cables.
    p.cables_leaf_spine = 1;
    p.spines_per_pod = u;
  } else {
    const int64_t half = k / 2;
    p.pods = ceil_div(s, half);
    p.leaves_per_pod = ceil_div(s, p.pods);
    if (p.pods > k) {  // unreachable after check_cluster_size
      throw ConfigError(
          fmt::format("topology '{}': {} pods per rail exceed the {} ports of a core switch",
                      t.name, p.pods, k));
    }
    p.cables_leaf_spine = 1;  // as above: no parallel leaf-spine cables
    p.spines_per_pod = u;
    // Spine-core cables are bundled (a core of radix k serves k / pods cables of each spine
    // position), else a two-pod fabric would need a core switch per cable. SimGrid's down-path
    // choice among bundled cables can collide for cross-pod traffic (graph.hpp). A spine has
    // as many cables up as down (a), or ceil(a x up / down) under fabric.spine_oversubscription.
    const int64_t spine_up = ceil_div(p.leaves_per_pod * f.spine_oversubscription_up,
                                      f.spine_oversubscription_down);
    if (p.leaves_per_pod + spine_up > k) {
      throw ConfigError(fmt::format(
          "topology '{}': fabric.spine_oversubscription {}:{} gives a spine {} cables down and {} "
          "up, more than its radix {}",
          t.name, f.spine_oversubscription_down, f.spine_oversubscription_up, p.leaves_per_pod,
          spine_up, k));
    }
    p.cables_spine_core = largest_divisor_at_most(spine_up, k / p.pods);
    p.cores_per_spine = spine_up / p.cables_spine_core;
  }
  return p;
}

std::string FabricPlan::rail_label(int64_t f) const {
  return planes == 1 ? std::to_string(f) : fmt::format("{}-plane{}", f / planes, f % planes);
}

int64_t rail_of_gpu(const TopologySpec& t, int64_t gpu) {
  const int64_t g = t.node.gpus_per_node;
  return (gpu % g) * t.nic.nics_per_node / g;
}

// --- ClusterGraph -------------------------------------------------------------------------------

GraphVertexId ClusterGraph::gpu(int64_t gpu) const { return static_cast<GraphVertexId>(gpu); }

GraphVertexId ClusterGraph::nvswitch(int64_t node) const {
  return static_cast<GraphVertexId>(plan_.num_gpus + node);
}

GraphVertexId ClusterGraph::nic(int64_t node, int64_t rail) const {
  return static_cast<GraphVertexId>(plan_.num_gpus + plan_.num_nodes + node * plan_.rails + rail);
}

GraphVertexId ClusterGraph::leaf(int64_t rail, int64_t su) const {
  const int64_t base = plan_.num_gpus + plan_.num_nodes * (1 + plan_.rails);
  return static_cast<GraphVertexId>(base + rail * plan_.leaves_per_rail + su);
}

GraphVertexId ClusterGraph::spine(int64_t rail, int64_t index) const {
  const int64_t base =
      plan_.num_gpus + plan_.num_nodes * (1 + plan_.rails) + plan_.rails * plan_.leaves_per_rail;
  return static_cast<GraphVertexId>(base + rail * plan_.spines_per_rail() + index);
}

GraphVertexId ClusterGraph::core(int64_t rail, int64_t index) const {
  const int64_t base = plan_.num_gpus + plan_.num_nodes * (1 + plan_.rails) +
                       plan_.rails * (plan_.leaves_per_rail + plan_.spines_per_rail());
  return static_cast<GraphVertexId>(base + rail * plan_.cores_per_rail() + index);
}

ClusterGraph::ClusterGraph(TopologySpec topology, FabricPlan plan)
    : topology_(std::move(topology)), plan_(std::move(plan)) {
  const FabricPlan& p = plan_;
  const TopologySpec& t = topology_;
  const int64_t num_vertices =
      p.num_gpus + p.num_nodes * (1 + p.rails) +
      p.rails * (p.leaves_per_rail + p.spines_per_rail() + p.cores_per_rail());
  graph_ = Graph(static_cast<size_t>(num_vertices));
  const auto set = [&](GraphVertexId v, VertexKind kind, std::string name, int64_t node,
                       int64_t rail, int64_t index, int64_t pod) {
    graph_[v] = GraphVertex{kind, std::move(name), node, rail, index, pod};
  };
  for (int64_t node = 0; node < p.num_nodes; ++node) {
    for (int64_t j = 0; j < p.gpus_per_node; ++j) {
      set(gpu(node * p.gpus_per_node + j), VertexKind::kGpu, fmt::format("node{}-gpu{}", node, j),
          node, -1, j, -1);
    }
    set(nvswitch(node), VertexKind::kNvSwitch, fmt::format("node{}-nvswitch", node), node, -1, -1,
        -1);
    for (int64_t r = 0; r < p.rails; ++r) {
      set(nic(node, r), VertexKind::kNic, fmt::format("node{}-nic{}", node, p.rail_label(r)),
          node, r, r, -1);
    }
  }
  for (int64_t r = 0; r < p.rails; ++r) {
    for (int64_t l = 0; l < p.leaves_per_rail; ++l) {
      set(leaf(r, l), VertexKind::kLeaf, fmt::format("rail{}-leaf{}", p.rail_label(r), l), -1, r, l,
          l / p.leaves_per_pod);
    }
    for (int64_t s = 0; s < p.spines_per_rail(); ++s) {
      set(spine(r, s), VertexKind::kSpine, fmt::format("rail{}-spine{}", p.rail_label(r), s), -1,
          r, s,
          s / p.spines_per_pod);
    }
    for (int64_t c = 0; c < p.cores_per_rail(); ++c) {
      set(core(r, c), VertexKind::kCore, fmt::format("rail{}-core{}", p.rail_label(r), c), -1, r,
          c, -1);
    }
  }

  const double link_Bps = t.fabric.link_rate_Bps;
  const double hop_s = t.fabric.hop_latency_s;
  const auto add = [&](GraphVertexId a, GraphVertexId b, LinkTier tier, double bw, double lat,
                       int64_t cable) {
    boost::add_edge(a, b, GraphEdge{tier, bw, lat, cable}, graph_);
  };
  // Each node's own NVLink domain and NICs (a mixed cluster's node groups).
  for (int64_t node = 0; node < p.num_nodes; ++node) {
    const NodeSpec& domain = node_spec_of(t, node);
    // A NIC port: the NIC's line rate over its planes.
    const double nic_Bps = nic_spec_of(t, node).line_rate_Bps / static_cast<double>(p.planes);
    for (int64_t j = 0; j < p.gpus_per_node; ++j) {
      const int64_t g = node * p.gpus_per_node + j;
      add(gpu(g), nvswitch(node), LinkTier::kNvlink, domain.nvlink_bandwidth_Bps,
          domain.nvlink_latency_s / 2, 0);
    }
    for (int64_t j = 0; j < p.gpus_per_node; ++j) {
      const int64_t g = node * p.gpus_per_node + j;
      for (int64_t plane = 0; plane < p.planes; ++plane) {
        add(gpu(g), nic(node, rail_of_gpu(t, g) * p.planes + plane), LinkTier::kPcie, nic_Bps, 0.0,
            0);
      }
    }
  }
  for (int64_t r = 0; r < p.rails; ++r) {
    for (int64_t node = 0; node < p.num_nodes; ++node) {
      const NicSpec& node_nic = nic_spec_of(t, node);
      add(nic(node, r), leaf(r, node / p.nodes_per_leaf), LinkTier::kNic,
          node_nic.line_rate_Bps / static_cast<double>(p.planes), node_nic.latency_s + hop_s / 2,
          0);
    }
    for (int64_t l = 0; l < p.leaves_per_rail; ++l) {
      const int64_t pod = l / p.leaves_per_pod;
      for (int64_t y = 0; y < p.spines_per_pod; ++y) {
        for (int64_t c = 0; c < p.cables_leaf_spine; ++c) {
          add(leaf(r, l), spine(r, y + p.spines_per_pod * pod), LinkTier::kLeafSpine, link_Bps,
              hop_s, c);
        }
      }
    }
    for (int64_t s = 0; s < p.spines_per_rail(); ++s) {
      const int64_t y = s % p.spines_per_pod;
      for (int64_t z = 0; z < p.cores_per_spine; ++z) {
        for (int64_t c = 0; c < p.cables_spine_core; ++c) {
          add(spine(r, s), core(r, y + p.spines_per_pod * z), LinkTier::kSpineCore, link_Bps, hop_s,
              c);
        }
      }
    }
  }
}

ClusterGraph build_cluster_graph(const TopologySpec& topology, int64_t num_gpus) {
  FabricPlan plan = plan_fabric(topology, num_gpus);
  ClusterGraph g(topology, std::move(plan));
  validate_cluster_graph(g);
  return g;
}

void validate_cluster_graph(const ClusterGraph& g) {
  const auto& graph = g.graph();
  const FabricPlan& p = g.plan();
  const std::string who =
      fmt::format("cluster graph of '{}' ({} GPUs)", g.topology().name, p.num_gpus);
  const size_t n = boost::num_vertices(graph);
  if (n == 0) throw ConfigError(who + ": has no vertices");

  std::vector<int> component(n);
  const int parts = boost::connected_components(graph, component.data());
  if (parts != 1) {
    size_t lost = 0;
    while (lost < n && component[lost] == component[0]) ++lost;
    throw ConfigError(fmt::format("{}: disconnected into {} parts: '{}' cannot reach '{}'", who,
                                  parts, graph[lost].name, graph[0].name));
  }

  std::vector<int64_t> nics_seen(static_cast<size_t>(p.num_nodes * p.rails), 0);
  for (GraphVertexId v = 0; v < n; ++v) {
    const GraphVertex& x = graph[v];
    if (x.kind == VertexKind::kGpu) {
      int64_t nvlinks = 0;
      for (auto [e, end] = boost::out_edges(v, graph); e != end; ++e) {
        if (graph[*e].tier != LinkTier::kNvlink) continue;
        const GraphVertex& other = graph[boost::target(*e, graph)];
        if (other.kind == VertexKind::kNvSwitch && other.node == x.node) ++nvlinks;
      }
      if (nvlinks != 1) {
        throw ConfigError(
            fmt::format("{}: GPU '{}' has {} NVLink cables to its node's NVSwitch "
                        "'node{}-nvswitch' (expected 1)",
                        who, x.name, nvlinks, x.node));
      }
    }
    if (x.kind != VertexKind::kNic) continue;
    if (x.node < 0 || x.node >= p.num_nodes || x.rail < 0 || x.rail >= p.rails) {
      throw ConfigError(
          fmt::format("{}: NIC '{}' belongs to no node/rail of the cluster (node {}, "
                      "rail {})",
                      who, x.name, x.node, x.rail));
    }
    ++nics_seen[static_cast<size_t>(x.node * p.rails + x.rail)];
    const int64_t su = x.node / p.nodes_per_leaf;
    const std::string expected = fmt::format("rail{}-leaf{}", p.rail_label(x.rail), su);
    std::vector<std::string> leaves;
    bool right = false;
    for (auto [e, end] = boost::out_edges(v, graph); e != end; ++e) {
      if (graph[*e].tier != LinkTier::kNic) continue;
      const GraphVertex& other = graph[boost::target(*e, graph)];
      leaves.push_back(other.name);
      right = other.kind == VertexKind::kLeaf && other.rail == x.rail && other.index == su;
    }
    if (leaves.size() != 1 || !right) {
      std::string found;
      for (const std::string& l : leaves) found += (found.empty() ? "'" : ", '") + l + "'";
      throw ConfigError(fmt::format(
          "{}: NIC '{}' is cabled to {}; a rail-optimized fabric puts NIC {} of every node of "
          "scalable unit {} on one leaf, '{}'",
          who, x.name, found.empty() ? std::string("no leaf") : found, x.rail, su, expected));
    }
  }
  for (int64_t node = 0; node < p.num_nodes; ++node) {
    for (int64_t r = 0; r < p.rails; ++r) {
      const int64_t seen = nics_seen[static_cast<size_t>(node * p.rails + r)];
      if (seen != 1) {
        throw ConfigError(
            fmt::format("{}: node {} has {} NICs on rail {} (expected one NIC per rail, {} rails)",
                        who, node, seen, r, p.rails));
      }
    }
  }
}

// --- routes -------------------------------------------------------------------------------------

GraphRoute route(const ClusterGraph& g, int64_t src, int64_t dst) {
  const FabricPlan& p = g.plan();
  if (src < 0 || src >= p.num_gpus || dst < 0 || dst >= p.num_gpus) {
    throw InvalidArgument(fmt::format("route: GPU {} -> {} outside [0, {})", src, dst, p.num_gpus));
  }
  if (src == dst) throw InvalidArgument(fmt::format("route: GPU {} to itself", src));
  const auto& graph = g.graph();
  const int64_t src_node = src / p.gpus_per_node;
  const int64_t dst_node = dst / p.gpus_per_node;
  GraphRoute r;
  if (src_node == dst_node) {
    r.vertices.push_back(g.gpu(src));
    step(g, r, g.nvswitch(src_node), 0);
    step(g, r, g.gpu(dst), 0);
    return r;
  }
  // Plane 0 of the sender's rail (the replay splits a transfer over every plane that is up).
  const int64_t rail = rail_of_gpu(g.topology(), src) * p.planes;
  const int64_t dst_su = dst_node / p.nodes_per_leaf;
  const int64_t dst_pod = dst_su / p.leaves_per_pod;
  r.vertices.push_back(g.nic(src_node, rail));
  // Up to the nearest common ancestor, D-mod-K on the destination node.
  while (!contains_node(g, graph[r.vertices.back()], dst_node)) {
    const GraphVertex& at = graph[r.vertices.back()];
    switch (at.kind) {
      case VertexKind::kNic:
        step(g, r, g.leaf(rail, src_node / p.nodes_per_leaf), 0);
        break;
      case VertexKind::kLeaf: {
        const int64_t d = dst_node % (p.spines_per_pod * p.cables_leaf_spine);
        step(g, r, g.spine(rail, d % p.spines_per_pod + p.spines_per_pod * at.pod),
             d / p.spines_per_pod);
        break;
      }
      case VertexKind::kSpine: {
        const int64_t d = dst_node / p.spines_per_pod % (p.cores_per_spine * p.cables_spine_core);
        const int64_t y = at.index % p.spines_per_pod;
        step(g, r, g.core(rail, y + p.spines_per_pod * (d % p.cores_per_spine)),
             d / p.cores_per_spine);
        break;
      }
      default:
        throw InvalidArgument(fmt::format("route: no way up from '{}'", at.name));
    }
  }
  // Down to the destination NIC; parallel cables chosen by the source node.
  const GraphVertexId target = g.nic(dst_node, rail);
  while (r.vertices.back() != target) {
    const GraphVertex& at = graph[r.vertices.back()];
    switch (at.kind) {
      case VertexKind::kCore:
        step(g, r, g.spine(rail, at.index % p.spines_per_pod + p.spines_per_pod * dst_pod),
             src_node % p.cables_spine_core);
        break;
      case VertexKind::kSpine:
        step(g, r, g.leaf(rail, dst_su), src_node % p.cables_leaf_spine);
        break;
      case VertexKind::kLeaf:
        step(g, r, target, 0);
        break;
      default:
        throw InvalidArgument(fmt::format("route: no way down from '{}'", at.name));
    }
  }
  return r;
}

double route_latency_s(const ClusterGraph& g, const GraphRoute& r) {
  double sum = 0;
  for (const GraphEdgeId& e : r.edges) sum += g.edge(e).latency_s;
  return sum;
}

double route_bottleneck_Bps(const ClusterGraph& g, const GraphRoute& r) {
  double least = std::numeric_limits<double>::infinity();
  for (const GraphEdgeId& e : r.edges) least = std::min(least, g.edge(e).bandwidth_Bps);
  return least;
}

int64_t shortest_hops(const ClusterGraph& g, GraphVertexId from, GraphVertexId to) {
  const auto& graph = g.graph();
  std::vector<int64_t> distance(boost::num_vertices(graph), -1);
  distance[from] = 0;
  boost::breadth_first_search(graph, from,
                              boost::visitor(boost::make_bfs_visitor(boost::record_distances(
                                  boost::make_iterator_property_map(
                                      distance.begin(), boost::get(boost::vertex_index, graph)),
                                  boost::on_tree_edge()))));
  return distance[to];
}

// --- counts, bisection, summary -----------------------------------------------------------------

GraphCounts count_graph(const ClusterGraph& g) {
  const auto& graph = g.graph();
  GraphCounts c;
  c.nodes = g.plan().num_nodes;
  for (auto [v, end] = boost::vertices(graph); v != end; ++v) {
    switch (graph[*v].kind) {
      case VertexKind::kGpu:
        ++c.gpus;
        break;
      case VertexKind::kNvSwitch:
        ++c.nvswitches;
        break;
      case VertexKind::kNic:
        ++c.nics;
        break;
      case VertexKind::kLeaf:
        ++c.leaves;
        break;
      case VertexKind::kSpine:
        ++c.spines;
        break;
      case VertexKind::kCore:
        ++c.cores;
        break;
    }
  }
  c.tiers.resize(kNumLinkTiers);
  for (int i = 0; i < kNumLinkTiers; ++i) c.tiers[static_cast<size_t>(i)].tier = LinkTier(i);
  for (auto [e, end] = boost::edges(graph); e != end; ++e) {
    const GraphEdge& x = graph[*e];
    TierSummary& s = c.tiers[static_cast<size_t>(x.tier)];
    ++s.links;
    s.bandwidth_Bps += x.bandwidth_Bps;
    s.link_bandwidth_Bps = std::max(s.link_bandwidth_Bps, x.bandwidth_Bps);
  }
  return c;
}

namespace {
/// Line rate of one NIC of each of nodes 0 .. half-1, summed (each node's own: nic_spec_of).
double first_half_nic_Bps(const TopologySpec& t, int64_t half) {
  double sum = 0;
  for (int64_t node = 0; node < half; ++node) sum += nic_spec_of(t, node).line_rate_Bps;
  return sum;
}
}  // namespace

double bisection_bandwidth_Bps(const ClusterGraph& g) {
  const FabricPlan& p = g.plan();
  const TopologySpec& t = g.topology();
  const double link_Bps = t.fabric.link_rate_Bps;
  const int64_t half = p.num_nodes / 2;
  if (half == 0) return 0;
  const double leaf_up_Bps = static_cast<double>(p.leaf_uplinks) * link_Bps;
  // A pod's cables to the cores (its spines' uplinks: as many as their downlinks when the spines
  // are non-blocking).
  const double pod_up_Bps =
      static_cast<double>(p.spines_per_pod * p.cores_per_spine * p.cables_spine_core) * link_Bps;
  double matched = 0;           // one rail
  double top_a = 0, top_b = 0;  // what reaches the top level from each half
  for (int64_t pod = 0; pod < p.pods; ++pod) {
    double pod_a = 0, pod_b = 0;
    for (int64_t l = pod * p.leaves_per_pod;
         l < std::min((pod + 1) * p.leaves_per_pod, p.leaves_per_rail); ++l) {
      const int64_t first = l * p.nodes_per_leaf;
      const int64_t last = std::min(first + p.nodes_per_leaf, 2 * half);  // exclusive
      // Each node's NIC rate (a mixed cluster's node groups may differ).
      double a_Bps = 0, b_Bps = 0;
      for (int64_t node = first; node < last; ++node) {
        (node < half ? a_Bps : b_Bps) +=
            nic_spec_of(t, node).line_rate_Bps / static_cast<double>(p.planes);
      }
      const double pairs = std::min(a_Bps, b_Bps);
      matched += pairs;
      pod_a += std::min(a_Bps - pairs, leaf_up_Bps);
      pod_b += std::min(b_Bps - pairs, leaf_up_Bps);
    }
    if (p.tiers == 2) {
      top_a += pod_a;
      top_b += pod_b;
      continue;
    }
    const double pairs = std::min(pod_a, pod_b);
    matched += pairs;
    top_a += std::min(pod_a - pairs, pod_up_Bps);
    top_b += std::min(pod_b - pairs, pod_up_Bps);
  }
  matched += std::min(top_a, top_b);
  return matched * static_cast<double>(p.rails);
}

std::string describe_cluster_graph(const ClusterGraph& g) {
  const FabricPlan& p = g.plan();
  const TopologySpec& t = g.topology();
  const GraphCounts c = count_graph(g);
  std::string out = fmt::format(
      "cluster graph: {} GPUs = {} nodes x {} GPUs, {} rails{}, {}-tier rail-optimized fat tree "
      "({})\n",
      p.num_gpus, p.num_nodes, p.gpus_per_node, p.rails / p.planes,
      p.planes > 1 ? fmt::format(" x {} planes (a NIC port on each)", p.planes) : std::string(),
      p.tiers, p.planes > 1 ? "one fat tree per rail and plane" : "one plane per rail");
  out += fmt::format(
      "  wiring    per rail (rails share no switch): {}, one per scalable unit, {} nodes down and "
      "{} up each{}\n",
      plural(p.leaves_per_rail, "leaf", "leaves"), p.nodes_per_leaf,
      plural(p.leaf_uplinks, "cable"),
      p.num_nodes % p.nodes_per_leaf == 0
          ? std::string()
          : fmt::format(" (the last holds {} nodes)", p.num_nodes % p.nodes_per_leaf));
  if (p.tiers == 2) {
    out += fmt::format("            {}, {} from every leaf to each\n",
                       plural(p.spines_per_pod, "spine"), plural(p.cables_leaf_spine, "cable"));
  } else {
    out += fmt::format(
        "            {} of up to {} with {} each, {} from every leaf of a pod to each of its "
        "spines\n            {}; each spine has {} to each of {}\n",
        plural(p.pods, "pod"), plural(p.leaves_per_pod, "leaf", "leaves"),
        plural(p.spines_per_pod, "spine"), plural(p.cables_leaf_spine, "cable"),
        plural(p.cores_per_rail(), "core"), plural(p.cables_spine_core, "cable"),
        plural(p.cores_per_spine, "core"));
  }
  out += fmt::format("  switches  {} NVSwitch (one per node), {} leaf, {} spine, {} core\n",
                     c.nvswitches, c.leaves, c.spines, c.cores);
  out += "  links     cables per tier x per-direction bandwidth = tier bandwidth\n";
  for (const TierSummary& s : c.tiers) {
    if (s.links == 0) continue;
    out += fmt::format("    {:<11} {:>6} x {:>10} = {}\n", to_string(s.tier), s.links,
                       format_bandwidth_Bps(s.link_bandwidth_Bps),
                       format_bandwidth_Bps(s.bandwidth_Bps));
  }
  const double bisection = bisection_bandwidth_Bps(g);
  const int64_t half = p.num_nodes / 2;
  if (half > 0) {
    out += fmt::format(
        "  bisection {:.1f} GB/s between nodes 0-{} and {}-{} ({} of their NICs' line rate)\n",
        bisection / 1e9, half - 1, half, 2 * half - 1,
        percent(bisection, static_cast<double>(p.rails / p.planes) * first_half_nic_Bps(t, half)));
  } else {
    out += "  bisection none: one node\n";
  }
  // Representative routes: GPU 0 to a GPU of the same node, the same leaf, a spine, a core.
  std::string routes;
  const auto show = [&](const char* what, int64_t dst_node, int64_t dst_local) {
    if (!routes.empty()) routes += "; ";
    if (dst_node < 0 || dst_node >= p.num_nodes || (dst_node == 0 && dst_local == 0)) {
      routes += fmt::format("{}: none at this size", what);
      return;
    }
    const GraphRoute r = route(g, 0, dst_node * p.gpus_per_node + dst_local);
    routes += fmt::format("{} {} hops ({})", what, r.hops(), format_time_s(route_latency_s(g, r)));
  };
  show("intra-node", p.gpus_per_node > 1 ? 0 : -1, 1);
  show("same leaf", p.nodes_per_leaf > 1 ? 1 : -1, 0);
  show(p.tiers == 2 ? "via spine" : "via spine (same pod)",
       p.leaves_per_pod > 1 ? p.nodes_per_leaf : -1, 0);
  if (p.tiers == 3) show("via core", p.pods > 1 ? p.leaves_per_pod * p.nodes_per_leaf : -1, 0);
  out += "  routes    " + routes + "\n";
  return out;
}

}  // namespace traintwin
