// Tests of topologies/graph: counts per tier for the shipped topologies (worked by hand from the
// wiring rules of graph.hpp), connectivity and rail alignment, route lengths against BFS,
// the bisection formula against a Boost.Graph max-flow, and the errors for broken input.
#include "topologies/graph.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "topology_fixtures.hpp"

#include <boost/graph/push_relabel_max_flow.hpp>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "tests/config_error_of.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

namespace fs = std::filesystem;
const fs::path kTopologies = fs::path(TRAINTWIN_SOURCE_DIR) / "topologies";

using testing::config_error_of;

TopologySpec small(int tiers, int radix, int nodes_per_su, const std::string& oversubscription,
                   int rails = 2) {
  return testing::small_topology(tiers, radix, nodes_per_su, oversubscription, rails);
}

TopologySpec shipped(const std::string& name) { return load_topology(kTopologies / name); }

/// Max-flow from the NICs of nodes [0, N/2) to those of [N/2, 2*(N/2)), every rail, over the
/// inter-node fabric (nic, leaf-spine, spine-core cables; full duplex), with Boost's push-relabel.
double max_flow_Bps(const ClusterGraph& g) {
  using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
  using FlowGraph = boost::adjacency_list<
      boost::vecS, boost::vecS, boost::directedS, boost::no_property,
      boost::property<
          boost::edge_capacity_t, int64_t,
          boost::property<boost::edge_residual_capacity_t, int64_t,
                          boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;
  const auto& graph = g.graph();
  const size_t n = boost::num_vertices(graph);
  FlowGraph f(n + 2);
  const size_t source = n, sink = n + 1;
  auto capacity = boost::get(boost::edge_capacity, f);
  auto reverse = boost::get(boost::edge_reverse, f);
  // A pair of opposite arcs, each the other's reverse: cap_ab one way, cap_ba the other.
  const auto arc_pair = [&](size_t a, size_t b, int64_t cap_ab, int64_t cap_ba) {
    const auto ab = boost::add_edge(a, b, f).first;
    const auto ba = boost::add_edge(b, a, f).first;
    capacity[ab] = cap_ab;
    capacity[ba] = cap_ba;
    reverse[ab] = ba;
    reverse[ba] = ab;
  };
  for (auto [e, end] = boost::edges(graph); e != end; ++e) {
    const GraphEdge& x = graph[*e];
    if (x.tier == LinkTier::kNvlink || x.tier == LinkTier::kPcie) continue;
    const auto cap = static_cast<int64_t>(x.bandwidth_Bps);
    arc_pair(boost::source(*e, graph), boost::target(*e, graph), cap, cap);
  }
  const FabricPlan& p = g.plan();
  const int64_t half = p.num_nodes / 2;
  constexpr int64_t kUnlimited = int64_t{1} << 60;
  for (int64_t node = 0; node < 2 * half; ++node) {
    for (int64_t r = 0; r < p.rails; ++r) {
      if (node < half) {
        arc_pair(source, g.nic(node, r), kUnlimited, 0);
      } else {
        arc_pair(g.nic(node, r), sink, kUnlimited, 0);
      }
    }
  }
  return static_cast<double>(boost::push_relabel_max_flow(f, source, sink));
}

// Dual plane (hpn-h100-dual-plane, 1024 GPUs = 128 nodes = 4 SUs): every (rail, plane) is a
// fat tree of its own, so twice the NIC ports, leaves and spines of the single-plane H100 build
// (2 x 1024 ports at 200 Gb/s, 2 x 32 leaves, 2 x 256 spines) and the same NIC bandwidth in all;
// the bisection formula agrees with the max-flow and equals the single-plane fabric's.
TEST(ClusterGraph, DualPlaneDoublesTheSwitchesNotTheBandwidth) {
  const TopologySpec t = shipped("hpn-h100-dual-plane.yaml");
  const ClusterGraph g = build_cluster_graph(t, 1024);
  const GraphCounts c = count_graph(g);
  EXPECT_EQ(c.nics, 2048);
  EXPECT_EQ(c.leaves, 64);
  EXPECT_EQ(c.spines, 512);
  const auto tier = [&](LinkTier k) { return c.tiers[static_cast<size_t>(k)]; };
  EXPECT_EQ(tier(LinkTier::kNic).links, 2048);
  EXPECT_DOUBLE_EQ(tier(LinkTier::kNic).link_bandwidth_Bps, t.nic.line_rate_Bps / 2);
  EXPECT_DOUBLE_EQ(tier(LinkTier::kNic).bandwidth_Bps, 1024 * t.nic.line_rate_Bps);
  EXPECT_EQ(tier(LinkTier::kPcie).links, 2048);  // each GPU to both ports of its NIC
  const double bisection = bisection_bandwidth_Bps(g);
  EXPECT_NEAR(bisection, max_flow_Bps(g), 1e-6 * bisection);
  const ClusterGraph single = build_cluster_graph(shipped("dgx-h100-superpod.yaml"), 1024);
  EXPECT_NEAR(bisection, bisection_bandwidth_Bps(single), 1e-6 * bisection);
  EXPECT_EQ(g.vertex(g.nic(3, 5)).name, "node3-nic2-plane1");
  EXPECT_EQ(g.vertex(g.leaf(5, 1)).name, "rail2-plane1-leaf1");
}

