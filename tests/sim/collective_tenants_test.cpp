// Tests of collective tenants (sim/collective_tenants.hpp) on the mCCS testbed
// (placements/mccs-rtx3090-testbed.yaml) and of the mCCS validation rows
// (sim/collective_validation.hpp): a ring alone against the ring all-reduce closed form worked by
// hand, tenants sharing a spine cable at their max-min fair share worked by hand, the rows of
// published-runs-2026.yaml loaded as supported cases, and bad rings refused naming the key.
//
// The testbed by hand (one node per GPU; GPU g of host h = 2h + g; GPUs 0-3 under leaf 0, 4-7
// under leaf 1; every port and cable 50 Gbps = C = 6.25e9 B/s per direction):
//   route latency, same leaf:  NIC 600 ns x 2 + 1 switch x 300 ns = 1.5 us
//                 other leaf:  NIC 600 ns x 2 + 3 switches x 300 ns = 2.1 us
//   up from a leaf: spine = destination GPU % 2 (D-mod-K on the destination node).
// A ring all-reduce of S bytes over n GPUs at edge rate r: T = 2(n-1) alpha + 2(n-1)/n S / r,
// busbw = S / T x 2(n-1)/n, alpha = the ring's slowest route latency.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "sim/collective_tenants.hpp"
#include "sim/collective_validation.hpp"
#include "sim/validation.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kSource = TRAINTWIN_SOURCE_DIR;
const fs::path kTestbed = kSource / "placements" / "mccs-rtx3090-testbed.yaml";
const fs::path kRuns = kSource / ".." / "shared" / "validation" / "published-runs-2026.yaml";
constexpr double kC = 6.25e9;                 // 50 Gbps in bytes/s
constexpr int64_t kS = int64_t{128} << 20;    // 134217728 bytes
constexpr double kCross_s = 2.1e-6;           // route latency across the spine

/// busbw (GB/s) of a ring all-reduce over n GPUs at edge rate r_Bps with per-step latency a_s.
double ring_busbw_GBps(int64_t n, double r_Bps, double a_s) {
  const auto nd = static_cast<double>(n);
  const double f = 2.0 * (nd - 1) / nd;
  const double t = 2.0 * (nd - 1) * a_s + f * static_cast<double>(kS) / r_Bps;
  return static_cast<double>(kS) / t * f / 1e9;
}

