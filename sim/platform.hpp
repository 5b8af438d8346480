// The SimGrid platform of a cluster: built with SimGrid's C++ builders from a TopologySpec for
// `num_gpus` GPUs. Layout (rail-optimized DGX SuperPOD):
//  - inside nodes: a star through each node's NVSwitch, each GPU host with its own split-duplex
//    NVLink (per-direction bandwidth and latency of node.nvlink_*; on a mixed cluster each node's
//    own, node_spec_of()), so intra-node transfers share only their endpoints' NVLinks;
//  - one fat-tree zone per rail r: an endpoint ("NIC host") per node for its r-th NIC, NIC link
//    at nic.line_rate (each node's own: nic_spec_of()), leaves/spines(/cores) as the fabric states
//    (oversubscription, link rate, hop latency; one fabric for every node group). A dual-plane
//    fabric has one zone per rail and plane ("rail<r>-plane<p>", NIC hosts
//    "node<i>-nic<r>-plane<p>", NIC links at nic.line_rate / 2), and a transfer between nodes is
//    split in equal parts over the planes whose ports at both ends are up (paths()).
// A transfer between GPUs of one node uses the GPU hosts; between nodes it travels on the
// sender's rail from the sender node's NIC host to the receiver node's NIC host of that rail
// (NCCL's PXN places any NVLink hop on the sender side; that hop is not modelled).
// SimGrid allows one Engine per process: build one Platform per process.
//
// Details (SimGrid 3.32; see ../shared/SIMGRID-NOTES.md):
//  - Network model pinned before the first zone: network/model:CM02, network/crosstraffic:0,
//    network/TCP-gamma:0, so a link of X bytes/s delivers X bytes/s and a lone transfer of S
//    bytes takes (sum of its links' latencies) + S / (its slowest link). build() also raises the
//    threshold of SimGrid's `xbt_cfg` log category to warning (unless it is stricter already) so
//    that pinning prints nothing.
//  - Zones: root "cluster" (a star zone with no routes); "nodes" (a star zone holding the GPUs of
//    every node); "rail<r>" (fat trees). All GPUs share one star zone, not one zone per node:
//    SimGrid 3.32 checks each new host and link name by walking every zone of the platform, so
//    2048 node zones made a 16,384-GPU build take 11.8 s instead of 0.8 s. Each GPU still reaches
//    only its own NVLink, so intra-node transfers see exactly the per-node star; the only
//    difference is that two GPUs of different nodes would get a (meaningless) NVLink-only route,
//    and endpoints() never pairs them. No transfer crosses zones, so no zone has a gateway and
//    the root has no routes; a route asked between zones (a GPU host and a NIC host, or NIC hosts
//    of two rails) is refused by SimGrid ("Bad gateways for route ...").
//  - Hosts: "node<i>-gpu<j>" compute at the GPU's dense bf16 peak (fp16 on a GPU without BF16
//    tensor cores; only a unit: an Exec of seconds x
//    get_speed() flops lasts `seconds`); "node<i>-nic<r>" (NIC hosts) are transfer endpoints only.
//    One FATPIPE loopback per node ("node<i>-loopback", HBM bandwidth) serves device-local copies.
//  - Latencies are split as in topologies/graph.hpp: each NVLink direction nvlink_latency / 2
//    (GPU -> NVSwitch -> GPU = nvlink_latency); each NIC link nic.latency + hop_latency / 2;
//    each switch-to-switch link hop_latency. Same leaf: 2 nic.latency + hop_latency; via a
//    spine + 2 hop_latency; via a core + 4 hop_latency.
//  - Fat-tree mapping: rail r's zone is create_fatTree_zone with the FabricPlan of
//    topologies/graph.hpp as SimGrid's FatTreeParams, levels = fabric.tiers:
//      down = {nodes_per_SU, leaves_per_pod[, pods]}   (children of a level-i switch)
//      up   = {1, spines_per_pod[, cores_per_spine]}   (parents of a level-(i-1) element)
//      number = {1, cables_leaf_spine[, cables_spine_core]} (parallel cables to each parent)
//    i.e. one NIC per node on one leaf; every leaf of a pod wired to every spine of the pod;
//    spine y of every pod to the same cores. Leaf up-capacity (oversubscription), per-rail
//    bisection and switch counts thus equal the Boost graph's; the tests check it link by link,
//    route by route and by simulation. SimGrid's fat tree is regular, so the last SU is padded
//    with unused NIC hosts "rail<r>-spare<k>" and the last pod with unused leaves; those links
//    carry no traffic and are not listed by links(). Routing is SimGrid's static D-mod-K (no
//    adaptive routing, no ECMP). Link bandwidth: the zone's links are created at
//    fabric.link_rate x ib_bandwidth, then its NIC links are set to their node's nic.line_rate x
//    ib_bandwidth and nic.latency (SimGrid takes one bandwidth and latency per fat-tree zone).
//  - What-if scaling (PlatformScaling): NVLink and InfiniBand tiers are created at their scaled
//    bandwidth. Once the zones are built, one pass (one rule) changes single links: first the
//    topology's overrides (topology.hpp link_overrides / switch_overrides, names in
//    topologies/fabric_overrides.hpp): a switch's hop_latency moves each of its links' latency
//    by (hop_latency - fabric.hop_latency) / 2; a link's bandwidth is set to the override x its
//    tier's what-if factor, its latency to the override; then each what-if degraded link's
//    bandwidth is multiplied by its bandwidth_scale (a bandwidth override relative to the rate
//    built). Names are checked before SimGrid is touched (platform_link_names() lists every name
//    without building anything); an override naming an element past this job's platform (a
//    node past its nodes, the cores of a one-pod build) is left out (it carries none of its
//    traffic).
//  - Down elements (link or switch overrides with down: true), worked out before SimGrid is
//    touched: a spine, a core or a switch-to-switch cable down is routed around by the subnet
//    manager's rule of sim/fabric_reroute.hpp; each host pair whose route then differs from
//    SimGrid's D-mod-K gets a bypass route (NetZone::add_bypass_route between its two NIC hosts
//    in its rail's zone), which SimGrid's route lookup takes before the fat tree's own routing,
//    so Host::route_to and the flow network see it. On a dual-plane fabric a NIC port cable or a
//    leaf down takes its ports down (as fabric.ports_down). ConfigError for what cuts ranks off:
//    an NVLink, a loopback or an NVSwitch; a NIC cable or a leaf of a single-plane fabric (with
//    more than one node); every port of a dual-plane NIC; a pair of nodes no route joins. Their
//    links stay in links() with PlatformLink::down set. Cost: one bypass route per rerouted
//    ordered pair of nodes (a spine down of P: about 1/P of a rail's pairs across leaves).
//  - The links of each rail's fat tree are recognized by creation order and SimGrid's names
//    ("link_from_<child>_<parent>_<n>_UP"); build() checks every one against the plan and throws
//    Error on a mismatch (a SimGrid version that wires its fat tree differently).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "topologies/topology.hpp"

