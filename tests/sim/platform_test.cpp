// Tests of sim/platform: transfer times against closed forms (CM02 pinned: a lone transfer of S
// bytes takes S / B + latency), sharing of a NIC, oversubscription, the links listed, the
// SimGrid fat tree against the Boost graph link for link and route for route, build times,
// and errors. SimGrid allows one Engine per process; ctest runs each TEST in its own process.
#include "sim/platform.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../topologies/topology_fixtures.hpp"
#include <xbt/log.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <simgrid/s4u.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>
#include <xbt/config.hpp>

#include "core/error.hpp"
#include "platform_transfers.hpp"
#include "simgrid_test_engine.hpp"
#include "topologies/graph.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
namespace sg4 = simgrid::s4u;
using ::testing::HasSubstr;

const fs::path kTopologies = fs::path(TRAINTWIN_SOURCE_DIR) / "topologies";
constexpr double kBytes = 1e9;  // payload of the timed transfers

TopologySpec shipped(const std::string& name) { return load_topology(kTopologies / name); }

TopologySpec small(int tiers, int radix, int nodes_per_su, const std::string& oversubscription,
                   int rails = 2) {
  return testing::small_topology(tiers, radix, nodes_per_su, oversubscription, rails);
}

sg4::Engine& engine() { return testing::simgrid_test_engine(); }

/// A transfer of `bytes` (default kBytes) from GPU src to dst, started now.
sg4::CommPtr transfer(const Platform& p, int64_t src, int64_t dst, double bytes = kBytes) {
  return testing::transfer(p, src, dst, bytes);
}
using testing::run;

/// Expects `actual` within 0.1 % of `expected`.
void expect_close(double actual, double expected) { testing::expect_close(actual, expected, 1e-3); }

// --- closed forms -------------------------------------------------------------------------------

TEST(Platform, SingleTransfersTakeSizeOverBandwidthPlusLatency) {
  const TopologySpec t = shipped("dgx-h100-superpod.yaml");
  const auto p = Platform::build(engine(), t, 1024);
  const double nvlink = t.node.nvlink_bandwidth_Bps, nic = t.nic.line_rate_Bps;
  const double nic_s = t.nic.latency_s, hop_s = t.fabric.hop_latency_s;
  // One at a time: GPU 0 -> 7 (NVLink); GPU 3 -> node 1 (same leaf, rail 3);
  // GPU 3 -> node 32 (SU 1: via a spine).
  const std::tuple<int64_t, int64_t, double> cases[] = {
      {0, 7, kBytes / nvlink + t.node.nvlink_latency_s},
      {3, 8 + 5, kBytes / nic + 2 * nic_s + hop_s},
      {3, 8 * 32 + 1, kBytes / nic + 2 * nic_s + 3 * hop_s},
  };
  for (const auto& [src, dst, expected] : cases) {
    SCOPED_TRACE(fmt::format("GPU {} -> {}", src, dst));
    const double start = sg4::Engine::get_clock();
    sg4::CommPtr c = transfer(*p, src, dst);
    run({c});
    expect_close(c->get_finish_time() - start, expected);
    expect_close(sg4::Engine::get_clock() - start, expected);
  }
  const auto [a, b] = p->endpoints(3, 8 * 32 + 1);
  EXPECT_EQ(a->get_name(), "node0-nic3");
  EXPECT_EQ(b->get_name(), "node32-nic3");  // the receiver's NIC of the sender's rail
  const auto [g, h] = p->endpoints(9, 14);
  EXPECT_EQ(g->get_name(), "node1-gpu1");
  EXPECT_EQ(h->get_name(), "node1-gpu6");
  EXPECT_DOUBLE_EQ(g->get_speed(), t.gpu.peak.bf16_FLOPs);
}

TEST(Platform, ViaACoreAcrossPods) {
  // Radix 8, 4 nodes per SU, three tiers: pods of 4 leaves; 64 nodes = 4 pods per rail.
  const TopologySpec t = small(3, 8, 4, "1:1");
  const auto p = Platform::build(engine(), t, 64 * 2);
  sg4::CommPtr c = transfer(*p, 1, 2 * 16 + 1);  // node 0 -> node 16 (pod 1), rail 1
  run({c});
  expect_close(c->get_finish_time(),
               kBytes / t.nic.line_rate_Bps + 2 * t.nic.latency_s + 5 * t.fabric.hop_latency_s);
}