TEST(CollectiveTenants, BusbwFactorIsNcclTests) {
  EXPECT_DOUBLE_EQ(all_reduce_busbw_factor(2), 1.0);
  EXPECT_DOUBLE_EQ(all_reduce_busbw_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(all_reduce_busbw_factor(8), 1.75);
}

// Good ring alone, GPU 0 of hosts 02,03,01,05 = GPUs 0,2,4,6: edges 0->2 (leaf 0), 2->4 (up
// leaf0->spine0), 4->6 (leaf 1), 6->0 (up leaf1->spine0). No directed link carries two edges, so
// r = C = 6.25 GB/s: T = 6 x 2.1 us + 1.5 x 134217728 / 6.25e9 = 12.6 us + 32.2122547 ms
// = 32.2248547 ms, busbw = 134217728 / T x 1.5 = 6.2476 GB/s.
TEST(CollectiveTenants, GoodRingAloneIsTheRingClosedForm) {
  const TopologySpec topo = load_topology(kTestbed);
  const auto r = simulate_ring_tenants(topo, 8, {{"ring", {0, 2, 4, 6}, kS}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_DOUBLE_EQ(r[0].edge_rate_Bps, kC);
  EXPECT_NEAR(r[0].time_s, 32.2248547e-3, 1e-9);
  EXPECT_NEAR(r[0].busbw_GBps, 6.2476, 1e-4);
  EXPECT_NEAR(r[0].busbw_GBps, ring_busbw_GBps(4, kC, kCross_s), 1e-9);
  EXPECT_EQ(r[0].bottleneck, "");  // its own 50 Gbps ports limit it
}

// Default ring alone, GPUs 0,4,2,6: edges 0->4 and 2->6 both go up to spine 0 (4 and 6 are
// even), 4->2 and 6->0 both come back up leaf1->spine0: the ring crosses each of those cables
// twice, so r = C / 2 = 3.125 GB/s and busbw = 134217728 / (12.6 us + 1.5 x 134217728 /
// 3.125e9) x 1.5 = 3.1244 GB/s.
TEST(CollectiveTenants, DefaultRingCrossesTheSpineTwiceAtHalfRate) {
  const TopologySpec topo = load_topology(kTestbed);
  const auto r = simulate_ring_tenants(topo, 8, {{"ring", {0, 4, 2, 6}, kS}});
  EXPECT_DOUBLE_EQ(r[0].edge_rate_Bps, kC / 2);
  EXPECT_NEAR(r[0].busbw_GBps, ring_busbw_GBps(4, kC / 2, kCross_s), 1e-9);
  EXPECT_NEAR(r[0].busbw_GBps, 3.1244, 1e-4);
  EXPECT_THAT(r[0].bottleneck, HasSubstr("->rail0-spine0 (2 edges of its ring"));
}

// mCCS setting 2: green [1,5] and red [3,7] both go up to spine 1 (5 and 7 are odd) from leaf 0
// and back up from leaf 1: two tenants, one edge each on those cables: max-min fair share C/2
// each. n = 2: busbw = algbw = 134217728 / (2 x 2.1 us + 134217728 / 3.125e9) = 3.1247 GB/s.
// Blue [0,2,4,6] goes up to spine 0 only and keeps C.
TEST(CollectiveTenants, TwoTenantsOnOneSpineCableShareItFairly) {
  const TopologySpec topo = load_topology(kTestbed);
  const auto r = simulate_ring_tenants(
      topo, 8, {{"blue", {0, 2, 4, 6}, kS}, {"green", {1, 5}, kS}, {"red", {3, 7}, kS}});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_DOUBLE_EQ(r[0].edge_rate_Bps, kC);
  EXPECT_DOUBLE_EQ(r[1].edge_rate_Bps, kC / 2);
  EXPECT_DOUBLE_EQ(r[2].edge_rate_Bps, kC / 2);
  EXPECT_NEAR(r[1].busbw_GBps, ring_busbw_GBps(2, kC / 2, kCross_s), 1e-9);
  EXPECT_NEAR(r[1].busbw_GBps, 3.1247, 1e-4);
  EXPECT_THAT(r[1].bottleneck, HasSubstr("rail0-spine1 (1 edge of its ring; shared with: green, red)"));
}

// Max-min per tenant, not per flow: P = default ring [0,4,2,6] crosses leaf0->spine0 twice,
// Q = [3,6] crosses it once (3->6, 6 is even). Filling both at the same rate x saturates that
// cable at 2x + x = C: both get C/3 (Q does not get C/2), and nothing else limits either.
TEST(CollectiveTenants, MaxMinCountsEachCrossingOfARing) {
  const TopologySpec topo = load_topology(kTestbed);
  const auto r = simulate_ring_tenants(topo, 8, {{"P", {0, 4, 2, 6}, kS}, {"Q", {3, 6}, kS}});
  EXPECT_NEAR(r[0].edge_rate_Bps, kC / 3, 1e-3);
  EXPECT_NEAR(r[1].edge_rate_Bps, kC / 3, 1e-3);
}

// ECMP (mCCS setting 3: blue [0,2,4,6] and red [1,3,5,7], both good rings). D-mod-K sends
// blue's 2->4 up to spine 0 and red's 3->5 to spine 1 (and 6->0, 7->1 likewise from leaf 1): no
// cable shared, each at C. Under ECMP each of those four edges picks a spine, 16 equally likely
// outcomes: blue's and red's edges leaving leaf 0 meet on one spine in half of them (its up and
// down cables then carry both: C/2 each), independently of those leaving leaf 1; both rings run
// at C only when neither side collides (1 in 4), else at C/2 (3 in 4). Mean busbw =
// 0.25 x 6.2476 + 0.75 x 3.1244 = 3.905 GB/s, against 3.94 measured (published-runs-2026.yaml,
// mccs-allreduce-two-tenants) where D-mod-K predicts 6.25.
TEST(CollectiveTenants, EcmpTwoGoodRingsCollideOnASpineInThreeOutcomesOfFour) {
  const TopologySpec topo = load_topology(kTestbed);
  const std::vector<CollectiveTenant> two = {{"blue", {0, 2, 4, 6}, kS}, {"red", {1, 3, 5, 7}, kS}};
  const auto d = simulate_ring_tenants(topo, 8, two);
  const auto e = simulate_ring_tenants(topo, 8, two, TenantRouting::kEcmp);
  const double expected =
      0.25 * ring_busbw_GBps(4, kC, kCross_s) + 0.75 * ring_busbw_GBps(4, kC / 2, kCross_s);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(d[i].busbw_GBps, ring_busbw_GBps(4, kC, kCross_s), 1e-9);
    EXPECT_NEAR(e[i].busbw_GBps, expected, 1e-9);
    EXPECT_NEAR(e[i].busbw_GBps, 3.905, 1e-3);
    EXPECT_NEAR(e[i].edge_rate_Bps, 0.25 * kC + 0.75 * kC / 2, 1e-3);
    EXPECT_THAT(e[i].bottleneck, HasSubstr("ECMP: a link shared with another ring edge in 12 of "
                                           "16 hash outcomes"));
  }
  // A ring alone whose edges leave each leaf once (the good ring) never collides: ECMP = D-mod-K.
  const auto alone = simulate_ring_tenants(topo, 8, {two[0]}, TenantRouting::kEcmp);
  EXPECT_NEAR(alone[0].busbw_GBps, ring_busbw_GBps(4, kC, kCross_s), 1e-9);
}

TEST(CollectiveTenants, BadRingsAreErrorsNamingTheKey) {
  const TopologySpec topo = load_topology(kTestbed);
  const auto message = [&](std::vector<int64_t> ring) {
    try {
      simulate_ring_tenants(topo, 8, {{"a", std::move(ring), kS}});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message({0, 2, 0}), HasSubstr("tenants[0] (a): ring: GPU 0 is given twice"));
  EXPECT_THAT(message({0, 8}), HasSubstr("tenants[0] (a): ring: GPU 8 is outside the fabric (allowed: 0 .. 7)"));
  EXPECT_THAT(message({3}), HasSubstr("tenants[0] (a): ring: 1 GPU(s)"));
}

TEST(CollectiveTenants, TenantsFileIsReadAndCheckedNamingFileAndKey) {
  const std::string good =
      "topology: t.yaml\nnum_gpus: 8\ntenants:\n  - {name: a, ring: [0, 2], bytes: 128MiB}\n";
  const TenantsFile f = parse_tenants(good, "x.yaml", "/base");
  EXPECT_EQ(f.topology_file, fs::path("/base/t.yaml"));
  ASSERT_EQ(f.tenants.size(), 1u);
  EXPECT_EQ(f.tenants[0].bytes, kS);
  const auto message = [](const std::string& text) {
    try {
      parse_tenants(text, "x.yaml", "/base");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message("topology: t.yaml\nnum_gpus: 8\ntenants:\n  - {name: a, ring: [1, 1], bytes: 1MiB}\n"),
              HasSubstr("x.yaml: tenants[0] (a): ring: GPU 1 is given twice"));
  EXPECT_THAT(message("topology: t.yaml\nnum_gpus: 8\ntenants:\n  - {name: a, ring: [1, 9], bytes: 1MiB}\n"),
              HasSubstr("x.yaml: tenants[0] (a): ring: GPU 9 is outside the fabric"));
  EXPECT_THAT(message("topology: t.yaml\nnum_gpus: 8\ntenants:\n  - {name: a, ring: [1, 2], size: 1MiB}\n"),
              HasSubstr("x.yaml:4: tenants[0].size"));
  EXPECT_THAT(message("topology: t.yaml\nnum_gpus: 8\ntenants:\n  - {name: a, ring: [1, 2], bytes: 1}\n"),
              HasSubstr("bytes"));
  EXPECT_EQ(f.routing, TenantRouting::kDModK);
  EXPECT_EQ(parse_tenants("routing: ecmp\n" + good, "x.yaml", "/base").routing,
            TenantRouting::kEcmp);
  EXPECT_THAT(message("routing: random\n" + good),
              HasSubstr("x.yaml:1: routing: 'random' (allowed: d_mod_k, ecmp)"));
}

// The three mCCS rows as published-runs-2026.yaml gives them (ids and measured keys), inline so
// that the test runs without ../shared beside the checkout.
TEST(CollectiveValidation, MccsRowsLoadAsSupportedCases) {
  const YAML::Node root = YAML::Load(
      "runs:\n"
      "  - id: mccs-allreduce-alone\n"
      "    measured: {busbw_GBps: {good_ring_4gpu: 5.66, good_ring_8gpu: 6.04, default_ring_4gpu: 3.58,"
      " default_ring_8gpu: 3.66}}\n"
      "  - id: mccs-allreduce-three-tenants\n"
      "    measured: {busbw_GBps: {tenant_a: 2.79, tenant_b: 2.38, tenant_c: 2.75}}\n"
      "  - id: mccs-allreduce-two-tenants\n"
      "    measured: {busbw_GBps: {tenant_a: 3.94, tenant_b: 3.94}}\n");
  const auto cases = load_collective_validation_cases(root, "r.yaml", kSource / "topologies");
  ASSERT_EQ(cases.size(), 9u);
  for (const CollectiveValidationCase& c : cases) {
    SCOPED_TRACE(c.id);
    ASSERT_TRUE(c.unsupported.empty()) << c.unsupported;
    EXPECT_EQ(c.num_gpus, 8);
  }
  // The testbed's switches hash flows over the spines: every case is routed by ECMP.
  for (const CollectiveValidationCase& c : cases) EXPECT_EQ(c.routing, TenantRouting::kEcmp);
  // default_ring_8gpu: GPUs 0,1 of hosts 02,01,03,05 = 0 1 4 5 2 3 6 7; its cross-leaf edges
  // 1->4, 3->6 leave leaf 0 and 5->2, 7->0 leave leaf 1. D-mod-K sends each pair to spine 0:
  // C/2, busbw = 134217728 / (14 x 2.1 us + 1.75 x 134217728 / 3.125e9) x 1.75 = 3.1223 GB/s.
  // ECMP: each pair meets on one spine in half the outcomes, independently: C in 1 of 4, C/2 in
  // 3 of 4.
  EXPECT_EQ(cases[3].id, "mccs-allreduce-alone/default_ring_8gpu");
  EXPECT_EQ(cases[3].tenants[0].ring, (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));
  EXPECT_NEAR(simulate_ring_tenants(load_topology(cases[3].topology_file), 8, cases[3].tenants)[0]
                  .busbw_GBps,
              ring_busbw_GBps(8, kC / 2, kCross_s), 1e-9);
  EXPECT_NEAR(simulate_collective_validation_case(cases[3]).busbw_GBps,
              0.25 * ring_busbw_GBps(8, kC, kCross_s) + 0.75 * ring_busbw_GBps(8, kC / 2, kCross_s),
              1e-9);
  // Setting 2's tenant_a is red (GPU 1 of hosts 03, 05), beside green and blue: D-mod-K puts
  // red and green on spine 1 (C/2 each). Under ECMP three edges leave each leaf for 2 spines: red
  // is alone on its spine at both leaves in 1 of 16 outcomes (C), and shares with up to both
  // others otherwise (at worst C/3): its mean lies strictly between.
  EXPECT_EQ(cases[4].tenant, "red");
  EXPECT_EQ(cases[4].tenants.size(), 3u);
  EXPECT_NEAR(simulate_ring_tenants(load_topology(cases[4].topology_file), 8, cases[4].tenants)[0]
                  .busbw_GBps,
              ring_busbw_GBps(2, kC / 2, kCross_s), 1e-9);
  const double red = simulate_collective_validation_case(cases[4]).busbw_GBps;
  EXPECT_GT(red, ring_busbw_GBps(2, kC / 3, kCross_s));
  EXPECT_LT(red, ring_busbw_GBps(2, kC, kCross_s));
}

TEST(CollectiveValidation, MccsRowsOfTheSharedFileAreSupportedCases) {
  if (!fs::exists(kRuns)) GTEST_SKIP() << "no " << kRuns << " beside the checkout";
  const auto cases = load_collective_validation_cases(kRuns, kSource / "topologies");
  ASSERT_EQ(cases.size(), 9u);  // 4 alone + 3 + 2
  for (const CollectiveValidationCase& c : cases) {
    SCOPED_TRACE(c.id);
    ASSERT_TRUE(c.unsupported.empty()) << c.unsupported;
    EXPECT_GT(c.measured_busbw_GBps, 0);
    EXPECT_GT(simulate_collective_validation_case(c).busbw_GBps, 0);
  }
  EXPECT_EQ(cases[0].id, "mccs-allreduce-alone/good_ring_4gpu");
  EXPECT_EQ(cases[0].tenants[0].ring, (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_NEAR(simulate_collective_validation_case(cases[0]).busbw_GBps, 6.2476, 1e-4);
  // The iteration-time loader no longer lists them as not supported.
  for (const ValidationCase& c : load_validation_cases(kRuns, kSource / "topologies")) {
    EXPECT_EQ(c.id.rfind("mccs-", 0), std::string::npos) << c.id;
  }
}

TEST(CollectiveValidation, UnknownBusbwRowsAreUnsupportedWithTheReason) {
  const YAML::Node root = YAML::Load(
      "runs:\n  - id: mccs-allreduce-alone\n    measured: {busbw_GBps: {odd_ring_16gpu: 1.0}}\n"
      "  - id: other\n    measured: {busbw_GBps: {x: 2.0}}\n");
  const auto cases = load_collective_validation_cases(root, "r.yaml", kSource / "topologies");
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_THAT(cases[0].unsupported, HasSubstr("key 'odd_ring_16gpu' not encoded"));
  EXPECT_THAT(cases[1].unsupported, HasSubstr("does not know"));
  EXPECT_THROW(simulate_collective_validation_case(cases[1]), ConfigError);
}

}  // namespace
}  // namespace traintwin