// --- counts -------------------------------------------------------------------------------------

struct Expected {
  const char* file;
  int64_t leaves, spines, cores, leaf_spine, spine_core;
};

// 1024 GPUs = 128 DGX nodes, 8 rails (graph.hpp wiring rules): the leaves of a rail fit one pod,
// so the three-tier files build two tiers, one cable from every leaf to each spine.
//  H100/H200: radix 64, 32 nodes/SU -> 4 leaves per rail; U = 32 cables up -> 32 spines per
//    rail; leaf-spine cables 4 * 32 = 128 per rail, 1024 in all; no core.
//  A100: radix 40, 20 nodes/SU -> 7 leaves per rail (the 7th holds 8 nodes); U = 20 -> 20
//    spines per rail; 7 * 20 = 140 cables per rail, 1120 in all.
TEST(ClusterGraph, CountsFor1024GpusOfEveryShippedTopology) {
  const Expected cases[] = {
      {"dgx-h100-superpod.yaml", 32, 256, 0, 1024, 0},
      {"dgx-h200-superpod.yaml", 32, 256, 0, 1024, 0},
      {"dgx-a100-superpod.yaml", 56, 160, 0, 1120, 0},
  };
  for (const Expected& x : cases) {
    SCOPED_TRACE(x.file);
    const TopologySpec t = shipped(x.file);
    const ClusterGraph g = build_cluster_graph(t, 1024);
    const GraphCounts c = count_graph(g);
    EXPECT_EQ(c.nodes, 128);
    EXPECT_EQ(c.gpus, 1024);
    EXPECT_EQ(c.nvswitches, 128);
    EXPECT_EQ(c.nics, 1024);
    EXPECT_EQ(c.leaves, x.leaves);
    EXPECT_EQ(c.spines, x.spines);
    EXPECT_EQ(c.cores, x.cores);
    const auto tier = [&](LinkTier k) { return c.tiers[static_cast<size_t>(k)]; };
    EXPECT_EQ(tier(LinkTier::kNvlink).links, 1024);
    EXPECT_EQ(tier(LinkTier::kPcie).links, 1024);
    EXPECT_EQ(tier(LinkTier::kNic).links, 1024);
    EXPECT_EQ(tier(LinkTier::kLeafSpine).links, x.leaf_spine);
    EXPECT_EQ(tier(LinkTier::kSpineCore).links, x.spine_core);
    EXPECT_EQ(static_cast<int64_t>(boost::num_vertices(g.graph())),
              1024 + 128 + 1024 + x.leaves + x.spines + x.cores);
    EXPECT_EQ(static_cast<int64_t>(boost::num_edges(g.graph())),
              3 * 1024 + x.leaf_spine + x.spine_core);
    // Per-tier aggregate bandwidth, per direction.
    EXPECT_DOUBLE_EQ(tier(LinkTier::kNvlink).bandwidth_Bps, 1024 * t.node.nvlink_bandwidth_Bps);
    EXPECT_DOUBLE_EQ(tier(LinkTier::kNic).bandwidth_Bps, 1024 * t.nic.line_rate_Bps);
    EXPECT_DOUBLE_EQ(tier(LinkTier::kLeafSpine).bandwidth_Bps,
                     static_cast<double>(x.leaf_spine) * t.fabric.link_rate_Bps);
    EXPECT_DOUBLE_EQ(tier(LinkTier::kSpineCore).bandwidth_Bps, 0.0);
  }
}