TEST(Platform, TwoFlowsSharingANicGetHalfItsBandwidth) {
  const TopologySpec t = shipped("dgx-h100-superpod.yaml");
  const auto p = Platform::build(engine(), t, 1024);
  const double nic = t.nic.line_rate_Bps;
  const double leaf_s = 2 * t.nic.latency_s + t.fabric.hop_latency_s;
  // GPU 0 sends to nodes 1 and 2 at once: both leave through node0-nic0.
  std::vector<double> d = run({transfer(*p, 0, 8), transfer(*p, 0, 16)});
  expect_close(d[0], 2 * kBytes / nic + leaf_s);
  expect_close(d[1], 2 * kBytes / nic + leaf_s);
  // Two senders into node 3's NIC 2.
  d = run({transfer(*p, 2, 8 * 3 + 4), transfer(*p, 8 + 2, 8 * 3 + 6)});
  expect_close(d[0], 2 * kBytes / nic + leaf_s);
  expect_close(d[1], 2 * kBytes / nic + leaf_s);
  // Two rails of one node: no sharing. Full duplex: node 4 -> 5 and 5 -> 4 on one rail neither.
  d = run(
      {transfer(*p, 8 * 4, 8 * 5), transfer(*p, 8 * 4 + 1, 8 * 5 + 1), transfer(*p, 8 * 5, 8 * 4)});
  for (double x : d) expect_close(x, kBytes / nic + leaf_s);
  // Intra-node: two flows out of GPU 0's NVLink share it; GPU 1 -> 2 at the same time does not.
  d = run({transfer(*p, 0, 1), transfer(*p, 0, 2), transfer(*p, 3, 4)});
  expect_close(d[0], 2 * kBytes / t.node.nvlink_bandwidth_Bps + t.node.nvlink_latency_s);
  expect_close(d[1], 2 * kBytes / t.node.nvlink_bandwidth_Bps + t.node.nvlink_latency_s);
  expect_close(d[2], kBytes / t.node.nvlink_bandwidth_Bps + t.node.nvlink_latency_s);
}

/// All 4 nodes of SU 0 send to the 4 nodes of SU 1 on rail 0 (node i -> i + 4: the bisection),
/// then nodes 0 -> 1 and 2 -> 3 under one leaf. Radix 16, two tiers, 4 nodes per SU: the leaf has
/// 4 cables up at 1:1 and 2 at 2:1.
void oversubscription_case(const std::string& ratio, double cross_spine_slowdown) {
  const TopologySpec t = small(2, 16, 4, ratio);
  const auto p = Platform::build(engine(), t, 8 * 2);
  const ClusterGraph g = build_cluster_graph(t, 8 * 2);
  const double nic = t.nic.line_rate_Bps;
  const double nic_s = t.nic.latency_s, hop_s = t.fabric.hop_latency_s;
  std::vector<sg4::CommPtr> cross;
  for (int64_t i = 0; i < 4; ++i) cross.push_back(transfer(*p, 2 * i, 2 * (i + 4)));
  const std::vector<double> d = run(cross);
  for (double x : d) expect_close(x, cross_spine_slowdown * kBytes / nic + 2 * nic_s + 3 * hop_s);
  // Aggregate throughput of the bisection on one rail = the graph's bisection / rails.
  expect_close(4 * kBytes / (d[0] - 2 * nic_s - 3 * hop_s), bisection_bandwidth_Bps(g) / 2);
  const std::vector<double> local = run({transfer(*p, 0, 2), transfer(*p, 4, 6)});
  for (double x : local) expect_close(x, kBytes / nic + 2 * nic_s + hop_s);
}

TEST(Platform, NonBlockingLeavesCarryCrossSpineFlowsAtLineRate) {
  oversubscription_case("1:1", 1.0);
}

TEST(Platform, TwoToOneOversubscriptionHalvesCrossSpineFlowsOnly) {
  oversubscription_case("2:1", 2.0);
}

