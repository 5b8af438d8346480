// The SimGrid platform of a cluster, built with SimGrid 3.32's C++ builders. See
// sim/platform.hpp for the layout, the latency split and the fat-tree mapping.
#include "sim/platform.hpp"

#include <fmt/format.h>
#include <xbt/log.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <simgrid/s4u.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"
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

class SimGridPlatform final : public Platform {
 public:
  SimGridPlatform(const TopologySpec& topo, FabricPlan plan, const PlatformScaling& scaling)
      : topo_(topo), plan_(std::move(plan)), scaling_(scaling) {}

  void build_zones() {
    sg4::NetZone* root = sg4::create_star_zone("cluster");
    install_link_sink();
    nic_hosts_.assign(static_cast<size_t>(plan_.num_nodes * plan_.rails), nullptr);
    port_up_.assign(static_cast<size_t>(plan_.num_nodes * plan_.rails), 1);
    for (const NicPort& port : topo_.fabric.ports_down) {
      port_up_[static_cast<size_t>(port.node * plan_.rails + port.nic * plan_.planes + port.plane)] = 0;
    }
    const std::vector<PlannedCable> cables = plan_cables(plan_);
    for (int64_t r = 0; r < plan_.rails; ++r) build_rail(root, r, cables);
    build_nodes(root);
    root->seal();
    degrade_links();
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
  /// Multiplies the bandwidth of each degraded link (names checked by check_platform_scaling).
  void degrade_links() {
    for (const DegradedLink& d : scaling_.degraded_links) {
      for (PlatformLink& l : links_) {
        if (l.name != d.name) continue;
        l.bandwidth_Bps *= d.bandwidth_scale;
        l.link->set_bandwidth(l.bandwidth_Bps);
      }
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
    for (size_t i = 0; i < cables.size(); ++i) {
      const PlannedCable& c = cables[i];
      sg4::Link* up = created[2 * i];
      sg4::Link* down = created[2 * i + 1];
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
    const std::string_view best =
        closest_match(d.name, std::vector<std::string_view>(names.begin(), names.end()));
    const int64_t spines = plan.spines_per_rail();
    const std::string core_names =
        plan.tiers == 3 ? fmt::format(", rail0-spine0-core0-c0-up (spine -> core; cores 0..{})",
                                      plan.cores_per_rail() - 1)
                        : "";
    throw ConfigError(fmt::format(
        "degraded link '{}': no such link in the platform of {} GPUs{} (names look like "
        "node0-gpu0-nvlink-up / -down (GPU <-> NVSwitch), node0-loopback, node0-nic0-up / -down "
        "(NIC <-> leaf), rail0-leaf0-spine0-c0-up / -down (leaf <-> spine, cable 0){}; here "
        "nodes 0..{}, GPUs 0..{} per node, rails 0..{}, leaves 0..{} and spines 0..{} per rail)",
        d.name, plan.num_gpus, best.empty() ? "" : fmt::format("; did you mean {}?", best),
        core_names, plan.num_nodes - 1, plan.gpus_per_node - 1, plan.rails - 1,
        plan.leaves_per_rail - 1, spines - 1));
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
  auto platform = std::make_unique<SimGridPlatform>(topo, std::move(plan), scaling);
  platform->build_zones();
  return platform;
}

}  // namespace traintwin