// Two tiers, radix 64, 32 nodes per SU, 8 rails: the leaves of NVIDIA's DGX H100 RA component
// table (4 SU = 32, 8 SU = 64); spines per rail plane = the 32 uplinks of a leaf, one cable each
// (the RA bundles 2 cables per leaf-spine pair onto 16 / 32 shared spines: same capacity).
TEST(ClusterGraph, TwoTierSwitchCountsPerRailPlane) {
  const TopologySpec t = small(2, 64, 32, "1:1", 8);
  for (const auto& [sus, leaves, spines] : {std::tuple{4, 32, 256}, std::tuple{8, 64, 256}}) {
    const ClusterGraph g = build_cluster_graph(t, sus * 32 * 8);
    const GraphCounts c = count_graph(g);
    EXPECT_EQ(c.leaves, leaves);
    EXPECT_EQ(c.spines, spines);
    EXPECT_EQ(c.cores, 0);
    EXPECT_EQ(c.tiers[static_cast<size_t>(LinkTier::kLeafSpine)].links, leaves * 32);
    EXPECT_EQ(c.tiers[static_cast<size_t>(LinkTier::kSpineCore)].links, 0);
  }
}

// 16 SU of H100 (4096 GPUs): 16 leaves per rail fit one pod (<= 32), so no core tier: 128
// leaves, 32 spines per rail = 256.
TEST(ClusterGraph, SixteenScalableUnitsFitOnePod) {
  const GraphCounts c = count_graph(build_cluster_graph(shipped("dgx-h100-superpod.yaml"), 4096));
  EXPECT_EQ(c.leaves, 128);
  EXPECT_EQ(c.spines, 256);
  EXPECT_EQ(c.cores, 0);
}

// 16,384 H100 GPUs = 2048 nodes = 64 SU: per rail 64 leaves in 2 pods of 32; one cable per
// leaf-spine pair, 32 spines per pod; spines 32 up, 2 pods -> c3 = 32 (2 * 32 <= 64 ports),
// 1 core per spine position.
TEST(ClusterGraph, ThreeTiersWithTwoPods) {
  const ClusterGraph g = build_cluster_graph(shipped("dgx-h100-superpod.yaml"), 16384);
  const FabricPlan& p = g.plan();
  EXPECT_EQ(p.pods, 2);
  EXPECT_EQ(p.leaves_per_pod, 32);
  EXPECT_EQ(p.spines_per_pod, 32);
  EXPECT_EQ(p.cables_leaf_spine, 1);
  EXPECT_EQ(p.cores_per_spine, 1);
  EXPECT_EQ(p.cables_spine_core, 32);
  EXPECT_EQ(p.xgft_down(), (std::vector<int64_t>{32, 32, 2}));
  EXPECT_EQ(p.xgft_up(), (std::vector<int64_t>{1, 32, 1}));
  EXPECT_EQ(p.xgft_cables(), (std::vector<int64_t>{1, 1, 32}));
  const GraphCounts c = count_graph(g);
  EXPECT_EQ(c.leaves, 512);
  EXPECT_EQ(c.spines, 512);
  EXPECT_EQ(c.cores, 256);
  EXPECT_EQ(c.tiers[static_cast<size_t>(LinkTier::kLeafSpine)].links, 16384);
  EXPECT_EQ(c.tiers[static_cast<size_t>(LinkTier::kSpineCore)].links, 16384);
  // Every switch uses at most its radix; spines as many ports up as down.
  const auto& graph = g.graph();
  for (auto [v, end] = boost::vertices(graph); v != end; ++v) {
    const GraphVertex& x = graph[*v];
    if (x.kind == VertexKind::kGpu || x.kind == VertexKind::kNvSwitch ||
        x.kind == VertexKind::kNic) {
      continue;
    }
    EXPECT_LE(static_cast<int64_t>(boost::out_degree(*v, graph)), 64) << x.name;
  }
  EXPECT_EQ(boost::out_degree(g.spine(3, 40), graph), 64u);
  EXPECT_EQ(boost::out_degree(g.core(3, 5), graph), 64u);
}

