// The SimGrid platform of a cluster, built with SimGrid 3.32's C++ builders. See
// sim/platform.hpp for the layout, the latency split and the fat-tree mapping.
#include "sim/platform.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xbt/log.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <unordered_map>
#include <simgrid/s4u.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"
#include "sim/fabric_reroute.hpp"
#include "topologies/fabric_overrides.hpp"
#include "topologies/graph.hpp"

XBT_LOG_EXTERNAL_CATEGORY(xbt_cfg);  // SimGrid's "Configuration change: ..." messages

namespace traintwin {
namespace {

/// A GPU host's SimGrid speed: its dense bf16 peak, else (no BF16 tensor cores: Turing) its fp16
/// peak. Only a unit: an Exec of seconds x speed flops lasts `seconds`.
double host_speed_FLOPs(const GpuSpec& gpu) {
  return gpu.peak.bf16_FLOPs > 0 ? gpu.peak.bf16_FLOPs : gpu.peak.fp16_FLOPs;
}

namespace sg4 = simgrid::s4u;
using simgrid::kernel::routing::NetPoint;

/// Receives the links SimGrid creates while one fat-tree zone is built (Link::on_creation fires
/// in creation order); null otherwise. SimGrid's signals cannot be disconnected in 3.32, so one
/// callback is installed per process and pointed at a sink only during that build.
std::vector<sg4::Link*>* g_link_sink = nullptr;

void install_link_sink() {
  static bool installed = false;
  if (installed) return;
  sg4::Link::on_creation_cb([](sg4::Link& link) {
    if (g_link_sink != nullptr) g_link_sink->push_back(&link);
  });
  installed = true;
}

/// One cable of a rail's regular (padded) fat tree, in SimGrid's creation order: the child at
/// `level` (0 = NIC host, 1 = leaf, 2 = spine) and position, its parent's position one level up,
/// and which of the parallel cables it is.
struct PlannedCable {
  int64_t level;
  int64_t child;
  int64_t parent;
  int64_t cable;
};

/// SimGrid's FatTreeZone creates cables node by node, level by level, each node's parents in
/// position order and the parallel cables of a parent together. Positions follow its labels:
/// leaf = x + leaves_per_pod * pod; spine = y + spines_per_pod * pod; core = y +
/// spines_per_pod * z (core z above spine position y of every pod).
std::vector<PlannedCable> plan_cables(const FabricPlan& p) {
  std::vector<PlannedCable> out;
  for (int64_t e = 0; e < p.padded_nodes(); ++e) out.push_back({0, e, e / p.nodes_per_leaf, 0});
  for (int64_t l = 0; l < p.padded_leaves_per_rail(); ++l) {
    const int64_t pod = l / p.leaves_per_pod;
    for (int64_t y = 0; y < p.spines_per_pod; ++y) {
      for (int64_t c = 0; c < p.cables_leaf_spine; ++c) {
        out.push_back({1, l, y + p.spines_per_pod * pod, c});
      }
    }
  }
  for (int64_t s = 0; s < p.spines_per_rail() && p.tiers == 3; ++s) {
    for (int64_t z = 0; z < p.cores_per_spine; ++z) {
      for (int64_t c = 0; c < p.cables_spine_core; ++c) {
        out.push_back({2, s, s % p.spines_per_pod + p.spines_per_pod * z, c});
      }
    }
  }
  return out;
}

/// SimGrid's internal id of a fat-tree element: hosts 0..n-1 by position; switches counted down
/// from 2n-1 in creation order (all leaves, then spines, then cores).
int64_t simgrid_id(const FabricPlan& p, int64_t level, int64_t position) {
  if (level == 0) return position;
  int64_t created_before = 0;
  if (level >= 2) created_before += p.padded_leaves_per_rail();
  if (level >= 3) created_before += p.spines_per_rail();
  return 2 * p.padded_nodes() - 1 - (created_before + position);
}

/// The name of a fat-tree vertex of fabric rail `rail`, as topologies/graph.hpp names it.
std::string fabric_vertex(const FabricPlan& p, int64_t rail, int64_t level, int64_t position) {
  const std::string label = p.rail_label(rail);
  switch (level) {
    case 0:
      return fmt::format("node{}-nic{}", position, label);
    case 1:
      return fmt::format("rail{}-leaf{}", label, position);
    case 2:
      return fmt::format("rail{}-spine{}", label, position);
    default:
      return fmt::format("rail{}-core{}", label, position);
  }
}

/// True for a cable of the padding of SimGrid's regular tree (no traffic, not listed).
bool is_padding(const FabricPlan& p, const PlannedCable& c) {
  return (c.level == 0 && c.child >= p.num_nodes) ||
         (c.level == 1 && c.child >= p.leaves_per_rail);
}

/// A cable's link name without its "-up"/"-down": "node3-nic2", "rail2-leaf1-spine3-c0",
/// "rail2-spine3-core1-c0" (dual-plane: "node3-nic2-plane1", "rail2-plane1-leaf1-spine3-c0").
std::string cable_name(const FabricPlan& p, int64_t rail, const PlannedCable& c) {
  const std::string lower = fabric_vertex(p, rail, c.level, c.child);
  if (c.level == 0) return lower;
  const std::string upper = fabric_vertex(p, rail, c.level + 1, c.parent);
  const size_t prefix = fmt::format("rail{}-", p.rail_label(rail)).size();
  return fmt::format("{}-{}-c{}", lower, upper.substr(prefix), c.cable);
}

/// One change to a link of links(): the topology's override (absolute bandwidth and latency,
/// before the tier's what-if factor) and the what-if degraded links (a factor on the rate built):
/// every bandwidth and latency change of the platform goes through these.
struct LinkSetting {
  std::string name;
  std::optional<double> bandwidth_Bps;  ///< absolute (x the tier's factor: nvlink or ib)
  double bandwidth_scale = 1.0;         ///< then x this
  std::optional<double> latency_s;      ///< absolute
};

/// A route of one fabric rail that differs from SimGrid's D-mod-K (a bypass route).
struct Reroute {
  int64_t rail = 0, src = 0, dst = 0;
  FatTreeRoute route;
};

/// What the overrides and what-ifs of a build amount to, worked out before SimGrid is touched.
struct Resolved {
  std::vector<LinkSetting> settings;                    ///< in order: overrides, then what-ifs
  std::vector<std::pair<std::string, double>> switch_hop_latency_s;  ///< vertex, its hop
  std::vector<std::string> down_links;                  ///< link names
  std::vector<std::string> down_switches;               ///< vertex names
  std::vector<char> port_down;                          ///< [node * rails + rail]
  std::vector<Reroute> reroutes;
  int64_t left_out = 0;  ///< overrides past this platform's elements
};

/// Ranks (platform GPUs) whose inter-node traffic uses fabric rail `rail` of `node`:
/// "ranks 24..25 (node 3)".
std::string ranks_on_rail(const TopologySpec& topo, const FabricPlan& plan, int64_t node,
                          int64_t rail) {
  const int64_t nic = rail / plan.planes;
  const int64_t per_nic = plan.gpus_per_node / topo.nic.nics_per_node;
  const int64_t first = node * plan.gpus_per_node + nic * per_nic;
  return per_nic == 1 ? fmt::format("rank {} (node {}, GPU {})", first, node, nic * per_nic)
                      : fmt::format("ranks {}..{} (node {})", first, first + per_nic - 1, node);
}

/// The unknown-link message of degraded links and link overrides: the closest name of
/// `names` and how names look.
std::string no_such_link(const std::string& name, const FabricPlan& plan,
                         const std::vector<std::string>& names) {
  const std::string_view best =
      closest_match(name, std::vector<std::string_view>(names.begin(), names.end()));
  return fmt::format("'{}': no such link in the platform of {} GPUs{} ({})", name, plan.num_gpus,
                     best.empty() ? "" : fmt::format("; did you mean {}?", best),
                     link_name_forms(plan));
}

std::vector<std::string> link_names(const TopologySpec& topo, const FabricPlan& plan);

/// The overrides of `topo` and the degraded links of `scaling` on the platform of `plan`: the
/// link settings, what is down and the routes around it. Throws ConfigError for a name that is
/// not in the platform (and not past it: fabric_overrides.hpp), a down element that cuts ranks
/// off, and a pair of nodes no route joins.
Resolved resolve(const TopologySpec& topo, const FabricPlan& plan,
                 const PlatformScaling& scaling) {
  Resolved out;
  out.port_down.assign(static_cast<size_t>(plan.num_nodes * plan.rails), 0);
  if (!topo.has_overrides() && scaling.degraded_links.empty()) return out;
  std::vector<RailDown> down(static_cast<size_t>(plan.rails), RailDown::all_up(plan));
  std::vector<std::string> down_what;  // for messages
  const int64_t P = plan.spines_per_pod;
  const int64_t planes = plan.planes;
  const bool cut_off_matters = plan.num_nodes > 1;
  for (const LinkOverride& o : topo.link_overrides) {
    const std::optional<FabricElement> e = parse_link_element(o.link, planes);
    if (e && element_beyond_plan(*e, plan)) {  // not in this job's share of the cluster
      ++out.left_out;
      continue;
    }
    if (!e || !element_in_plan(*e, plan)) {
      throw ConfigError(fmt::format("topology '{}': {}.link: {}", topo.name, o.where,
                                    no_such_link(o.link, plan, link_names(topo, plan))));
    }
    for (const std::string& name : element_link_names(*e, plan)) {
      out.settings.push_back({name, o.bandwidth_Bps, 1.0, o.latency_s});
      if (o.down) out.down_links.push_back(name);
    }
    if (!o.down) continue;
    down_what.push_back(o.link);
    switch (e->kind) {
      case FabricElementKind::kNvlink:
      case FabricElementKind::kLoopback:
        throw ConfigError(fmt::format(
            "topology '{}': {}: {} down would cut rank {} off from its node (allowed down: "
            "switch-to-switch cables, spines and cores; on a dual-plane fabric NIC ports and "
            "leaves)",
            topo.name, o.where, o.link,
            e->kind == FabricElementKind::kNvlink
                ? fmt::format("{} (node {}, GPU {})", e->node * plan.gpus_per_node + e->gpu,
                              e->node, e->gpu)
                : fmt::format("{}..{} (node {})", e->node * plan.gpus_per_node,
                              (e->node + 1) * plan.gpus_per_node - 1, e->node)));
      case FabricElementKind::kNic:
        if (planes > 1) {
          out.port_down[static_cast<size_t>(e->node * plan.rails + e->rail)] = 1;
        } else if (cut_off_matters) {
          throw ConfigError(fmt::format(
              "topology '{}': {}: {} down leaves {} without a way to the other nodes: a "
              "single-plane rail fabric has one NIC cable per rail (allowed down: "
              "switch-to-switch cables, spines and cores; a NIC port on a dual-plane fabric)",
              topo.name, o.where, o.link, ranks_on_rail(topo, plan, e->node, e->rail)));
        }
        break;
      case FabricElementKind::kLeafSpine:
        down[static_cast<size_t>(e->rail)]
            .leaf_spine[static_cast<size_t>((e->lower * P + e->upper % P) * plan.cables_leaf_spine +
                                            e->cable)] = 1;
        break;
      case FabricElementKind::kSpineCore:
        down[static_cast<size_t>(e->rail)]
            .spine_core[static_cast<size_t>((e->lower * plan.cores_per_spine + e->upper / P) *
                                                plan.cables_spine_core +
                                            e->cable)] = 1;
        break;
      default:
        break;
    }
  }
  for (const SwitchOverride& o : topo.switch_overrides) {
    const std::optional<FabricElement> e = parse_switch_element(o.name, planes);
    if (e && element_beyond_plan(*e, plan)) {
      ++out.left_out;
      continue;
    }
    if (!e || !element_in_plan(*e, plan)) {
      throw ConfigError(fmt::format(
          "topology '{}': {}.switch: '{}': no such switch in the platform of {} GPUs (names look "
          "like rail0-leaf0, rail0-spine0, rail0-core0, node0-nvswitch; here nodes 0..{}, leaves "
          "0..{}, spines 0..{}, cores {} per rail)",
          topo.name, o.where, o.name, plan.num_gpus, plan.num_nodes - 1,
          plan.leaves_per_rail - 1, plan.spines_per_rail() - 1,
          plan.tiers == 3 ? fmt::format("0..{}", plan.cores_per_rail() - 1) : "none"));
    }
    const std::string vertex = element_switch_name(*e, plan);
    if (o.hop_latency_s) out.switch_hop_latency_s.emplace_back(vertex, *o.hop_latency_s);
    if (!o.down) continue;
    down_what.push_back(o.name);
    out.down_switches.push_back(vertex);
    switch (e->kind) {
      case FabricElementKind::kNvSwitch:
        throw ConfigError(fmt::format(
            "topology '{}': {}: {} down would cut ranks {}..{} (node {}) off from each other "
            "and their NICs (allowed down: spines and cores; a leaf on a dual-plane fabric)",
            topo.name, o.where, o.name, e->node * plan.gpus_per_node,
            (e->node + 1) * plan.gpus_per_node - 1, e->node));
      case FabricElementKind::kLeaf: {
        const int64_t first = e->lower * plan.nodes_per_leaf;
        const int64_t last = std::min(first + plan.nodes_per_leaf, plan.num_nodes) - 1;
        if (planes > 1) {
          for (int64_t n = first; n <= last; ++n) {
            out.port_down[static_cast<size_t>(n * plan.rails + e->rail)] = 1;
          }
        } else if (cut_off_matters) {
          throw ConfigError(fmt::format(
              "topology '{}': {}: {} down leaves nodes {}..{} without a way to the other nodes "
              "on rail {} (first: {}): a single-plane rail fabric has one leaf per rail and "
              "scalable unit (allowed down: spines and cores; a leaf on a dual-plane fabric)",
              topo.name, o.where, o.name, first, last, e->rail,
              ranks_on_rail(topo, plan, first, e->rail)));
        }
        down[static_cast<size_t>(e->rail)].leaf[static_cast<size_t>(e->lower)] = 1;
        break;
      }
      case FabricElementKind::kSpine:
        down[static_cast<size_t>(e->rail)].spine[static_cast<size_t>(e->lower)] = 1;
        break;
      case FabricElementKind::kCore:
        down[static_cast<size_t>(e->rail)].core[static_cast<size_t>(e->lower)] = 1;
        break;
      default:
        break;
    }
  }
  for (const DegradedLink& d : scaling.degraded_links) {
    out.settings.push_back({d.name, std::nullopt, d.bandwidth_scale, std::nullopt});
  }
  if (!cut_off_matters) return out;
  const std::string what = fmt::format("down: {}", fmt::join(down_what, ", "));
  // Ports that carry nothing: the overrides' and fabric.ports_down.
  std::vector<char> port_off = out.port_down;
  for (const NicPort& port : topo.fabric.ports_down) {
    const int64_t i = port.node * plan.rails + port.nic * planes + port.plane;
    if (port.node < plan.num_nodes) port_off[static_cast<size_t>(i)] = 1;
  }
  // A dual-plane NIC needs one port up.
  for (int64_t n = 0; n < plan.num_nodes && planes > 1; ++n) {
    for (int64_t r = 0; r < plan.rails; r += planes) {
      bool any_up = false;
      for (int64_t q = 0; q < planes; ++q) {
        any_up = any_up || port_off[static_cast<size_t>(n * plan.rails + r + q)] == 0;
      }
      if (!any_up) {
        throw ConfigError(fmt::format(
            "topology '{}': every port of node{}-nic{} is down ({}): {} cannot reach the other "
            "nodes",
            topo.name, n, r / planes, what, ranks_on_rail(topo, plan, n, r)));
      }
    }
  }
  // Routes around the switches and cables down, rail by rail.
  for (int64_t f = 0; f < plan.rails; ++f) {
    const RailDown& d = down[static_cast<size_t>(f)];
    if (!d.any_above_leaves()) continue;
    for (int64_t a = 0; a < plan.num_nodes; ++a) {
      if (port_off[static_cast<size_t>(a * plan.rails + f)] != 0) continue;
      for (int64_t b = 0; b < plan.num_nodes; ++b) {
        if (a / plan.nodes_per_leaf == b / plan.nodes_per_leaf) continue;
        if (port_off[static_cast<size_t>(b * plan.rails + f)] != 0) continue;
        const std::optional<FatTreeRoute> r = route_around(plan, d, a, b);
        if (!r) {
          throw ConfigError(fmt::format(
              "topology '{}': rail {}: no route from node {} (leaf {}) to node {} (leaf {}) "
              "avoids what is down ({}); {} sends to {} on it",
              topo.name, plan.rail_label(f), a, a / plan.nodes_per_leaf, b,
              b / plan.nodes_per_leaf, what, ranks_on_rail(topo, plan, a, f),
              ranks_on_rail(topo, plan, b, f)));
        }
        if (*r != d_mod_k_route(plan, a, b)) out.reroutes.push_back({f, a, b, *r});
      }
    }
  }
  return out;
}

class SimGridPlatform final : public Platform {
 public:
  SimGridPlatform(const TopologySpec& topo, FabricPlan plan, const PlatformScaling& scaling,
                  Resolved resolved)
      : topo_(topo), plan_(std::move(plan)), scaling_(scaling), resolved_(std::move(resolved)) {}