TEST(Platform, WhatIfScaling) {
  const TopologySpec t = shipped("dgx-h100-superpod.yaml");
  const auto p = Platform::build(engine(), t, 64, {2.0, 0.5});
  std::vector<double> d = run({transfer(*p, 0, 1), transfer(*p, 0, 8)});
  expect_close(d[0], kBytes / (2 * t.node.nvlink_bandwidth_Bps) + t.node.nvlink_latency_s);
  expect_close(d[1],
               kBytes / (0.5 * t.nic.line_rate_Bps) + 2 * t.nic.latency_s + t.fabric.hop_latency_s);
}

// The zones have no gateways and the root no routes: transfers inside a zone run, a route
// between zones is refused (SimGrid throws "Bad gateways for route ...").
TEST(Platform, ZonesWithoutGatewaysServeEveryTransferOfEndpoints) {
  const auto p = Platform::build(engine(), shipped("dgx-h100-superpod.yaml"), 16);
  std::vector<sg4::CommPtr> all;
  for (int64_t src = 0; src < 16; ++src) {
    for (int64_t dst = 0; dst < 16; ++dst) {
      if (src != dst) all.push_back(transfer(*p, src, dst, 1e6));
    }
  }
  for (double d : run(all)) EXPECT_GT(d, 0);
  const sg4::Host* gpu0 = p->endpoints(0, 1).first;        // node0-gpu0 ("nodes")
  const auto [nic0, nic1] = p->endpoints(0, 8);            // node0-nic0, node1-nic0
  const sg4::Host* rail1_nic1 = p->endpoints(9, 1).first;  // node1-nic1 ("rail1")
  std::vector<sg4::Link*> links;
  double latency_s = 0;
  nic0->route_to(nic1, links, &latency_s);
  EXPECT_EQ(links.size(), 2u);
  EXPECT_ANY_THROW(gpu0->route_to(nic1, links, &latency_s));
  EXPECT_ANY_THROW(nic0->route_to(rail1_nic1, links, &latency_s));
}

// --- dual-plane fabric --------------------------------------------------------------------------

// hpn-h100-dual-plane (Alibaba HPN, SimAI's DualToR_DualPlane): a transfer between nodes is split
// over its rail's two planes, each NIC port at half the line rate B = 400 Gb/s, so two halves of
// S take latency + (S / 2) / (B / 2) = latency + S / B, as one transfer on a single-plane fabric
// of the same NICs: the collective gets both planes' bandwidth. With node 1's NIC 0 port on plane
// 1 down (hpn-h100-dual-plane-port-down), rail 0 to and from node 1 keeps one path: S over B / 2,
// latency + 2 S / B; rail 1 keeps both. Names, NIC port bandwidths and the graph agree.
TEST(Platform, DualPlaneSplitsOverBothPlanesAndAPortDownHalvesTheRail) {
  const TopologySpec t = shipped("hpn-h100-dual-plane-port-down.yaml");
  const double B = t.nic.line_rate_Bps;
  const double L = 2 * t.nic.latency_s + t.fabric.hop_latency_s;  // same leaf
  const auto p = Platform::build(engine(), t, 16);
  // Rail 0 between nodes 0 and 1: plane 0 only; rail 1: both planes; inside a node: one.
  EXPECT_EQ(p->paths(0, 8).n, 1);
  EXPECT_EQ(p->paths(8, 0).n, 1);
  EXPECT_EQ(p->paths(1, 9).n, 2);
  EXPECT_EQ(p->paths(0, 1).n, 1);
  EXPECT_EQ(p->paths(1, 9).path[1].first->get_name(), "node0-nic1-plane1");
  EXPECT_EQ(p->paths(0, 8).path[0].second->get_name(), "node1-nic0-plane0");
  std::map<std::string, double> bw;
  for (const PlatformLink& l : p->links()) bw[l.name] = l.bandwidth_Bps;
  EXPECT_DOUBLE_EQ(bw.at("node1-nic0-plane1-up"), B / 2);
  EXPECT_DOUBLE_EQ(bw.at("rail0-plane1-leaf0-spine0-c0-up"), t.fabric.link_rate_Bps);
  std::vector<std::string> names;
  for (const PlatformLink& l : p->links()) names.push_back(l.name);
  EXPECT_EQ(names, platform_link_names(t, 16));
  // The graph names the same NIC ports, at the same rate.
  const ClusterGraph g = build_cluster_graph(t, 16);
  const GraphRoute r = route(g, 1, 9);
  EXPECT_EQ(g.vertex(r.vertices.front()).name, "node0-nic1-plane0");
  EXPECT_DOUBLE_EQ(route_bottleneck_Bps(g, r), B / 2);
  // Transfers of S split over the paths, all at once on disjoint rails.
  std::vector<sg4::CommPtr> rail0, rail1;
  const auto start = [](std::pair<sg4::Host*, sg4::Host*> path, double bytes) {
    sg4::CommPtr c = sg4::Comm::sendto_init(path.first, path.second);
    c->set_payload_size(static_cast<uint64_t>(bytes));
    c->start();
    return c;
  };
  rail0.push_back(start(p->paths(0, 8).path[0], kBytes));
  for (size_t k = 0; k < 2; ++k) rail1.push_back(start(p->paths(1, 9).path[k], kBytes / 2));
  engine().run();
  expect_close(rail1[0]->get_finish_time(), L + kBytes / B);  // both planes: S / B
  expect_close(rail1[1]->get_finish_time(), L + kBytes / B);
  expect_close(rail0[0]->get_finish_time(), L + 2 * kBytes / B);  // one port: half
}