TEST(ClusterGraph, ConnectedAndRailAligned) {
  const ClusterGraph g = build_cluster_graph(shipped("dgx-a100-superpod.yaml"), 1024);
  EXPECT_NO_THROW(validate_cluster_graph(g));
  const auto& graph = g.graph();
  // Node 127 (SU 6, the partial one): NIC r on rail r's leaf 6; GPU j on NIC j.
  for (int64_t r = 0; r < 8; ++r) {
    const GraphVertexId nic = g.nic(127, r);
    EXPECT_EQ(graph[nic].name, fmt::format("node127-nic{}", r));
    EXPECT_TRUE(boost::edge(nic, g.leaf(r, 6), graph).second);
    EXPECT_TRUE(boost::edge(g.gpu(127 * 8 + r), nic, graph).second);
    EXPECT_EQ(graph[g.leaf(r, 6)].name, fmt::format("rail{}-leaf6", r));
  }
  // GPU-NIC-leaf-spine-leaf-NIC-GPU on rail 0; to another rail's GPU add NVSwitch and NVLink.
  EXPECT_EQ(shortest_hops(g, g.gpu(0), g.gpu(1016)), 6);
  EXPECT_EQ(shortest_hops(g, g.gpu(0), g.gpu(1023)), 8);
}

// --- routes -------------------------------------------------------------------------------------

TEST(GraphRoutes, LengthsLatenciesAndShortestPaths) {
  const TopologySpec t = shipped("dgx-h100-superpod.yaml");
  const ClusterGraph g = build_cluster_graph(t, 16384);
  const double nic_s = t.nic.latency_s, hop_s = t.fabric.hop_latency_s;
  struct Case {
    int64_t src, dst, hops;
    double latency_s;
  };
  const Case cases[] = {
      {0, 7, 2, t.node.nvlink_latency_s},           // intra-node
      {3, 8 * 31 + 5, 2, 2 * nic_s + hop_s},        // node 0 -> 31: same leaf
      {3, 8 * 32 + 3, 4, 2 * nic_s + 3 * hop_s},    // SU 0 -> SU 1: via a spine
      {3, 8 * 1023 + 1, 4, 2 * nic_s + 3 * hop_s},  // SU 31: last leaf of pod 0
      {3, 8 * 1024, 6, 2 * nic_s + 5 * hop_s},      // pod 0 -> pod 1: via a core
      {16383, 0, 6, 2 * nic_s + 5 * hop_s},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("GPU {} -> {}", c.src, c.dst));
    const GraphRoute r = route(g, c.src, c.dst);
    EXPECT_EQ(r.hops(), c.hops);
    EXPECT_EQ(r.vertices.size(), r.edges.size() + 1);
    EXPECT_NEAR(route_latency_s(g, r), c.latency_s, 1e-15);
    EXPECT_EQ(shortest_hops(g, r.vertices.front(), r.vertices.back()), c.hops);
    const auto& graph = g.graph();
    if (c.hops > 2 || graph[r.vertices.front()].kind == VertexKind::kNic) {
      // On the sender's rail from the sender's NIC to the receiver's NIC of that rail.
      const int64_t rail = rail_of_gpu(t, c.src);
      EXPECT_EQ(r.vertices.front(), g.nic(c.src / 8, rail));
      EXPECT_EQ(r.vertices.back(), g.nic(c.dst / 8, rail));
      for (GraphVertexId v : r.vertices) EXPECT_EQ(graph[v].rail, rail) << graph[v].name;
      EXPECT_DOUBLE_EQ(route_bottleneck_Bps(g, r), t.nic.line_rate_Bps);
    }
    // Consecutive vertices are the ends of each edge.
    for (size_t i = 0; i < r.edges.size(); ++i) {
      const auto a = boost::source(r.edges[i], graph), b = boost::target(r.edges[i], graph);
      EXPECT_TRUE((a == r.vertices[i] && b == r.vertices[i + 1]) ||
                  (b == r.vertices[i] && a == r.vertices[i + 1]));
    }
  }
  EXPECT_THROW(route(g, 5, 5), InvalidArgument);
  EXPECT_THROW(route(g, 0, 16384), InvalidArgument);
}