  void build_zones() {
    sg4::NetZone* root = sg4::create_star_zone("cluster");
    install_link_sink();
    nic_hosts_.assign(static_cast<size_t>(plan_.num_nodes * plan_.rails), nullptr);
    port_up_.assign(static_cast<size_t>(plan_.num_nodes * plan_.rails), 1);
    for (const NicPort& port : topo_.fabric.ports_down) {
      port_up_[static_cast<size_t>(port.node * plan_.rails + port.nic * plan_.planes + port.plane)] = 0;
    }
    for (size_t i = 0; i < port_up_.size(); ++i) {
      if (resolved_.port_down[i] != 0) port_up_[i] = 0;
    }
    const std::vector<PlannedCable> cables = plan_cables(plan_);
    for (int64_t r = 0; r < plan_.rails; ++r) build_rail(root, r, cables);
    build_nodes(root);
    apply_link_settings();
    add_bypass_routes();
    root->seal();
  }

  std::pair<sg4::Host*, sg4::Host*> endpoints(int64_t src, int64_t dst) const override {
    return paths(src, dst).path[0];
  }

  TransferPaths paths(int64_t src, int64_t dst) const override {
    if (src < 0 || src >= plan_.num_gpus || dst < 0 || dst >= plan_.num_gpus || src == dst) {
      throw InvalidArgument(
          fmt::format("Platform::endpoints: GPU {} -> {} (allowed: two different GPUs in [0, {}))",
                      src, dst, plan_.num_gpus));
    }
    TransferPaths out;
    const int64_t src_node = src / plan_.gpus_per_node;
    const int64_t dst_node = dst / plan_.gpus_per_node;
    if (src_node == dst_node) {
      out.path[0] = {gpu_hosts_[static_cast<size_t>(src)], gpu_hosts_[static_cast<size_t>(dst)]};
      out.n = 1;
      return out;
    }
    // The sender's rail, on each plane whose ports at both ends are up.
    for (int64_t plane = 0; plane < plan_.planes; ++plane) {
      const int64_t rail = rail_of_gpu(topo_, src) * plan_.planes + plane;
      const auto a = static_cast<size_t>(src_node * plan_.rails + rail);
      const auto b = static_cast<size_t>(dst_node * plan_.rails + rail);
      if (port_up_[a] == 0 || port_up_[b] == 0) continue;
      out.path[static_cast<size_t>(out.n++)] = {nic_hosts_[a], nic_hosts_[b]};
    }
    if (out.n == 0) {
      throw Error(fmt::format(
          "Platform: GPU {} (node {}) cannot reach GPU {} (node {}): on rail {} every plane has a "
          "port down at one end (fabric.ports_down of '{}')",
          src, src_node, dst, dst_node, rail_of_gpu(topo_, src), topo_.name));
    }
    return out;
  }