TEST(Platform, DualPlanePortsDownOutsideTheClusterAreRefused) {
  TopologySpec t = shipped("hpn-h100-dual-plane.yaml");
  t.fabric.ports_down = {NicPort{2, 0, 1}};  // node2-nic0-plane1
  try {
    Platform::build(engine(), t, 16);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("fabric.ports_down: 'node2-nic0-plane1' is not a port of the "
                          "2 nodes of 16 GPUs (allowed: node<i>-nic<r>-plane<p>, i 0..1)"));
  }
  t.fabric.ports_down = {NicPort{0, 0, 0}, NicPort{0, 0, 1}};
  const auto p = Platform::build(engine(), t, 16);
  try {
    p->paths(0, 8);
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("every plane has a port down at one end"));
  }
}

// --- links and the graph ------------------------------------------------------------------------

// 1024 H100 GPUs: per direction, 1024 NVLinks, 1024 NIC links, 8 rails x 4 leaves x 32 spines
// = 1024 leaf-spine cables (graph_test.cpp; one pod, so no core tier), plus one loopback per
// node: 3 x 2 x 1024 + 128 = 6272 links.
TEST(Platform, Builds1024GpusAndListsEveryLink) {
  const TopologySpec t = shipped("dgx-h100-superpod.yaml");
  const auto p = Platform::build(engine(), t, 1024);
  EXPECT_EQ(p->num_gpus(), 1024);
  EXPECT_EQ(p->topology().name, "dgx-h100-superpod");
  EXPECT_EQ(p->links().size(), 6272u);
  EXPECT_EQ(engine().get_host_count(), 2048u);  // GPU hosts + NIC hosts, no padding
  std::map<std::string, int64_t> per_tier;
  for (const PlatformLink& l : p->links()) {
    ++per_tier[l.tier];
    ASSERT_NE(l.link, nullptr) << l.name;
    EXPECT_DOUBLE_EQ(l.link->get_bandwidth(), l.bandwidth_Bps) << l.name;
  }
  // One pod per rail: two tiers, no spine-core links.
  EXPECT_EQ(per_tier, (std::map<std::string, int64_t>{{"leaf-spine", 2048},
                                                      {"loopback", 128},
                                                      {"nic", 2048},
                                                      {"nvlink", 2048}}));
  const auto find = [&](const std::string& name) {
    for (const PlatformLink& l : p->links()) {
      if (l.name == name) return l;
    }
    ADD_FAILURE() << "no link " << name;
    return PlatformLink{};
  };
  const PlatformLink nvlink = find("node3-gpu5-nvlink-up");
  EXPECT_EQ(nvlink.from, "node3-gpu5");
  EXPECT_EQ(nvlink.to, "node3-nvswitch");
  EXPECT_DOUBLE_EQ(nvlink.link->get_latency(), t.node.nvlink_latency_s / 2);
  const PlatformLink nic = find("node3-nic2-down");
  EXPECT_EQ(nic.from, "rail2-leaf0");
  EXPECT_EQ(nic.to, "node3-nic2");
  EXPECT_DOUBLE_EQ(nic.bandwidth_Bps, t.nic.line_rate_Bps);
  EXPECT_DOUBLE_EQ(nic.link->get_latency(), t.nic.latency_s + t.fabric.hop_latency_s / 2);
  const PlatformLink up = find("rail2-leaf1-spine27-c0-up");
  ASSERT_NE(up.link, nullptr);
  EXPECT_EQ(up.from, "rail2-leaf1");
  EXPECT_EQ(up.to, "rail2-spine27");
  EXPECT_DOUBLE_EQ(up.link->get_latency(), t.fabric.hop_latency_s);
}

