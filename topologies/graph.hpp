// The cluster as a graph (Boost.Graph): every GPU, NVSwitch, NIC and fabric switch of a cluster of
// `num_gpus` GPUs built from a TopologySpec, every cable between them, routes between GPUs,
// per-tier counts and bandwidths, and the bisection bandwidth of the inter-node fabric. The
// SimGrid platform (sim/platform.hpp) is built from the same FabricPlan, so the two agree link
// for link.
//
// Vertices (named as in the SimGrid platform):
//   gpu       "node<i>-gpu<j>"   GPU j of node i (global GPU index i * gpus_per_node + j)
//   nvswitch  "node<i>-nvswitch" the NVSwitch fabric of node i, as one vertex
//   nic       "node<i>-nic<r>"   NIC r of node i = its port on rail r (dual-plane fabrics:
//             "node<i>-nic<r>-plane<p>", port p of NIC r, and every rail's switches are named
//             "rail<r>-plane<p>-...": each (rail, plane) is a fat tree of its own, a "fabric
//             rail" r x planes + p of FabricPlan; NIC edges carry nic.line_rate / planes)
//   leaf      "rail<r>-leaf<l>"  rail r's leaf of scalable unit l
//   spine     "rail<r>-spine<s>" spine s of rail r's spine group (pod s / spines_per_pod)
//   core      "rail<r>-core<c>"  core c of rail r (three tiers)
// Edges (undirected, full duplex: `bandwidth_Bps` in each direction; one edge per cable):
//   nvlink      GPU - its node's NVSwitch, node.nvlink_bandwidth (each node's own on a mixed
//               cluster: node_spec_of, topologies/topology.hpp; NIC rates likewise)
//   pcie        GPU - its NIC (GPU j uses NIC j * nics_per_node / gpus_per_node) through the
//               node's PCIe switch; the file gives no PCIe figure, so it carries the NIC line
//               rate (PCIe Gen4/Gen5 x16 is faster than HDR/NDR); routes do not use it (below)
//   nic         NIC - its leaf, nic.line_rate
//   leaf-spine  leaf - spine, fabric.link_rate, `cables_leaf_spine` parallel cables per pair
//   spine-core  spine - core, fabric.link_rate, `cables_spine_core` parallel cables per pair
// Edge latencies are shares chosen so that a route's latency is the sum over its edges:
//   nvlink: nvlink_latency / 2 (GPU -> NVSwitch -> GPU = node.nvlink_latency);
//   nic: nic.latency + hop_latency / 2; switch-to-switch: hop_latency. A transfer between nodes
//   then costs 2 nic.latency + (switches crossed) x hop_latency: 1 switch under one leaf, 3 via
//   a spine, 5 via a core.
//
// Wiring (rail-optimized fat tree, NVIDIA DGX SuperPOD style, documented choice):
//  * NIC r of every node of scalable unit (SU) l plugs into leaf l of rail r. A leaf has
//    n = nodes_per_scalable_unit ports down and U = ceil(n * up / down) cables up for an
//    oversubscription "down:up" (1:1 -> U = n). The leaf of a partly populated last SU is
//    cabled as a full one.
//  * Every rail is its own plane: its leaves, spines and cores serve that rail only. NVIDIA's
//    reference architecture (RA) lets the rails meet at the spines so that traffic can change
//    rails in the fabric; traintwin never sends inter-node traffic off the sender's rail (NCCL
//    places any rail change on NVLink, PXN), so for the traffic we model the planes carry what
//    shared spines would: the same leaf up-capacity and a non-blocking layer above it. Planes
//    need more switches than the RA's shared spines (4 SU: 256 spines in 8 planes of 32 vs the
//    RA's 16 with bundled cables).
//  * No parallel leaf-spine cables: SimGrid's fat-tree routing spreads flows over spines by
//    D-mod-K going up but picks among parallel cables by the source going down, which made a
//    shift permutation between two SUs run at half speed on a 1:1 fabric (measured with
//    tests/sim/simulation_test.cpp). So a leaf's U uplinks go to U spines, one cable each.
//  * Two tiers: each rail has P = U spines; every leaf of the rail connects to every spine once.
//    A three-tier file whose leaves fit one pod (leaves_per_rail <= radix/2) is built like this,
//    without its idle core tier.
//  * Three tiers: a rail's leaves form `pods` = ceil(leaves / (radix/2)) pods of
//    a = ceil(leaves / pods) leaves (the last pod may hold fewer). A pod has P2 = U spines; every
//    leaf of a pod connects to each of them with one cable. A spine has S = a cables up, as many
//    as down (non-blocking), or S = ceil(a * up / down) for fabric.spine_oversubscription
//    "down:up". Spine y of every pod connects to the same P3 cores (core y + P2 * z, z < P3)
//    with c3 cables each (c3 = the largest divisor of S with pods * c3 <= radix, P3 = S / c3):
//    P2 * P3 cores per rail. The bundled spine-core cables
//    can still collide for cross-pod traffic (SimGrid's down-path choice, see above).
//  This is an extended generalized fat tree XGFT(levels; down; up; cables), exactly the shape
//  SimGrid's create_fatTree_zone builds (FabricPlan::xgft_*), padded to whole SUs and pods.
//
// Routes (route()): same node: GPU -> NVSwitch -> GPU (2 hops). Different nodes: on the
// sender's rail r (r = local GPU index * nics_per_node / gpus_per_node), from the sender
// node's NIC r to the receiver node's NIC r: NIC -> leaf [-> spine [-> core -> spine] -> leaf]
// -> NIC, the nearest common ancestor first, like the SimGrid platform (whose endpoints are the
// NICs: the GPU-NIC hop is not modelled). Upward choices are D-mod-K on the destination node
// index, as SimGrid's fat tree; downward parallel (spine-core) cables by the source node index.
#pragma once