  const std::vector<PlatformLink>& links() const override { return links_; }
  const TopologySpec& topology() const override { return topo_; }
  int64_t num_gpus() const override { return plan_.num_gpus; }

 private:
  /// Every bandwidth and latency change after the zones are built, in one place: switch hop
  /// latencies ((hop - fabric.hop_latency) / 2 on each of the switch's links), then each
  /// LinkSetting in order (the topology's overrides: absolute bandwidth x the tier's what-if
  /// factor and absolute latency; then the what-if degraded links: x bandwidth_scale of the
  /// rate built); then what is down is marked.
  void apply_link_settings() {
    std::unordered_map<std::string, size_t> index;
    for (size_t i = 0; i < links_.size(); ++i) index.emplace(links_[i].name, i);
    for (const auto& [vertex, hop_s] : resolved_.switch_hop_latency_s) {
      const double delta_s = (hop_s - topo_.fabric.hop_latency_s) / 2;
      for (PlatformLink& l : links_) {
        if (l.from == vertex || l.to == vertex) {
          l.link->set_latency(std::max(0.0, l.link->get_latency() + delta_s));
        }
      }
    }
    for (const LinkSetting& s : resolved_.settings) {
      PlatformLink& l = links_[index.at(s.name)];
      if (s.bandwidth_Bps) {
        const double factor = l.tier == "nvlink"     ? scaling_.nvlink_bandwidth
                              : l.tier == "loopback" ? 1.0
                                                     : scaling_.ib_bandwidth;
        l.bandwidth_Bps = *s.bandwidth_Bps * factor;
      }
      l.bandwidth_Bps *= s.bandwidth_scale;
      if (s.bandwidth_Bps || s.bandwidth_scale != 1.0) l.link->set_bandwidth(l.bandwidth_Bps);
      if (s.latency_s) l.link->set_latency(*s.latency_s);
    }
    for (const std::string& name : resolved_.down_links) links_[index.at(name)].down = true;
    for (const std::string& vertex : resolved_.down_switches) {
      for (PlatformLink& l : links_) {
        if (l.from == vertex || l.to == vertex) l.down = true;
      }
    }
  }