// D-mod-K: SU 0 sending to SU 1 (a shift permutation) on one rail uses every leaf-spine cable of
// both leaves once, up and down: no two flows share a cable.
TEST(GraphRoutes, DModKSpreadsAShiftPermutation) {
  for (const char* ratio : {"1:1", "2:1"}) {
    SCOPED_TRACE(ratio);
    const TopologySpec t = small(2, 16, 8, ratio, 2);  // 8 nodes per SU, U = 8 or 4
    const ClusterGraph g = build_cluster_graph(t, 2 * 8 * 2);
    std::multiset<GraphEdgeId> up, down;
    for (int64_t i = 0; i < 8; ++i) {
      const GraphRoute r = route(g, i * 2, (i + 8) * 2);  // rail 0
      ASSERT_EQ(r.hops(), 4);
      up.insert(r.edges[1]);
      down.insert(r.edges[2]);
    }
    const size_t cables = static_cast<size_t>(g.plan().leaf_uplinks);
    std::set<GraphEdgeId> distinct_up(up.begin(), up.end());
    std::set<GraphEdgeId> distinct_down(down.begin(), down.end());
    EXPECT_EQ(distinct_up.size(), cables);  // 8 flows on U cables: 8/U per cable
    EXPECT_EQ(distinct_down.size(), cables);
  }
}

// --- bisection ----------------------------------------------------------------------------------

TEST(GraphBisection, FormulaMatchesBoostMaxFlow) {
  struct Case {
    int tiers, radix, nodes_per_su;
    const char* ratio;
    int rails;
    int64_t nodes;
  };
  const Case cases[] = {
      {2, 8, 4, "1:1", 2, 8},    // 2 whole SUs
      {2, 8, 4, "1:1", 2, 7},    // odd: node 6 takes no part
      {2, 8, 4, "1:1", 2, 6},    // partial SU: nodes 0-2 vs 3-5 share leaf 0
      {2, 8, 4, "1:1", 1, 1},    // one node
      {2, 8, 4, "1:1", 2, 4},    // one SU: everything under one leaf
      {2, 12, 4, "2:1", 2, 12},  // 3 SUs, 2 cables up per leaf
      {2, 12, 6, "3:1", 2, 18},  // U = 2, SU 1 split by the halves
      {2, 16, 5, "3:2", 2, 15},  // U = ceil(10/3) = 4
      {3, 8, 4, "1:1", 2, 40},   // 10 SU per rail: 3 pods of up to 4 leaves
      {3, 8, 4, "1:1", 2, 64},   // 4 pods of 4 leaves
      {3, 8, 2, "1:1", 2, 18},   // 9 leaves: 3 pods of 3
      {3, 8, 4, "2:1", 2, 64},   // oversubscribed leaves under a non-blocking core
      {3, 12, 4, "1:1", 2, 42},  // 11 SU, pods of 6 and 5
      {3, 8, 3, "2:1", 1, 50},   // partial last SU, pods uneven
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} tiers, radix {}, {} nodes/SU, {}, {} rails, {} nodes", c.tiers,
                             c.radix, c.nodes_per_su, c.ratio, c.rails, c.nodes));
    const TopologySpec t = small(c.tiers, c.radix, c.nodes_per_su, c.ratio, c.rails);
    const ClusterGraph g = build_cluster_graph(t, c.nodes * c.rails);
    const double formula = bisection_bandwidth_Bps(g);
    EXPECT_DOUBLE_EQ(formula, max_flow_Bps(g));
    const double half_injection = static_cast<double>(c.nodes / 2 * c.rails) * t.nic.line_rate_Bps;
    EXPECT_LE(formula, half_injection);
  }
}