namespace simgrid::s4u {
class Engine;
class Host;
class Link;
}  // namespace simgrid::s4u

namespace traintwin {

/// Multiplicative what-if factors applied when building the platform (1.0 = as the file says).
struct PlatformScaling {
  double nvlink_bandwidth = 1.0;
  double ib_bandwidth = 1.0;  ///< NICs and switch-to-switch links
  /// Single links (PlatformLink::name) whose bandwidth is further multiplied by their
  /// bandwidth_scale, after the topology's link overrides (relative to the rate built); a name
  /// given twice multiplies twice.
  std::vector<DegradedLink> degraded_links = {};
};

/// The names of every link Platform::build() lists in links() for `topo` and `num_gpus`, in the
/// same order, without building anything (no SimGrid). Throws ConfigError as plan_fabric().
std::vector<std::string> platform_link_names(const TopologySpec& topo, int64_t num_gpus);

/// Checks `scaling` against the platform of `topo` and `num_gpus` without building it: every
/// factor positive and finite, every degraded link's name a link of links(). Throws ConfigError
/// naming the factor, or the unknown name with the closest name and how names look.
void check_platform_scaling(const TopologySpec& topo, int64_t num_gpus,
                            const PlatformScaling& scaling);

/// What a topology's link_overrides and switch_overrides amount to on the platform of `num_gpus`
/// GPUs (check_overrides()).
struct OverrideSummary {
  int64_t links_set = 0;       ///< link directions given a bandwidth, latency or state
  int64_t links_down = 0;      ///< link directions down (link_overrides)
  int64_t switches_down = 0;   ///< switches down
  int64_t rerouted_pairs = 0;  ///< ordered (rail, node, node) pairs routed around (bypass routes)
  int64_t left_out = 0;        ///< overrides past this platform's nodes, leaves, spines or cores
};

/// Works out the overrides of `topo` on the platform of `num_gpus` GPUs as Platform::build does,
/// without SimGrid. Throws ConfigError as Platform::build (a name not in the platform, a down
/// element that cuts ranks off, a pair of nodes no route joins).
OverrideSummary check_overrides(const TopologySpec& topo, int64_t num_gpus);

/// `topo` with the tier factors of `scaling` applied: node.nvlink_bandwidth_Bps (the node groups'
/// too) x nvlink_bandwidth, nic.line_rate_Bps (the groups' too) and fabric.link_rate_Bps x
/// ib_bandwidth (what the closed forms of collectives must use; degraded links are not in it).
TopologySpec scaled_topology(const TopologySpec& topo, const PlatformScaling& scaling);

/// A link of the platform, for metrics: one direction of a full-duplex cable (or a loopback).
struct PlatformLink {
  /// "node3-gpu5-nvlink-up" (GPU -> NVSwitch) / "-down"; "node3-loopback";
  /// "node3-nic2-up" (NIC -> leaf) / "-down"; "rail2-leaf1-spine3-c0-up" (leaf -> spine, cable
  /// 0) / "-down"; "rail2-spine3-core1-c0-up" / "-down". (link->get_name() is SimGrid's name.)
  std::string name;
  std::string tier;          ///< "nvlink" | "nic" | "leaf-spine" | "spine-core" | "loopback"
  double bandwidth_Bps = 0;  ///< per direction
  std::string from;          ///< vertex the traffic leaves, named as in topologies/graph.hpp
  std::string to;            ///< vertex it enters ("node3-nvswitch", "rail2-leaf1", ...)
  simgrid::s4u::Link* link = nullptr;
  /// A link override or a switch override put it down (no route crosses it).
  bool down = false;
};

/// Most planes of a fabric (FabricSpec::planes).
inline constexpr int64_t kMaxPlanes = 2;

/// Platform::paths(): up to kMaxPlanes host pairs, the first `n` used.
struct TransferPaths {
  std::array<std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*>, kMaxPlanes> path{};
  int64_t n = 0;
};

class Platform {
 public:
  /// Pins the network model (CM02, no cross-traffic, no TCP-gamma; see SIMGRID-NOTES.md), then
  /// builds the zones. Throws ConfigError when num_gpus does not fit the topology
  /// (check_cluster_size), the topology cannot be wired (plan_fabric), `scaling` is refused by
  /// check_platform_scaling() or the topology's overrides are (a name not in the platform, a down
  /// element that cuts ranks off: file comment); Error when `engine` already has a platform.
  /// Nothing is created in `engine` when it throws ConfigError.
  static std::unique_ptr<Platform> build(simgrid::s4u::Engine& engine, const TopologySpec& topo,
                                         int64_t num_gpus, const PlatformScaling& scaling = {});
  virtual ~Platform() = default;

  /// Hosts a transfer from GPU `src` to GPU `dst` goes between (src != dst): the GPU hosts when
  /// both are on one node, else the NIC hosts of rail rail_of_gpu(src) on both nodes (on a
  /// dual-plane fabric: of its first plane that is up; paths() gives every plane). Throws as
  /// paths().
  virtual std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*> endpoints(int64_t src,
                                                                        int64_t dst) const = 0;
  /// The host pairs a transfer from GPU `src` to GPU `dst` is split over in equal parts: one
  /// (endpoints()) inside a node or on a single-plane fabric; on a dual-plane fabric (FabricSpec,
  /// topologies/topology.hpp) one per plane whose NIC ports at both ends are up, port p of NIC r
  /// being fabric rail r x planes + p. Throws InvalidArgument for GPUs out of range or src ==
  /// dst; Error when every plane of the pair's rail has a port down at one end.
  virtual TransferPaths paths(int64_t src, int64_t dst) const = 0;
  /// Every link that can carry traffic (not the padding), for utilization metrics.
  virtual const std::vector<PlatformLink>& links() const = 0;
  virtual const TopologySpec& topology() const = 0;
  virtual int64_t num_gpus() const = 0;
};

}  // namespace traintwin