  /// The index of a cable of fabric rail `rail`'s tree in plan_cables() order.
  size_t nic_cable(int64_t node) const { return static_cast<size_t>(node); }
  size_t leaf_spine_cable(int64_t leaf, int64_t y, int64_t c) const {
    return static_cast<size_t>(plan_.padded_nodes() +
                               (leaf * plan_.spines_per_pod + y) * plan_.cables_leaf_spine + c);
  }
  size_t spine_core_cable(int64_t spine, int64_t z, int64_t c) const {
    return static_cast<size_t>(plan_.padded_nodes() +
                               plan_.padded_leaves_per_rail() * plan_.spines_per_pod *
                                   plan_.cables_leaf_spine +
                               (spine * plan_.cores_per_spine + z) * plan_.cables_spine_core + c);
  }

  /// One bypass route (NetZone::add_bypass_route in the rail's zone, between the two NIC hosts)
  /// per pair whose route differs from D-mod-K's: SimGrid's route lookup
  /// (NetZoneImpl::get_global_route_with_netzones) takes a zone's bypass route between two of
  /// its hosts before its own routing, so Host::route_to, every transfer and the flow network
  /// (sim/flow_network.hpp) see the route around.
  void add_bypass_routes() {
    const FabricPlan& p = plan_;
    for (const Reroute& r : resolved_.reroutes) {
      const auto& cable = rail_cables_[static_cast<size_t>(r.rail)];
      const int64_t sa = r.src / p.nodes_per_leaf;
      const int64_t sb = r.dst / p.nodes_per_leaf;
      const int64_t y = r.route.spine_y;
      std::vector<sg4::LinkInRoute> route;
      route.emplace_back(cable[nic_cable(r.src)].first);
      route.emplace_back(cable[leaf_spine_cable(sa, y, r.route.leaf_spine_up)].first);
      if (r.route.core_z >= 0) {
        const int64_t spine_a = y + p.spines_per_pod * (sa / p.leaves_per_pod);
        const int64_t spine_b = y + p.spines_per_pod * (sb / p.leaves_per_pod);
        route.emplace_back(cable[spine_core_cable(spine_a, r.route.core_z, r.route.spine_core_up)].first);
        route.emplace_back(
            cable[spine_core_cable(spine_b, r.route.core_z, r.route.spine_core_down)].second);
      }
      route.emplace_back(cable[leaf_spine_cable(sb, y, r.route.leaf_spine_down)].second);
      route.emplace_back(cable[nic_cable(r.dst)].second);
      const auto host = [&](int64_t node) {
        return nic_hosts_[static_cast<size_t>(node * p.rails + r.rail)]->get_netpoint();
      };
      rail_zones_[static_cast<size_t>(r.rail)]->add_bypass_route(host(r.src), host(r.dst),
                                                                  nullptr, nullptr, route);
    }
  }