#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "topologies/topology.hpp"

namespace traintwin {

/// What a vertex of the cluster graph is.
enum class VertexKind { kGpu, kNvSwitch, kNic, kLeaf, kSpine, kCore };
/// "gpu" | "nvswitch" | "nic" | "leaf" | "spine" | "core".
const char* to_string(VertexKind kind);

/// The tier of a cable (edge) of the cluster graph, bottom-up.
enum class LinkTier { kNvlink, kPcie, kNic, kLeafSpine, kSpineCore };
inline constexpr int kNumLinkTiers = 5;
/// "nvlink" | "pcie" | "nic" | "leaf-spine" | "spine-core".
const char* to_string(LinkTier tier);

/// A vertex: a GPU, a node's NVSwitch, a NIC or a fabric switch.
struct GraphVertex {
  VertexKind kind = VertexKind::kGpu;
  std::string name;    ///< e.g. "node3-gpu5", "rail2-leaf1" (see the file comment)
  int64_t node = -1;   ///< GPU, NVSwitch, NIC: its node; -1 for fabric switches
  int64_t rail = -1;   ///< NIC and fabric switches: its rail; -1 inside nodes
  int64_t index = -1;  ///< GPU: index in its node; NIC: rail; leaf: SU; spine, core: in its rail
  int64_t pod = -1;    ///< leaf, spine: its pod (0 with two tiers); -1 otherwise
};

/// A cable, full duplex.
struct GraphEdge {
  LinkTier tier = LinkTier::kNvlink;
  double bandwidth_Bps = 0;  ///< per direction
  double latency_s = 0;      ///< this edge's share of a route's latency (see the file comment)
  int64_t cable = 0;         ///< index among the parallel cables of the same two vertices
};

using ClusterGraphBase =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, GraphVertex, GraphEdge>;
using GraphVertexId = ClusterGraphBase::vertex_descriptor;
using GraphEdgeId = ClusterGraphBase::edge_descriptor;

/// How one rail's fat tree is wired for a cluster size (every rail alike); see the file comment.
/// The xgft_* vectors describe it as SimGrid's FatTreeParams (levels = tiers; level 1 = leaves),
/// padded to whole SUs and pods: xgft_down = {nodes_per_leaf, leaves_per_pod[, pods]},
/// xgft_up = {1, spines_per_pod[, cores_per_spine]}, xgft_cables = {1, cables_leaf_spine[,
/// cables_spine_core]}.
struct FabricPlan {
  int64_t num_gpus = 0;
  int64_t num_nodes = 0;
  int64_t gpus_per_node = 0;
  /// Fabric rails: one fat tree per NIC rail and plane, nic.nics_per_node x planes; fabric
  /// rail f is port f % planes of NIC f / planes.
  int64_t rails = 0;
  int64_t planes = 1;             ///< FabricSpec::planes
  int64_t tiers = 0;              ///< 2 or 3
  int64_t radix = 0;              ///< ports per switch
  int64_t nodes_per_leaf = 0;     ///< nodes per SU: a leaf's ports down
  int64_t leaf_uplinks = 0;       ///< U: a leaf's cables up
  int64_t leaves_per_rail = 0;    ///< populated SUs (the last one may be partial)
  int64_t pods = 1;               ///< 1 with two tiers
  int64_t leaves_per_pod = 0;     ///< a (= leaves_per_rail with two tiers)
  int64_t spines_per_pod = 0;     ///< P (two tiers) or P2
  int64_t cables_leaf_spine = 0;  ///< c or c2: cables between a leaf and each of its spines
  int64_t cores_per_spine = 0;    ///< P3: cores above each spine (0 with two tiers)
  int64_t cables_spine_core = 0;  ///< c3 (0 with two tiers)