// fabric.spine_oversubscription 2:1 on three tiers: 64 nodes in 16 SUs per rail = 4 pods of 4
// leaves (radix 8); 4 spines per pod (1:1 leaves, 4 nodes each). A non-blocking spine has 4
// cables up (c3 = 2 to each of P3 = 2 cores: 8 cores per rail); at 2:1 it has 2 (one core of 2
// cables: 4 cores per rail), and the halves 0-31 / 32-63 (pods 0-1 / 2-3) exchange through the
// pods' uplinks only: 8 instead of 16 cables per pod, so the bisection halves (max flow agrees).
TEST(GraphBisection, SpineOversubscriptionHalvesTheCoreTier) {
  TopologySpec t = small(3, 8, 4, "1:1", 2);
  const ClusterGraph full = build_cluster_graph(t, 64 * 2);
  t.fabric.spine_oversubscription_down = 2;
  const ClusterGraph half = build_cluster_graph(t, 64 * 2);
  EXPECT_EQ(full.plan().cores_per_spine, 2);
  EXPECT_EQ(full.plan().cables_spine_core, 2);
  EXPECT_EQ(half.plan().cores_per_spine, 1);
  EXPECT_EQ(half.plan().cables_spine_core, 2);
  const size_t core_tier = static_cast<size_t>(LinkTier::kSpineCore);
  EXPECT_EQ(count_graph(full).tiers[core_tier].links, 2 * 16 * 4);
  EXPECT_EQ(count_graph(half).tiers[core_tier].links, 2 * 16 * 2);
  EXPECT_EQ(count_graph(full).cores, 2 * 8);
  EXPECT_EQ(count_graph(half).cores, 2 * 4);
  const double link_Bps = t.fabric.link_rate_Bps;
  EXPECT_DOUBLE_EQ(bisection_bandwidth_Bps(full), 2 * 2 * 16 * link_Bps);
  EXPECT_DOUBLE_EQ(bisection_bandwidth_Bps(half), 2 * 2 * 8 * link_Bps);
  EXPECT_DOUBLE_EQ(bisection_bandwidth_Bps(half), max_flow_Bps(half));
  EXPECT_NO_THROW(validate_cluster_graph(half));
  // More cables up than the radix leaves: refused, naming the key.
  t.fabric.spine_oversubscription_down = 1;
  t.fabric.spine_oversubscription_up = 2;
  EXPECT_THAT(config_error_of([&] { (void)build_cluster_graph(t, 64 * 2); }),
              HasSubstr("fabric.spine_oversubscription 1:2 gives a spine 4 cables down and 8 "
                        "up, more than its radix 8"));
}

TEST(GraphBisection, FullForNonBlockingHalfForTwoToOne) {
  // H100 1024 GPUs: 64 nodes x 8 rails x 50 GB/s = 25.6 TB/s, non-blocking.
  const ClusterGraph h100 = build_cluster_graph(shipped("dgx-h100-superpod.yaml"), 1024);
  EXPECT_DOUBLE_EQ(bisection_bandwidth_Bps(h100), 64 * 8 * 50e9);
  // 2:1 leaves, 4 SUs of 16 nodes on two tiers: each leaf sends 16 x 50 GB/s through 8 cables.
  const ClusterGraph two_to_one = build_cluster_graph(small(2, 48, 16, "2:1", 8), 64 * 8);
  EXPECT_DOUBLE_EQ(bisection_bandwidth_Bps(two_to_one), 32 * 8 * 50e9 / 2);
  EXPECT_DOUBLE_EQ(bisection_bandwidth_Bps(two_to_one), max_flow_Bps(two_to_one));
}

// --- errors -------------------------------------------------------------------------------------

TEST(GraphErrors, SizesThatDoNotFit) {
  const TopologySpec t = shipped("dgx-h100-superpod.yaml");
  EXPECT_THAT(config_error_of([&] { build_cluster_graph(t, 1020); }),
              AllOf(HasSubstr("num_gpus = 1020"), HasSubstr("gpus_per_node = 8")));
  EXPECT_THAT(config_error_of([&] { build_cluster_graph(t, 0); }), HasSubstr("num_gpus = 0"));
  EXPECT_THAT(config_error_of([&] { build_cluster_graph(t, 8 * 8200); }),
              AllOf(HasSubstr("8200 nodes"), HasSubstr("8192 nodes")));
}

TEST(GraphErrors, InconsistentSpecBuiltInCode) {
  TopologySpec t = small(2, 8, 4, "1:1");
  t.fabric.leaf_switches_per_scalable_unit = 3;
  EXPECT_THAT(config_error_of([&] { build_cluster_graph(t, 8); }),
              AllOf(HasSubstr("fabric.leaf_switches_per_scalable_unit = 3"),
                    HasSubstr("nic.nics_per_node = 2")));
  t = small(2, 8, 4, "1:1");
  t.fabric.tiers = 4;
  EXPECT_THAT(config_error_of([&] { build_cluster_graph(t, 8); }),
              HasSubstr("fabric.tiers = 4 (allowed: 2, 3)"));
  t = small(2, 8, 4, "1:1");
  t.fabric.nodes_per_scalable_unit = 5;
  EXPECT_THAT(config_error_of([&] { build_cluster_graph(t, 8); }),
              HasSubstr("fabric.nodes_per_scalable_unit = 5 does not fit"));
  t = small(2, 8, 4, "1:1");
  t.fabric.link_rate_Bps = 0;
  EXPECT_THAT(config_error_of([&] { build_cluster_graph(t, 8); }),
              HasSubstr("fabric.link_rate = 0"));
}