  /// Star zone "nodes": every node's GPU hosts, one split-duplex NVLink each (to the node's
  /// NVSwitch, the star's centre), one loopback per node.
  void build_nodes(sg4::NetZone* root) {
    sg4::NetZone* zone = sg4::create_star_zone("nodes");
    zone->set_parent(root);
    gpu_hosts_.reserve(static_cast<size_t>(plan_.num_gpus));
    for (int64_t node = 0; node < plan_.num_nodes; ++node) {
      // A mixed cluster's node groups: each node's own NVLink domain.
      const NodeSpec& domain = node_spec_of(topo_, node);
      const double nvlink_Bps = domain.nvlink_bandwidth_Bps * scaling_.nvlink_bandwidth;
      const std::string nvswitch = fmt::format("node{}-nvswitch", node);
      const std::string loop_name = fmt::format("node{}-loopback", node);
      // Device-local copies (never asked by endpoints()): HBM bandwidth, no sharing, no latency.
      const GpuSpec& node_gpu = gpu_of_node(topo_, node);  // a mixed cluster's node groups
      sg4::Link* loopback = zone->create_link(loop_name, node_gpu.hbm_bandwidth_Bps)
                                ->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE)
                                ->set_latency(0.0)
                                ->seal();
      links_.push_back({loop_name, "loopback", node_gpu.hbm_bandwidth_Bps, "", "", loopback});
      for (int64_t j = 0; j < plan_.gpus_per_node; ++j) {
        const std::string gpu = fmt::format("node{}-gpu{}", node, j);
        sg4::Host* host = zone->create_host(gpu, host_speed_FLOPs(node_gpu))->seal();
        gpu_hosts_.push_back(host);
        sg4::SplitDuplexLink* nvlink = zone->create_split_duplex_link(gpu + "-nvlink", nvlink_Bps);
        nvlink->set_latency(domain.nvlink_latency_s / 2)->seal();
        zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                        {sg4::LinkInRoute(nvlink, sg4::LinkInRoute::Direction::UP)}, true);
        zone->add_route(host->get_netpoint(), host->get_netpoint(), nullptr, nullptr,
                        {sg4::LinkInRoute(loopback)}, false);
        links_.push_back(
            {gpu + "-nvlink-up", "nvlink", nvlink_Bps, gpu, nvswitch, nvlink->get_link_up()});
        links_.push_back(
            {gpu + "-nvlink-down", "nvlink", nvlink_Bps, nvswitch, gpu, nvlink->get_link_down()});
      }
    }
    zone->seal();
  }