  int64_t spines_per_rail() const { return pods * spines_per_pod; }
  int64_t cores_per_rail() const { return tiers == 3 ? spines_per_pod * cores_per_spine : 0; }
  /// Leaves of the regular (padded) tree: pods * leaves_per_pod >= leaves_per_rail.
  int64_t padded_leaves_per_rail() const { return pods * leaves_per_pod; }
  /// Endpoints of the regular (padded) tree: padded leaves * nodes_per_leaf >= num_nodes.
  int64_t padded_nodes() const { return padded_leaves_per_rail() * nodes_per_leaf; }

  std::vector<int64_t> xgft_down() const;
  std::vector<int64_t> xgft_up() const;
  std::vector<int64_t> xgft_cables() const;
  /// How names show fabric rail f: "<r>" with one plane, "<r>-plane<p>" with two.
  std::string rail_label(int64_t f) const;
};

/// Plans the fabric of `num_gpus` GPUs: check_cluster_size(), then the wiring of the file
/// comment. Also checks the TopologySpec fields it relies on (a spec built in code skips the
/// loader). Throws ConfigError naming the field or the size and the rule.
FabricPlan plan_fabric(const TopologySpec& topology, int64_t num_gpus);

/// The rail (= local NIC index) GPU `gpu` sends inter-node traffic on:
/// (gpu % gpus_per_node) * nics_per_node / gpus_per_node.
int64_t rail_of_gpu(const TopologySpec& topology, int64_t gpu);

/// The graph of a cluster with index helpers. Vertex ids are laid out by kind: GPUs (by global
/// index), NVSwitches (by node), NICs (node-major), then leaves, spines and cores (rail-major).
class ClusterGraph {
 public:
  using Graph = ClusterGraphBase;

  ClusterGraph(TopologySpec topology, FabricPlan plan);

  const TopologySpec& topology() const { return topology_; }
  const FabricPlan& plan() const { return plan_; }
  const Graph& graph() const { return graph_; }
  /// Mutable access, for tests that break the graph on purpose before validate_cluster_graph().
  Graph& mutable_graph() { return graph_; }

  GraphVertexId gpu(int64_t gpu) const;
  GraphVertexId nvswitch(int64_t node) const;
  GraphVertexId nic(int64_t node, int64_t rail) const;
  GraphVertexId leaf(int64_t rail, int64_t su) const;
  GraphVertexId spine(int64_t rail, int64_t index) const;
  GraphVertexId core(int64_t rail, int64_t index) const;