/// Both directions of every cable of the graph (except the unmodelled GPU-NIC PCIe hop), as
/// (from, to, tier, bandwidth); and the same for the platform's links.
using Directed = std::tuple<std::string, std::string, std::string, double>;

std::multiset<Directed> graph_cables(const ClusterGraph& g) {
  std::multiset<Directed> out;
  const auto& graph = g.graph();
  for (auto [e, end] = boost::edges(graph); e != end; ++e) {
    const GraphEdge& x = graph[*e];
    if (x.tier == LinkTier::kPcie) continue;
    const std::string& a = graph[boost::source(*e, graph)].name;
    const std::string& b = graph[boost::target(*e, graph)].name;
    out.emplace(a, b, to_string(x.tier), x.bandwidth_Bps);
    out.emplace(b, a, to_string(x.tier), x.bandwidth_Bps);
  }
  return out;
}

// Three tiers, radix 8, 3 nodes per SU at 2:1 (2 cables up), 38 nodes = 13 SUs (the last with 2
// nodes) in 4 pods of up to 4 leaves (the last pod padded with 3 leaves): SimGrid's fat trees
// hold exactly the graph's cables, so per-rail bisection and oversubscription are the graph's;
// and on rail 0 (the first fat tree of the process, whose D-mod-K positions start at 0) SimGrid
// routes through exactly the switches the graph's route() names.
TEST(Platform, FatTreesMatchTheGraphLinkForLinkAndRouteForRoute) {
  const TopologySpec t = small(3, 8, 3, "2:1");
  const auto p = Platform::build(engine(), t, 38 * 2);
  const ClusterGraph g = build_cluster_graph(t, 38 * 2);
  std::multiset<Directed> platform;
  std::unordered_map<const sg4::Link*, const PlatformLink*> by_link;
  for (const PlatformLink& l : p->links()) {
    by_link[l.link] = &l;
    if (l.tier != "loopback") platform.emplace(l.from, l.to, l.tier, l.bandwidth_Bps);
  }
  EXPECT_EQ(platform, graph_cables(g));
  // Padding: 13 leaves x 3 ports = 39 NIC hosts (1 spare) + 3 padding leaves x 3 = 48 per rail.
  EXPECT_EQ(engine().get_host_count(), 76u + 2 * 48u);

  for (const auto& [src, dst] : {std::pair<int64_t, int64_t>{0, 2 * 1},  // same leaf
                                 {0, 2 * 3},                             // same pod
                                 {0, 2 * 37},  // pod 0 -> pod 3 (partial SU, padded pod)
                                 {2 * 37, 2 * 5},
                                 {1, 2 * 20 + 1},  // rail 1: positions offset, same length
                                 {4, 5}}) {        // one node
    SCOPED_TRACE(fmt::format("GPU {} -> {}", src, dst));
    const auto [from, to] = p->endpoints(src, dst);
    std::vector<sg4::Link*> links;
    double latency_s = 0;
    from->route_to(to, links, &latency_s);
    const GraphRoute r = route(g, src, dst);
    ASSERT_EQ(static_cast<int64_t>(links.size()), r.hops());
    EXPECT_NEAR(latency_s, route_latency_s(g, r), 1e-15);
    const bool rail0 = rail_of_gpu(t, src) == 0 || src / 2 == dst / 2;
    for (size_t i = 0; i < links.size(); ++i) {
      ASSERT_TRUE(by_link.count(links[i])) << links[i]->get_name() << " is not listed";
      const PlatformLink& l = *by_link[links[i]];
      const GraphEdge& e = g.edge(r.edges[i]);
      EXPECT_EQ(l.tier, to_string(e.tier));
      if (rail0) {
        EXPECT_EQ(l.from, g.vertex(r.vertices[i]).name);
        EXPECT_EQ(l.to, g.vertex(r.vertices[i + 1]).name);
      }
    }
  }
}