  /// Fat-tree zone "rail<r>": one NIC host per node (plus padding), switches per the plan.
  void build_rail(sg4::NetZone* root, int64_t rail, const std::vector<PlannedCable>& cables) {
    const FabricPlan& p = plan_;
    const auto to_uints = [](const std::vector<int64_t>& v) {
      return std::vector<unsigned int>(v.begin(), v.end());
    };
    const sg4::FatTreeParams params(static_cast<unsigned int>(p.tiers), to_uints(p.xgft_down()),
                                    to_uints(p.xgft_up()), to_uints(p.xgft_cables()));
    const sg4::ClusterCallbacks callbacks(
        [this, rail](sg4::NetZone* zone, const std::vector<unsigned long>& /*coord*/,
                     unsigned long id) -> std::pair<NetPoint*, NetPoint*> {
          const auto node = static_cast<int64_t>(id);
          const std::string name =
              node < plan_.num_nodes ? fabric_vertex(plan_, rail, 0, node)
                                     : fmt::format("rail{}-spare{}", plan_.rail_label(rail), node);
          sg4::Host* host = zone->create_host(name, 1.0)->seal();
          if (node < plan_.num_nodes) {
            nic_hosts_[static_cast<size_t>(node * plan_.rails + rail)] = host;
          }
          return {host->get_netpoint(), nullptr};
        });
    const double ib = scaling_.ib_bandwidth;
    const double link_Bps = topo_.fabric.link_rate_Bps * ib;
    const double hop_s = topo_.fabric.hop_latency_s;
    std::vector<sg4::Link*> created;
    created.reserve(2 * cables.size());
    g_link_sink = &created;
    sg4::NetZone* zone = nullptr;
    try {
      zone = sg4::create_fatTree_zone(fmt::format("rail{}", p.rail_label(rail)), root, params,
                                      callbacks, link_Bps, hop_s,
                                      sg4::Link::SharingPolicy::SPLITDUPLEX);
    } catch (...) {
      g_link_sink = nullptr;
      throw;
    }
    g_link_sink = nullptr;
    if (created.size() != 2 * cables.size()) {
      throw Error(fmt::format(
          "SimGrid built {} links for the fat tree of rail {}, the plan has {} cables x 2 "
          "directions",
          created.size(), rail, cables.size()));
    }
    rail_zones_.push_back(zone);
    rail_cables_.emplace_back();
    rail_cables_.back().reserve(cables.size());
    for (size_t i = 0; i < cables.size(); ++i) {
      const PlannedCable& c = cables[i];
      sg4::Link* up = created[2 * i];
      sg4::Link* down = created[2 * i + 1];
      rail_cables_.back().emplace_back(up, down);
      long child = 0, parent = 0, serial = 0;  // NOLINT(runtime/int): sscanf's %ld
      const bool named =
          std::sscanf(up->get_cname(), "link_from_%ld_%ld_%ld_UP", &child, &parent, &serial) == 3;
      if (!named || child != simgrid_id(p, c.level, c.child) ||
          parent != simgrid_id(p, c.level + 1, c.parent) ||
          down->get_name() != up->get_name().substr(0, up->get_name().size() - 2) + "DOWN") {
        throw Error(fmt::format(
            "SimGrid's fat tree of rail {} is not wired as planned: link {} is '{}' / '{}', "
            "expected the cable between SimGrid elements {} and {}",
            rail, i, up->get_name(), down->get_name(), simgrid_id(p, c.level, c.child),
            simgrid_id(p, c.level + 1, c.parent)));
      }
      // NIC links: each node's own NICs (a mixed cluster's node groups); the padding's the file's.
      const NicSpec& nic = nic_spec_of(topo_, c.level == 0 ? c.child : 0);
      // A NIC port: the NIC's line rate over its planes.
      const double nic_Bps = nic.line_rate_Bps * ib / static_cast<double>(p.planes);
      if (c.level == 0) {
        for (sg4::Link* l : {up, down}) {
          l->set_bandwidth(nic_Bps);
          l->set_latency(nic.latency_s + hop_s / 2);
        }
      }
      if (is_padding(p, c)) continue;
      const std::string lower = fabric_vertex(p, rail, c.level, c.child);
      const std::string upper = fabric_vertex(p, rail, c.level + 1, c.parent);
      const char* tier = c.level == 0 ? "nic" : c.level == 1 ? "leaf-spine" : "spine-core";
      const std::string name = cable_name(p, rail, c);
      const double bw = c.level == 0 ? nic_Bps : link_Bps;
      links_.push_back({name + "-up", tier, bw, lower, upper, up});
      links_.push_back({name + "-down", tier, bw, upper, lower, down});
    }
    zone->seal();
  }