  const GraphVertex& vertex(GraphVertexId v) const { return graph_[v]; }
  const GraphEdge& edge(GraphEdgeId e) const { return graph_[e]; }

 private:
  TopologySpec topology_;
  FabricPlan plan_;
  Graph graph_;
};

/// Builds the graph of `num_gpus` GPUs (plan_fabric() checks the size) and validates it.
ClusterGraph build_cluster_graph(const TopologySpec& topology, int64_t num_gpus);

/// Checks a cluster graph: connected; every GPU on its node's NVSwitch; every node with one NIC
/// per rail, each cabled to the leaf of its rail and SU. Throws ConfigError naming the vertex and
/// the rule broken.
void validate_cluster_graph(const ClusterGraph& g);

/// A route: the vertices crossed (hops + 1) and the edges taken.
struct GraphRoute {
  std::vector<GraphVertexId> vertices;
  std::vector<GraphEdgeId> edges;

  int64_t hops() const { return static_cast<int64_t>(edges.size()); }
};

/// The route of a transfer from GPU `src` to GPU `dst` (see the file comment). Throws
/// InvalidArgument when a GPU is out of range or src == dst.
GraphRoute route(const ClusterGraph& g, int64_t src, int64_t dst);
/// Sum of the route's edge latencies, seconds.
double route_latency_s(const ClusterGraph& g, const GraphRoute& r);
/// Smallest edge bandwidth on the route, bytes/s.
double route_bottleneck_Bps(const ClusterGraph& g, const GraphRoute& r);
/// Fewest edges between two vertices (breadth-first search over the whole graph); -1 when
/// unreachable.
int64_t shortest_hops(const ClusterGraph& g, GraphVertexId from, GraphVertexId to);

/// Cables and aggregate bandwidth of one tier.
struct TierSummary {
  LinkTier tier = LinkTier::kNvlink;
  int64_t links = 0;              ///< cables (edges)
  double link_bandwidth_Bps = 0;  ///< of one cable, per direction (0 when none)
  double bandwidth_Bps = 0;       ///< sum over the tier's cables, per direction
};

/// Counts of a cluster graph.
struct GraphCounts {
  int64_t nodes = 0;
  int64_t gpus = 0;
  int64_t nvswitches = 0;
  int64_t nics = 0;
  int64_t leaves = 0;  ///< all rails
  int64_t spines = 0;
  int64_t cores = 0;
  std::vector<TierSummary> tiers;  ///< indexed by LinkTier, all kNumLinkTiers of them
};

GraphCounts count_graph(const ClusterGraph& g);

/// Bisection bandwidth of the inter-node fabric, bytes/s in one direction: the most the first
/// half of the nodes (0 .. N/2-1) can send to the second half (N/2 .. 2*(N/2)-1) at once,
/// every rail, NIC to NIC (a node left over when N is odd takes no part; one node: 0).
/// Fat-tree formula, per rail, bottom-up: under each leaf, half A and half B nodes pair up at
/// their NICs' rates (min of the two halves' sums under the leaf); what is left goes up, at most U x link_rate per leaf; the pods (with two tiers,
/// the whole rail) pair up what comes up, the rest leaves the pod at most a x c2 x P2 x link_rate
/// per pod and pairs up at the cores. For whole SUs and whole pods split evenly this is
///   rails x min(N/2 x line_rate, leaves/2 x U x link_rate [, pods/2 x pod up-capacity]).
/// The tests check it against a Boost.Graph max-flow.
double bisection_bandwidth_Bps(const ClusterGraph& g);

/// Human-readable summary for the CLI: wiring, switches and links per tier with their
/// bandwidth, bisection bandwidth and route hop counts; every line ends in '\n'.
std::string describe_cluster_graph(const ClusterGraph& g);

}  // namespace traintwin