// fabric.spine_oversubscription 2:1 (three tiers, radix 8, 4 nodes per SU, 64 nodes: 4 pods of
// 4 leaves): the fat trees SimGrid builds from the plan hold the graph's cables, half as many
// spine-core ones as non-blocking spines (2 x 16 spines x 2 cables per rail).
TEST(Platform, SpineOversubscriptionMatchesTheGraph) {
  TopologySpec t = small(3, 8, 4, "1:1");
  t.fabric.spine_oversubscription_down = 2;
  const auto p = Platform::build(engine(), t, 64 * 2);
  const ClusterGraph g = build_cluster_graph(t, 64 * 2);
  std::multiset<Directed> platform;
  int64_t spine_core = 0;
  for (const PlatformLink& l : p->links()) {
    if (l.tier != "loopback") platform.emplace(l.from, l.to, l.tier, l.bandwidth_Bps);
    spine_core += l.tier == "spine-core" ? 1 : 0;
  }
  EXPECT_EQ(platform, graph_cables(g));
  EXPECT_EQ(spine_core, 2 * 2 * 16 * 2);  // both directions, 2 rails
}

// --- scale, errors ------------------------------------------------------------------------------

// 16,384 H100 GPUs: 2048 nodes, 8 rails of 64 leaves, 64 spines, 32 cores.
// (Its build time is a benchmark figure: bench/sim_speed.sh.)
TEST(Platform, Builds16384Gpus) {
  const TopologySpec t = shipped("dgx-h100-superpod.yaml");
  const auto p = Platform::build(engine(), t, 16384);
  EXPECT_EQ(p->links().size(), 4u * 2 * 16384 + 2048);
  EXPECT_EQ(engine().get_host_count(), 2u * 16384);
  sg4::CommPtr c = transfer(*p, 8 * 5 + 2, 8 * 1500 + 7);  // pod 0 -> pod 1, rail 2
  run({c});
  expect_close(c->get_finish_time(),
               kBytes / t.nic.line_rate_Bps + 2 * t.nic.latency_s + 5 * t.fabric.hop_latency_s);
}

TEST(Platform, ErrorsBeforeSimGridIsTouchedAndOnlyOnePlatform) {
  const TopologySpec t = shipped("dgx-h100-superpod.yaml");
  try {
    Platform::build(engine(), t, 1020);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("num_gpus = 1020 is not a multiple of gpus_per_node = 8"));
  }
  EXPECT_THROW(Platform::build(engine(), t, 16, {0.0, 1.0}), ConfigError);
  EXPECT_EQ(engine().get_netzone_root(), nullptr);
  const auto p = Platform::build(engine(), t, 16);
  EXPECT_EQ(engine().get_host_count(), 16u + 8 * 32u);  // each rail's leaf padded to 32 NICs
  try {
    Platform::build(engine(), t, 16);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("already has a platform"));
  }
  EXPECT_THROW(p->endpoints(3, 3), InvalidArgument);
  EXPECT_THROW(p->endpoints(0, 16), InvalidArgument);
  // The network model is pinned.
  EXPECT_EQ(simgrid::config::get_value<std::string>("network/model"), "CM02");
  EXPECT_FALSE(simgrid::config::get_value<bool>("network/crosstraffic"));
  EXPECT_EQ(simgrid::config::get_value<double>("network/TCP-gamma"), 0.0);
}

}  // namespace
}  // namespace traintwin