  TopologySpec topo_;
  FabricPlan plan_;
  PlatformScaling scaling_;
  std::vector<sg4::Host*> gpu_hosts_;  ///< by global GPU index
  std::vector<sg4::Host*> nic_hosts_;  ///< node * rails + rail (fabric rails: NIC x planes + plane)
  std::vector<char> port_up_;          ///< as nic_hosts_: 0 for a port of fabric.ports_down
  std::vector<PlatformLink> links_;
  Resolved resolved_;
  std::vector<sg4::NetZone*> rail_zones_;  ///< by fabric rail
  /// Every cable of each fabric rail's (padded) tree in plan_cables() order: (up, down) links.
  std::vector<std::vector<std::pair<sg4::Link*, sg4::Link*>>> rail_cables_;
};

/// Link names in links() order: each rail's cables (up, down), then each node's loopback and
/// its GPUs' NVLinks (up, down).
std::vector<std::string> link_names(const TopologySpec& topo, const FabricPlan& plan) {
  std::vector<std::string> names;
  const std::vector<PlannedCable> cables = plan_cables(plan);
  for (int64_t r = 0; r < plan.rails; ++r) {
    for (const PlannedCable& c : cables) {
      if (is_padding(plan, c)) continue;
      const std::string name = cable_name(plan, r, c);
      names.push_back(name + "-up");
      names.push_back(name + "-down");
    }
  }
  for (int64_t node = 0; node < plan.num_nodes; ++node) {
    names.push_back(fmt::format("node{}-loopback", node));
    for (int64_t j = 0; j < topo.node.gpus_per_node; ++j) {
      names.push_back(fmt::format("node{}-gpu{}-nvlink-up", node, j));
      names.push_back(fmt::format("node{}-gpu{}-nvlink-down", node, j));
    }
  }
  return names;
}

