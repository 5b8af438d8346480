// Tests of a topology's link_overrides and switch_overrides on the SimGrid platform
// (sim/platform.hpp) and of the rerouting rule (sim/fabric_reroute.hpp): lone transfers over an
// overridden link against the closed form (CM02 pinned: latency + S / B), a bandwidth override
// against the what-if degraded link, routes around a spine and a core down checked link by link
// (SimGrid's Host::route_to and the flow network's routes), a shift permutation between two
// leaves slowed by the amount worked out by hand, and the refusals of what cuts ranks off.
// SimGrid allows one Engine per process: ctest runs each TEST in its own process, and tests
// that compare two platforms build each in a child (run_isolated).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <fmt/ranges.h>
#include <map>
#include <optional>
#include <simgrid/s4u.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "sim/fabric_reroute.hpp"
#include "sim/flow_network.hpp"
#include "sim/isolated.hpp"
#include "sim/platform.hpp"
#include "platform_transfers.hpp"
#include "simgrid_test_engine.hpp"
#include "topologies/graph.hpp"

namespace traintwin {
namespace {

namespace sg4 = simgrid::s4u;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kBytes = 1e9;
constexpr double kNic_Bps = 50e9;   // 400 Gb/s
constexpr double kNic_s = 600e-9;   // nic.latency
constexpr double kHop_s = 130e-9;   // fabric.hop_latency

/// A small rail-optimized fat tree (2 GPUs and rails per node, NDR rates) with `extra` YAML
/// appended (overrides). Two tiers, radix 16, 4 nodes per SU: a leaf has 4 uplinks, one to
/// each of 4 spines per rail. Three tiers, radix 8, 4 nodes per SU: pods of 4 leaves with 4
/// spines each, 2 cores above each spine with 2 cables each (topologies/graph.hpp).
TopologySpec fabric(int tiers, int radix, const std::string& extra = "", int nodes_per_su = 4,
                    const std::string& kind = "rail_optimized_fat_tree") {
  const int leaves = kind == "dual_plane_rail_fat_tree" ? 4 : 2;
  const std::string yaml = fmt::format(
      "name: small\n"
      "gpu: {{name: G, memory: 80GiB, hbm_bandwidth: 3350GBps,\n"
      "      peak_flops: {{fp32: 67TFLOPs, fp16: 989TFLOPs, bf16: 989TFLOPs}}}}\n"
      "node: {{gpus_per_node: 2, nvlink_bandwidth: 450GBps, nvlink_latency: 1us, nvls: true}}\n"
      "nic: {{nics_per_node: 2, line_rate: 400Gbps, latency: 600ns}}\n"
      "fabric: {{kind: {4}, tiers: {0}, nodes_per_scalable_unit: {2},\n"
      "         leaf_switches_per_scalable_unit: {3}, switch_radix: {1},\n"
      "         oversubscription: \"1:1\", link_rate: 400Gbps, hop_latency: 130ns}}\n{5}",
      tiers, radix, nodes_per_su, leaves, kind, extra);
  return parse_topology(yaml, "small.yaml");
}

sg4::Engine& engine() { return testing::simgrid_test_engine(); }

/// A transfer of `bytes` (default kBytes) from GPU src to dst, started now.
sg4::CommPtr transfer(const Platform& p, int64_t src, int64_t dst, double bytes = kBytes) {
  return testing::transfer(p, src, dst, bytes);
}
using testing::run;

/// Expects `actual` within a relative 1e-6 of `expected`.
void expect_close(double actual, double expected) { testing::expect_close(actual, expected, 1e-6); }

/// The platform's names (PlatformLink::name) of the links SimGrid routes GPU src -> dst over.
std::vector<std::string> route_names(const Platform& p, int64_t src, int64_t dst) {
  std::map<const sg4::Link*, std::string> name;
  for (const PlatformLink& l : p.links()) name[l.link] = l.name;
  const auto [from, to] = p.endpoints(src, dst);
  std::vector<sg4::Link*> links;
  double latency_s = 0;
  from->route_to(to, links, &latency_s);
  std::vector<std::string> out;
  for (const sg4::Link* l : links) out.push_back(name.count(l) ? name[l] : l->get_name());
  return out;
}

/// "%.17g" of a double, for values that cross a child process.
std::string exact(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// --- bandwidth and latency ------------------------------------------------------------------

// GPU 0 (node 0, rail 0) -> GPU 2 (node 1, same leaf): node0-nic0-up, then node1-nic0-down.
// With node1-nic0 at 100 Gb/s and 3 us: 3 us + (600 ns + 65 ns) + S / 12.5 GB/s, exactly; the
// other direction of the cable too (a cable override sets both); rail 1 is untouched.
TEST(PlatformOverrides, ALoneTransferOverAnOverriddenLinkGetsItsBandwidthAndLatency) {
  const TopologySpec t =
      fabric(2, 16, "link_overrides:\n  - {link: node1-nic0, bandwidth: 100Gbps, latency: 3us}\n");
  const auto p = Platform::build(engine(), t, 16);
  const double nic_up_s = kNic_s + kHop_s / 2;
  std::vector<double> d = run({transfer(*p, 0, 2)});
  expect_close(d[0], 3e-6 + nic_up_s + kBytes / 12.5e9);
  d = run({transfer(*p, 2, 0)});
  expect_close(d[0], 3e-6 + nic_up_s + kBytes / 12.5e9);
  d = run({transfer(*p, 1, 3)});  // rail 1
  expect_close(d[0], 2 * nic_up_s + kBytes / kNic_Bps);
  for (const PlatformLink& l : p->links()) {
    if (l.name.starts_with("node1-nic0-")) EXPECT_DOUBLE_EQ(l.bandwidth_Bps, 12.5e9) << l.name;
  }
}

// A switch's hop latency: rail0-leaf0 at 1 us instead of 130 ns; a route through it pays 1 us
// for it: same leaf 2 x 600 ns + 1 us; via a spine (node 0 -> node 4) 2 x 600 ns + 1 us +
// 2 x 130 ns (spine and the other leaf).
TEST(PlatformOverrides, ASwitchHopLatencyIsPaidOncePerRouteThroughIt) {
  const TopologySpec t =
      fabric(2, 16, "switch_overrides:\n  - {switch: rail0-leaf0, hop_latency: 1us}\n");
  const auto p = Platform::build(engine(), t, 16);
  std::vector<double> d = run({transfer(*p, 0, 2)});
  expect_close(d[0], 2 * kNic_s + 1e-6 + kBytes / kNic_Bps);
  d = run({transfer(*p, 0, 8)});
  expect_close(d[0], 2 * kNic_s + 1e-6 + 2 * kHop_s + kBytes / kNic_Bps);
  d = run({transfer(*p, 1, 3)});  // rail 1's leaf 0: as the file says
  expect_close(d[0], 2 * kNic_s + kHop_s + kBytes / kNic_Bps);
}

// A bandwidth override of half the rate and the what-if degraded link of scale 0.5 on the same
// link give the same transfer time, S / (link_rate / 2) + latency. Node 0 -> node 5 goes up
// through spine 5 mod 4 = 1 (D-mod-K).
TEST(PlatformOverrides, ABandwidthOverrideEqualsTheWhatIfDegradedLink) {
  const std::string link = "rail0-leaf0-spine1-c0-up";
  const auto time_s = [&](const TopologySpec& t, const PlatformScaling& scaling) {
    return std::stod(run_isolated([&] {
      const auto p = Platform::build(engine(), t, 16, scaling);
      return exact(run({transfer(*p, 0, 10)})[0]);
    }));
  };
  const double overridden =
      time_s(fabric(2, 16, "link_overrides:\n  - {link: " + link + ", bandwidth: 200Gbps}\n"), {});
  PlatformScaling degraded;
  degraded.degraded_links = {{link, 0.5}};
  const double what_if = time_s(fabric(2, 16), degraded);
  EXPECT_DOUBLE_EQ(overridden, what_if);
  expect_close(overridden, 2 * kNic_s + 3 * kHop_s + kBytes / 25e9);
  // Both at once: the what-if scales the overridden rate (a factor on the rate built).
  const double both = time_s(
      fabric(2, 16, "link_overrides:\n  - {link: " + link + ", bandwidth: 200Gbps}\n"), degraded);
  expect_close(both, 2 * kNic_s + 3 * kHop_s + kBytes / 12.5e9);
}

// --- down: routes around ----------------------------------------------------------------------

// The rule by hand (sim/fabric_reroute.hpp), two tiers, 4 spines, 8 nodes on 2 leaves: D-mod-K
// sends node 0 -> 5 through spine 1; spine 1 down leaves spines {0, 2, 3}, and destination 5
// takes the (5 / 4) mod 3 = 1st of them, spine 2; 0 -> 4 stays on spine 0.
TEST(FabricReroute, DestinationsOfADownSpineAreDealtOverTheLiveOnes) {
  const FabricPlan plan = plan_fabric(fabric(2, 16), 16);
  ASSERT_EQ(plan.spines_per_pod, 4);
  RailDown down = RailDown::all_up(plan);
  down.spine[1] = 1;
  EXPECT_EQ(d_mod_k_route(plan, 0, 5).spine_y, 1);
  EXPECT_EQ(route_around(plan, down, 0, 5)->spine_y, 2);
  EXPECT_EQ(route_around(plan, down, 0, 4), d_mod_k_route(plan, 0, 4));
  // A cable down reroutes only the pairs that cross it: leaf 1 -> spine 3 carries 4.. -> 3.
  down = RailDown::all_up(plan);
  down.leaf_spine[(1 * 4 + 3) * 1 + 0] = 1;
  EXPECT_EQ(route_around(plan, down, 4, 3)->spine_y, 0);  // live {0, 1, 2}, (3 / 4) mod 3 = 0
  EXPECT_EQ(route_around(plan, down, 0, 7)->spine_y, 1);  // leaf1 <- spine3 too: (7 / 4) mod 3
  EXPECT_EQ(route_around(plan, down, 0, 6), d_mod_k_route(plan, 0, 6));
  // Every spine down: no route.
  down = RailDown::all_up(plan);
  for (char& s : down.spine) s = 1;
  EXPECT_FALSE(route_around(plan, down, 0, 5).has_value());
}

// On the platform: spine 1 of rail 0 down. SimGrid's route (Host::route_to, the bypass route)
// of node 0 -> 5 goes through spine 2, link by link; no route of any pair crosses a link of
// spine 1, and the flow network reads the same links.
TEST(PlatformOverrides, ASpineDownIsRoutedAroundLinkByLink) {
  const TopologySpec t = fabric(2, 16, "switch_overrides:\n  - {switch: rail0-spine1, down: true}\n");
  const auto p = Platform::build(engine(), t, 16);
  EXPECT_THAT(route_names(*p, 0, 10),
              ElementsAre("node0-nic0-up", "rail0-leaf0-spine2-c0-up",
                          "rail0-leaf1-spine2-c0-down", "node5-nic0-down"));
  // Rail 1 keeps D-mod-K through its spine 1.
  EXPECT_THAT(route_names(*p, 1, 11),
              ElementsAre("node0-nic1-up", "rail1-leaf0-spine1-c0-up",
                          "rail1-leaf1-spine1-c0-down", "node5-nic1-down"));
  int64_t down_links = 0;
  for (const PlatformLink& l : p->links()) down_links += l.down ? 1 : 0;
  EXPECT_EQ(down_links, 4);  // rail0-leaf{0,1}-spine1-c0-{up,down}
  for (int64_t a = 0; a < 16; ++a) {
    for (int64_t b = 0; b < 16; ++b) {
      if (a / 2 == b / 2) continue;
      for (const std::string& n : route_names(*p, a, b)) {
        EXPECT_EQ(n.find("rail0-leaf0-spine1"), std::string::npos) << a << " -> " << b;
        EXPECT_EQ(n.find("rail0-leaf1-spine1"), std::string::npos) << a << " -> " << b;
      }
    }
  }
  FlowNetwork net([](uint64_t, double) {});
  const auto [from, to] = p->endpoints(0, 10);
  std::vector<std::string> seen;
  for (const sg4::Link* l : net.route(from, to).links) {
    for (const PlatformLink& pl : p->links()) {
      if (pl.link == l) seen.push_back(pl.name);
    }
  }
  EXPECT_THAT(seen, ElementsAre("node0-nic0-up", "rail0-leaf0-spine2-c0-up",
                                "rail0-leaf1-spine2-c0-down", "node5-nic0-down"));
}

// A shift permutation between the two leaves on rail 0 (node i -> node i + 4, one step of a
// ring between scalable units), through the flow network as the replay runs it: healthy, D-mod-K
// gives each flow its own spine (4, 5, 6, 7 -> spines 0, 1, 2, 3) and all end at
// L + S / B with L = 2 x 600 ns + 3 x 130 ns. With spine 1 down, 5's flow joins 6's on spine 2:
// those two share the leaf0 -> spine2 link (B / 2 each) and end at L + 2 S / B; 4 and 7 keep
// L + S / B. The permutation takes S / B longer.
TEST(PlatformOverrides, AShiftPermutationSlowsByHandWithASpineDown) {
  const auto ends = [](const std::string& extra) {
    return run_isolated([&] {
      const auto p = Platform::build(engine(), fabric(2, 16, extra), 16);
      std::map<uint64_t, double> end;
      FlowNetwork net([&](uint64_t tag, double e) { end[tag] = e; });
      for (int64_t i = 0; i < 4; ++i) {
        const auto [from, to] = p->endpoints(2 * i, 2 * (i + 4));
        net.start(from, to, kBytes, static_cast<uint64_t>(i));
      }
      engine().run();
      std::string out;
      for (const auto& [tag, e] : end) out += exact(e) + " ";
      return out;
    });
  };
  const auto parse = [](const std::string& s) {
    std::vector<double> v;
    size_t at = 0;
    while (at < s.size()) {
      size_t used = 0;
      v.push_back(std::stod(s.substr(at), &used));
      at += used + 1;
    }
    return v;
  };
  const double L = 2 * kNic_s + 3 * kHop_s, T = kBytes / kNic_Bps;
  const std::vector<double> healthy = parse(ends(""));
  ASSERT_EQ(healthy.size(), 4u);
  for (double e : healthy) expect_close(e, L + T);
  const std::vector<double> down =
      parse(ends("switch_overrides:\n  - {switch: rail0-spine1, down: true}\n"));
  ASSERT_EQ(down.size(), 4u);
  expect_close(down[0], L + T);
  expect_close(down[1], L + 2 * T);
  expect_close(down[2], L + 2 * T);
  expect_close(down[3], L + T);
}

// Three tiers (radix 8: pods of 4 leaves, 4 spines per pod, cores y + 4 z, z < 2, 2 cables per
// spine-core pair), 64 nodes = 4 pods per rail. Node 0 -> node 16 (pod 1): D-mod-K takes spine
// 16 mod 4 = 0, then port (16 / 4) mod 4 = 0: core 0, cable 0; down from it by cable 0 mod 2.
// Core 0 down: the live ports of spine 0 are 1 and 3 (core 4), and (16 / 4 / 4) mod 2 = 1 picks
// port 3: core 4 by cable 1; down to pod 1's spine 4 by cable 0.
TEST(PlatformOverrides, ACoreDownIsRoutedThroughTheOtherCores) {
  const TopologySpec t = fabric(3, 8, "switch_overrides:\n  - {switch: rail0-core0, down: true}\n");
  const auto p = Platform::build(engine(), t, 128);
  EXPECT_THAT(route_names(*p, 0, 32),
              ElementsAre("node0-nic0-up", "rail0-leaf0-spine0-c0-up",
                          "rail0-spine0-core4-c1-up", "rail0-spine4-core4-c0-down",
                          "rail0-leaf4-spine4-c0-down", "node16-nic0-down"));
  const std::vector<double> d = run({transfer(*p, 0, 32)});
  expect_close(d[0], 2 * kNic_s + 5 * kHop_s + kBytes / kNic_Bps);
  for (int64_t a = 0; a < 64; a += 3) {
    for (int64_t b = 0; b < 64; b += 5) {
      if (a / 4 == b / 4) continue;
      for (const std::string& n : route_names(*p, 2 * a, 2 * b)) {
        EXPECT_EQ(n.find("-core0-"), std::string::npos) << a << " -> " << b << ": " << n;
      }
    }
  }
}

// A spine-core cable down on rail 0 (three tiers): the routes that crossed it move off it, every
// other route stays SimGrid's D-mod-K one, link for link (the healthy platform's, built in a
// child process).
TEST(PlatformOverrides, ASpineCoreCableDownMovesOnlyThePairsOnIt) {
  const auto all_routes = [](const TopologySpec& t) {
    return run_isolated([&] {
      const auto p = Platform::build(engine(), t, 128);
      std::string out;
      for (int64_t a = 0; a < 64; a += 3) {
        for (int64_t b = 0; b < 64; ++b) {
          if (a / 4 == b / 4) continue;
          out += fmt::format("{}\n", fmt::join(route_names(*p, 2 * a, 2 * b), " "));
        }
      }
      return out;
    });
  };
  const std::string cable = "rail0-spine0-core0-c0";
  const std::string healthy = all_routes(fabric(3, 8));
  const std::string moved =
      all_routes(fabric(3, 8, "link_overrides:\n  - {link: " + cable + ", down: true}\n"));
  std::istringstream h(healthy), m(moved);
  std::string before, after;
  int crossed = 0, kept = 0;
  while (std::getline(h, before) && std::getline(m, after)) {
    EXPECT_EQ(after.find(cable), std::string::npos) << after;
    if (before.find(cable) != std::string::npos) {
      ++crossed;
      EXPECT_NE(before, after);
    } else {
      ++kept;
      EXPECT_EQ(before, after);
    }
  }
  EXPECT_GT(crossed, 0);
  EXPECT_GT(kept, 0);
}

// --- refusals ---------------------------------------------------------------------------------

TEST(PlatformOverrides, WhatCutsRanksOffIsRefusedNamingThem) {
  const auto refused = [](const TopologySpec& t, int64_t gpus) {
    try {
      Platform::build(engine(), t, gpus);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(refused(fabric(2, 16, "link_overrides:\n  - {link: node3-nic1, down: true}\n"), 16),
              AllOf(HasSubstr("link_overrides[0]"), HasSubstr("node3-nic1 down"),
                    HasSubstr("rank 7 (node 3, GPU 1)")));
  EXPECT_THAT(
      refused(fabric(2, 16, "link_overrides:\n  - {link: node2-gpu0-nvlink, down: true}\n"), 16),
      AllOf(HasSubstr("node2-gpu0-nvlink down"), HasSubstr("rank 4 (node 2, GPU 0)")));
  EXPECT_THAT(refused(fabric(2, 16, "switch_overrides:\n  - {switch: rail1-leaf1, down: true}\n"), 16),
              AllOf(HasSubstr("switch_overrides[0]"), HasSubstr("nodes 4..7"),
                    HasSubstr("rank 9 (node 4, GPU 1)")));
  EXPECT_THAT(refused(fabric(2, 16, "switch_overrides:\n  - {switch: node1-nvswitch, down: true}\n"),
                      16),
              HasSubstr("ranks 2..3 (node 1)"));
  std::string all_spines = "switch_overrides:\n";
  for (int s = 0; s < 4; ++s) all_spines += fmt::format("  - {{switch: rail0-spine{}, down: true}}\n", s);
  EXPECT_THAT(refused(fabric(2, 16, all_spines), 16),
              AllOf(HasSubstr("rail 0: no route from node 0 (leaf 0) to node 4 (leaf 1)"),
                    HasSubstr("rail0-spine0, rail0-spine1"), HasSubstr("rank 0 (node 0, GPU 0)")));
  // One leaf of a dual-plane fabric down: its nodes use their other plane (as a port down).
  EXPECT_EQ(refused(fabric(2, 16, "switch_overrides:\n  - {switch: rail0-plane1-leaf0, down: true}\n",
                           4, "dual_plane_rail_fat_tree"),
                    16),
            "no error");
}

// A NIC port of a dual-plane fabric down by link_overrides is fabric.ports_down's port down:
// rail 0 between nodes 0 and 1 keeps plane 0 only.
TEST(PlatformOverrides, ADualPlaneNicCableDownIsAPortDown) {
  const TopologySpec t = fabric(2, 16, "link_overrides:\n  - {link: node1-nic0-plane1, down: true}\n",
                                4, "dual_plane_rail_fat_tree");
  const auto p = Platform::build(engine(), t, 16);
  EXPECT_EQ(p->paths(0, 2).n, 1);
  EXPECT_EQ(p->paths(0, 4).n, 2);
  const std::vector<double> d = run({transfer(*p, 0, 2)});
  expect_close(d[0], 2 * kNic_s + kHop_s + kBytes / 25e9);
}

// An override past the job's platform (node 9 of a 4-node job, rail 0's cores in a one-pod
// build) carries none of its traffic and is left out; one inside it that names no link is a
// ConfigError with the closest name.
TEST(PlatformOverrides, ElementsPastTheJobAreLeftOutUnknownOnesRefused) {
  const TopologySpec t = fabric(3, 8,
                                "link_overrides:\n  - {link: node9-nic0, down: true}\n"
                                "switch_overrides:\n  - {switch: rail0-core3, down: true}\n");
  EXPECT_NO_THROW(Platform::build(engine(), t, 8));
  TopologySpec bad = fabric(2, 16);
  bad.link_overrides.push_back({"rail0-leaf0-spine1-c3", 25e9, std::nullopt, false, "here: link_overrides[0]"});
  try {
    check_platform_scaling(bad, 16, {});
    Platform::build(engine(), bad, 16);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("here: link_overrides[0].link"),
                                HasSubstr("'rail0-leaf0-spine1-c3': no such link"),
                                HasSubstr("did you mean rail0-leaf0-spine1-c0"),
                                HasSubstr("names look like")));
  }
}

}  // namespace
}  // namespace traintwin