TEST(GraphErrors, DisconnectedGraph) {
  ClusterGraph g(small(2, 8, 4, "1:1"), plan_fabric(small(2, 8, 4, "1:1"), 16));
  EXPECT_NO_THROW(validate_cluster_graph(g));
  boost::clear_vertex(g.nvswitch(5), g.mutable_graph());
  EXPECT_THAT(config_error_of([&] { validate_cluster_graph(g); }),
              AllOf(HasSubstr("disconnected into 2 parts"), HasSubstr("'node5-nvswitch'")));
}

TEST(GraphErrors, NicOnTheWrongLeafOrNone) {
  const TopologySpec t = small(2, 8, 4, "1:1");
  ClusterGraph g(t, plan_fabric(t, 16));  // 8 nodes, 2 SUs, 2 rails
  auto& graph = g.mutable_graph();
  // Move node 5's NIC 1 from rail 1's leaf of SU 1 to rail 0's.
  boost::remove_edge(g.nic(5, 1), g.leaf(1, 1), graph);
  boost::add_edge(g.nic(5, 1), g.leaf(0, 1), GraphEdge{LinkTier::kNic, 50e9, 0, 0}, graph);
  EXPECT_THAT(
      config_error_of([&] { validate_cluster_graph(g); }),
      AllOf(HasSubstr("NIC 'node5-nic1' is cabled to 'rail0-leaf1'"), HasSubstr("'rail1-leaf1'")));
  boost::remove_edge(g.nic(5, 1), g.leaf(0, 1), graph);
  EXPECT_THAT(config_error_of([&] { validate_cluster_graph(g); }),
              HasSubstr("NIC 'node5-nic1' is cabled to no leaf"));
  // A node without its NIC on rail 0: the vertex now claims rail 1 (two NICs on rail 1).
  ClusterGraph h(t, plan_fabric(t, 16));
  auto& hg = h.mutable_graph();
  boost::clear_vertex(h.nic(2, 0), hg);
  hg[h.nic(2, 0)].rail = 1;
  boost::add_edge(h.nic(2, 0), h.leaf(1, 0), GraphEdge{LinkTier::kNic, 50e9, 0, 0}, hg);
  boost::add_edge(h.nic(2, 0), h.gpu(2 * 2), GraphEdge{LinkTier::kPcie, 50e9, 0, 0}, hg);
  EXPECT_THAT(config_error_of([&] { validate_cluster_graph(h); }),
              HasSubstr("node 2 has 0 NICs on rail 0 (expected one NIC per rail, 2 rails)"));
}

// --- summary ------------------------------------------------------------------------------------

TEST(ClusterGraph, SummaryForTheCli) {
  const ClusterGraph g = build_cluster_graph(shipped("dgx-h100-superpod.yaml"), 16384);
  const std::string s = describe_cluster_graph(g);
  EXPECT_THAT(s, AllOf(HasSubstr("16384 GPUs = 2048 nodes x 8 GPUs, 8 rails, 3-tier"),
                       HasSubstr("512 leaf, 512 spine, 256 core"),
                       HasSubstr("leaf-spine   16384 x    50 GB/s = 819.2 TB/s"),
                       HasSubstr("bisection 409600.0 GB/s between nodes 0-1023 and 1024-2047 "
                                 "(100% of their NICs' line rate)"),
                       HasSubstr("intra-node 2 hops (1 us)"), HasSubstr("same leaf 2 hops"),
                       HasSubstr("via spine (same pod) 4 hops"), HasSubstr("via core 6 hops")));
  const std::string one_node =
      describe_cluster_graph(build_cluster_graph(shipped("dgx-h100-superpod.yaml"), 8));
  EXPECT_THAT(one_node, AllOf(HasSubstr("bisection none: one node"),
                              HasSubstr("same leaf: none at this size"),
                              HasSubstr("via spine: none at this size")));
}

}  // namespace
}  // namespace traintwin