void check_scaling(const TopologySpec& topo, const FabricPlan& plan,
                   const PlatformScaling& scaling) {
  for (const auto& [key, value] : {std::pair{"nvlink_bandwidth", scaling.nvlink_bandwidth},
                                   std::pair{"ib_bandwidth", scaling.ib_bandwidth}}) {
    if (!(value > 0) || !std::isfinite(value)) {
      throw ConfigError(
          fmt::format("platform scaling {} = {} (allowed: a positive factor)", key, value));
    }
  }
  if (scaling.degraded_links.empty()) return;
  const std::vector<std::string> names = link_names(topo, plan);
  for (const DegradedLink& d : scaling.degraded_links) {
    if (!(d.bandwidth_scale > 0) || !std::isfinite(d.bandwidth_scale)) {
      throw ConfigError(fmt::format("degraded link '{}': bandwidth scale {} (allowed: a positive "
                                    "factor)",
                                    d.name, d.bandwidth_scale));
    }
    if (std::find(names.begin(), names.end(), d.name) != names.end()) continue;
    throw ConfigError("degraded link " + no_such_link(d.name, plan, names));
  }
}

}  // namespace

std::vector<std::string> platform_link_names(const TopologySpec& topo, int64_t num_gpus) {
  return link_names(topo, plan_fabric(topo, num_gpus));
}

void check_platform_scaling(const TopologySpec& topo, int64_t num_gpus,
                            const PlatformScaling& scaling) {
  check_scaling(topo, plan_fabric(topo, num_gpus), scaling);
}

OverrideSummary check_overrides(const TopologySpec& topo, int64_t num_gpus) {
  const FabricPlan plan = plan_fabric(topo, num_gpus);
  const Resolved r = resolve(topo, plan, {});
  OverrideSummary out;
  out.links_set = static_cast<int64_t>(r.settings.size());
  out.links_down = static_cast<int64_t>(r.down_links.size());
  out.switches_down = static_cast<int64_t>(r.down_switches.size());
  out.rerouted_pairs = static_cast<int64_t>(r.reroutes.size());
  out.left_out = r.left_out;
  return out;
}

TopologySpec scaled_topology(const TopologySpec& topo, const PlatformScaling& scaling) {
  TopologySpec t = topo;
  t.node.nvlink_bandwidth_Bps *= scaling.nvlink_bandwidth;
  t.nic.line_rate_Bps *= scaling.ib_bandwidth;
  for (NodeGroup& g : t.node_groups) {
    if (g.node) g.node->nvlink_bandwidth_Bps *= scaling.nvlink_bandwidth;
    if (g.nic) g.nic->line_rate_Bps *= scaling.ib_bandwidth;
  }
  t.fabric.link_rate_Bps *= scaling.ib_bandwidth;
  return t;
}

std::unique_ptr<Platform> Platform::build(sg4::Engine& engine, const TopologySpec& topo,
                                          int64_t num_gpus, const PlatformScaling& scaling) {
  // Everything that can be refused is checked before SimGrid is touched.
  for (const auto& [key, value] : {std::pair{"gpu.peak_flops", host_speed_FLOPs(topo.gpu)},
                                   std::pair{"gpu.hbm_bandwidth", topo.gpu.hbm_bandwidth_Bps}}) {
    if (!(value > 0)) {
      throw ConfigError(
          fmt::format("topology '{}': {} = {} (allowed: > 0)", topo.name, key, value));
    }
  }
  FabricPlan plan = plan_fabric(topo, num_gpus);
  check_scaling(topo, plan, scaling);
  for (const NicPort& port : topo.fabric.ports_down) {
    if (port.node >= plan.num_nodes) {
      throw ConfigError(fmt::format(
          "topology '{}': fabric.ports_down: '{}' is not a port of the {} nodes of {} GPUs "
          "(allowed: node<i>-nic<r>-plane<p>, i 0..{})",
          topo.name, port.name(), plan.num_nodes, num_gpus, plan.num_nodes - 1));
    }
  }
  Resolved resolved = resolve(topo, plan, scaling);
  if (engine.get_netzone_root() != nullptr) {
    throw Error(
        "Platform::build: this SimGrid Engine already has a platform (SimGrid allows one Engine "
        "and one platform per process)");
  }
  // Pin the network model before the first zone exists (zone creation initializes the models).
  // Pinning logs one info line per setting: quiet them unless the caller set a stricter level.
  if (XBT_LOG_ISENABLED(xbt_cfg, xbt_log_priority_info)) {
    xbt_log_control_set("xbt_cfg.thresh:warning");
  }
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/crosstraffic:0");
  sg4::Engine::set_config("network/TCP-gamma:0");
  auto platform =
      std::make_unique<SimGridPlatform>(topo, std::move(plan), scaling, std::move(resolved));
  platform->build_zones();
  return platform;
}

}  // namespace traintwin
