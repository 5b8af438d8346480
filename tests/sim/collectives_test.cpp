#include "sim/collectives.hpp"
#include "sim/collective_bench.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim_test_support.hpp"

#include <limits>
#include <map>

#include "core/error.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;

using testing::h100;

// nccl-tests doc/PERFORMANCE.md: busbw = algbw x factor.
TEST(Collectives, BusBandwidthFactorsAsNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::kReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::kBroadcast, 16), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::kAllReduce, 1), 0.0);
  EXPECT_THROW(busbw_factor(CollectiveKind::kAllReduce, 0), InvalidArgument);
}

// Ring all-reduce of S bytes over 8 GPUs of one NVSwitch node, Simple: 2(n-1)/n S / B + NCCL's
// tuner latency, B = 450 GB/s x 0.80, latency 8.4 us + 2(n-1) = 14 NVLink steps of 3.4 us
// (src/graph/tuning.cc: ring Simple base and NVLink hardware latency).
TEST(Collectives, RingInsideOneNodeIsTheAlphaBetaFormula) {
  const TopologySpec t = h100();
  const FabricEfficiency eff;
  const double S = 1 << 30;
  const GroupSpan span{8, 1, 8};
  const double expected = 2.0 * 7 / 8 * S / (450e9 * 0.80) + (8.4 + 14 * 3.4) * 1e-6;
  EXPECT_NEAR(collective_time_s(CollectiveKind::kAllReduce, CollectiveAlgorithm::kRing,
                                static_cast<int64_t>(S), span, t, eff),
              expected, expected * 1e-12);
  // busbw of that ring is B for large S: within 1 % at 8 GiB.
  const double big = 8.0 * (1 << 30);
  const double time = collective_time_s(CollectiveKind::kAllReduce, CollectiveAlgorithm::kRing,
                                        static_cast<int64_t>(big), span, t, eff);
  EXPECT_NEAR(2.0 * 7 / 8 * big / time / 1e9, 360.0, 3.6);
}

// Calibration points (../shared/validation/calibration.yaml): DGX H100 NVLS all-reduce busbw
// 480.16 GB/s at 8 GiB, 466.33 at 1 GiB; ring 365-370 GB/s; 46-48 GB/s per NDR NIC.
TEST(Collectives, ReproducesTheCalibrationBandwidths) {
  const TopologySpec t = h100();
  const FabricEfficiency eff;
  auto busbw = [&](CollectiveAlgorithm a, double bytes, GroupSpan span) {
    const double time = collective_time_s(CollectiveKind::kAllReduce, a, static_cast<int64_t>(bytes), span, t, eff);
    return busbw_factor(CollectiveKind::kAllReduce, span.ranks) * bytes / time / 1e9;
  };
  EXPECT_NEAR(busbw(CollectiveAlgorithm::kNvls, 8589934592.0, {8, 1, 8}), 480.16, 480.16 * 0.02);
  EXPECT_NEAR(busbw(CollectiveAlgorithm::kNvls, 1073741824.0, {8, 1, 8}), 466.33, 466.33 * 0.05);
  const double ring = busbw(CollectiveAlgorithm::kRing, 8589934592.0, {8, 1, 8});
  EXPECT_GT(ring, 365.0 * 0.98);
  EXPECT_LT(ring, 370.0 * 1.02);
  // Two nodes, one GPU per node on one rail: the per-NIC busbw.
  const double per_nic = busbw(CollectiveAlgorithm::kRing, 8589934592.0, {2, 2, 1});
  EXPECT_GT(per_nic, 46.0);
  EXPECT_LT(per_nic, 48.0);
}

TEST(Collectives, ChoosesLikeNccl) {
  const TopologySpec t = h100();
  const FabricEfficiency eff;
  EXPECT_EQ(choose_algorithm(CollectiveKind::kAllReduce, 1 << 26, {8, 1, 8}, t, eff), CollectiveAlgorithm::kNvls);
  EXPECT_EQ(choose_algorithm(CollectiveKind::kAllGather, 1 << 26, {8, 1, 8}, t, eff), CollectiveAlgorithm::kRing);
  // Small all-reduce over many nodes: latency-bound, the tree wins; large: the ring.
  EXPECT_EQ(choose_algorithm(CollectiveKind::kAllReduce, 4096, {128, 128, 1}, t, eff), CollectiveAlgorithm::kTree);
  EXPECT_EQ(choose_algorithm(CollectiveKind::kAllReduce, 1 << 30, {8, 8, 1}, t, eff), CollectiveAlgorithm::kRing);
  EXPECT_EQ(choose_algorithm(CollectiveKind::kAllReduce, 1 << 26, {8, 1, 8}, t, eff, "ring"), CollectiveAlgorithm::kRing);
  try {
    choose_algorithm(CollectiveKind::kAllGather, 1 << 26, {8, 1, 8}, t, eff, "tree");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("all_gather"));
  }
  EXPECT_THROW(choose_algorithm(CollectiveKind::kAllReduce, 1 << 26, {16, 2, 8}, t, eff, "nvls"), ConfigError);
  EXPECT_THROW(choose_algorithm(CollectiveKind::kAllReduce, 1 << 26, {16, 2, 8}, t, eff, "magic"), ConfigError);
}

// A DP all-reduce over 4 nodes, one member per node (ranks 0, 8, 16, 24): a ring of 4 flows, each
// carrying 2(n-1)/n S / ib-efficiency (256 MiB: Simple, whose flows carry no flag bytes), nothing
// on NVLink; NCCL's latency: 8.4 us + 2(n-1) = 6 network steps, each the tree's 14 us (one member
// per node) plus the route, 2 NICs and 3 switches.
TEST(Collectives, RingAcrossNodesIsOneFlowPerEdge) {
  const TopologySpec t = h100();
  const FabricEfficiency eff;
  const int64_t S = 1 << 28;
  const CollectivePlan p = plan_collective(CollectiveKind::kAllReduce, S, {0, 8, 16, 24}, t, eff, "ring");
  ASSERT_EQ(p.flows.size(), 4u);
  std::map<int64_t, int64_t> next;
  for (const auto& f : p.flows) {
    next[f.src] = f.dst;
    EXPECT_DOUBLE_EQ(f.bytes, 1.5 * S / eff.ib);
  }
  EXPECT_EQ(next, (std::map<int64_t, int64_t>{{0, 8}, {8, 16}, {16, 24}, {24, 0}}));
  EXPECT_EQ(p.protocol, CollectiveProtocol::kSimple);
  const double route = 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s;
  EXPECT_NEAR(p.latency_s, 8.4e-6 + 6 * (14e-6 + route), 1e-15);
  EXPECT_EQ(p.local_time_s, 0);
  // With 2 members per node (0,1 | 8,9): one channel per member, rails kept: 0 -> 8, 1 -> 9.
  const CollectivePlan q = plan_collective(CollectiveKind::kAllGather, S, {0, 1, 8, 9}, t, eff, "ring");
  ASSERT_EQ(q.flows.size(), 4u);
  for (const auto& f : q.flows) {
    EXPECT_EQ(f.src % 8, f.dst % 8);
    EXPECT_DOUBLE_EQ(f.bytes, 0.75 * S / 2 / eff.ib);
  }
  EXPECT_GT(q.local_time_s, 0);
  // Latency as NCCL's tuning model counts it (src/graph/tuning.cc): of all-gather's n - 1 = 3
  // ring steps, nodes - 1 = 1 crosses the network (the ring's 14 us, Simple, plus the route),
  // the other 2 are NVLink steps (3.4 us, above the 3 us network overhead of Simple).
  EXPECT_EQ(q.protocol, CollectiveProtocol::kSimple);
  const double net = 14e-6 + route, nvlink = 3.4e-6;
  EXPECT_NEAR(q.latency_s, 8.4e-6 + net + 2 * nvlink, 1e-15);
  // 16 members, 8 per node on 2 nodes, all-reduce: 2 (2 - 1) = 2 network steps of 2 x 15 = 30.
  std::vector<int64_t> two_nodes;
  for (int64_t r = 0; r < 16; ++r) two_nodes.push_back(r);
  const CollectivePlan w = plan_collective(CollectiveKind::kAllReduce, S, two_nodes, t, eff, "ring");
  EXPECT_NEAR(w.latency_s, 8.4e-6 + 2 * net + 28 * nvlink, 1e-15);
  EXPECT_NEAR(collective_time_s(CollectiveKind::kAllReduce, CollectiveAlgorithm::kRing, S,
                                group_span(two_nodes, 8), t, eff) -
                  2.0 * 15 / 16 * static_cast<double>(S) /
                      std::min(8 * 50e9 * eff.ib, 450e9 * eff.nvlink_ring * 8 / 7),
              8.4e-6 + 2 * net + 28 * nvlink, 1e-12);
  // Inside one node: no flows, the closed form.
  const CollectivePlan r = plan_collective(CollectiveKind::kAllReduce, S, {0, 1, 2, 3}, t, eff);
  EXPECT_TRUE(r.flows.empty());
  EXPECT_EQ(r.algorithm, CollectiveAlgorithm::kNvls);
  EXPECT_GT(r.local_time_s, 0);
}

// NCCL's double binary tree over m nodes: 2 trees x (m-1) edges x up and down. 1 MiB over 5
// nodes (one GPU each, B = 50 GB/s x 0.94) by NCCL's tuner, latency base + 2 floor(log2 5) = 4
// network steps (tree: LL 5.0, LL128 8.5, Simple 14 us, plus the route) and bandwidth share
// (LL 1/3.8, LL128 120/128): LL 6.8 + 4 x 6.59 + 2 MiB / 12.4 GB/s = 202.7 us, LL128
// 14.0 + 4 x 10.09 + 2 MiB / 44.1 GB/s = 101.9 us, Simple 8.4 + 4 x 15.59 + 2 MiB / 47 GB/s =
// 115.4 us: LL128, whose flows carry 128/120 of the data.
TEST(Collectives, TreeHasTwoBinaryTrees) {
  const TopologySpec t = h100();
  const FabricEfficiency eff;
  const CollectivePlan p = plan_collective(CollectiveKind::kAllReduce, 1 << 20, {0, 8, 16, 24, 32}, t, eff, "tree");
  EXPECT_EQ(p.flows.size(), 2u * 4 * 2);
  EXPECT_EQ(p.protocol, CollectiveProtocol::kLL128);
  const double route = 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s;
  EXPECT_NEAR(p.latency_s, 14e-6 + 2 * 2 * (8.5e-6 + route), 1e-15);  // floor(log2 5) = 2
  EXPECT_NEAR(p.flows[0].bytes, 128.0 / 120 * (1 << 20) / 2 / eff.ib, 1e-6);
  const GroupSpan span = group_span({0, 8, 16, 24, 32}, 8);
  const double B = 50e9 * eff.ib;
  EXPECT_NEAR(collective_time_s(CollectiveKind::kAllReduce, CollectiveAlgorithm::kTree, 1 << 20,
                                span, t, eff, CollectiveProtocol::kLL),
              6.8e-6 + 4 * (5e-6 + route) + 2.0 * (1 << 20) / (B / 3.8), 1e-12);
  EXPECT_NEAR(collective_time_s(CollectiveKind::kAllReduce, CollectiveAlgorithm::kTree, 1 << 20,
                                span, t, eff, CollectiveProtocol::kSimple),
              8.4e-6 + 4 * (14e-6 + route) + 2.0 * (1 << 20) / B, 1e-12);
}

// A host whose collectives MPI runs (node.collectives: mpi, as the topology `profile
// --topology-out` writes): rings of 2(n-1) steps of the link latency + the step overhead, one
// protocol; NCCL's algorithms and protocols are refused by name.
TEST(Collectives, MpiHostsKeepTheAlphaBetaRing) {
  TopologySpec t = h100();
  t.node.nccl = false;
  const FabricEfficiency eff;
  const GroupSpan node{8, 1, 8};
  const CollectiveChoice c = choose_collective(CollectiveKind::kAllReduce, 8, node, t, eff);
  EXPECT_EQ(c.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(c.protocol, CollectiveProtocol::kSimple);
  const double S = 1 << 20;
  EXPECT_NEAR(collective_time_s(CollectiveKind::kAllReduce, CollectiveAlgorithm::kRing,
                                static_cast<int64_t>(S), node, t, eff),
              14 * (t.node.nvlink_latency_s + eff.step_overhead_s) +
                  2.0 * 7 / 8 * S / (450e9 * 0.80),
              1e-15);
  EXPECT_THROW(choose_collective(CollectiveKind::kAllReduce, 8, node, t, eff, "tree"), ConfigError);
  EXPECT_THROW(choose_collective(CollectiveKind::kAllReduce, 8, node, t, eff, "", "LL"), ConfigError);
}

// NCCL's protocol choice inside a DGX H100 (8 GPUs, NVLS): small all-reduces take ring LL
// (6.6 us + 14 x 0.6 us = 15 us), large ones NVLS (25 us + S / (450 GB/s x 0.61)); all-gather
// has no NVLS here: LL, then LL128 (14 + 7 x 1.9 = 27.3 us at 92 % of the bandwidth), then
// Simple (8.4 + 7 x 3.4 = 32.2 us at all of it). A forced protocol is kept; NVLS with LL is
// refused.
TEST(Collectives, ProtocolChoiceFollowsNcclsTuner) {
  const TopologySpec t = h100();
  const FabricEfficiency eff;
  const GroupSpan node{8, 1, 8};
  const CollectiveChoice small = choose_collective(CollectiveKind::kAllReduce, 8, node, t, eff);
  EXPECT_EQ(small.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(small.protocol, CollectiveProtocol::kLL);
  EXPECT_NEAR(collective_time_s(CollectiveKind::kAllReduce, CollectiveAlgorithm::kRing, 8, node, t,
                                eff, CollectiveProtocol::kLL),
              15e-6 + 2.0 * 7 / 8 * 8 / (0.5 * 450e9 * 0.80), 1e-15);
  const CollectiveChoice big = choose_collective(CollectiveKind::kAllReduce, 1 << 26, node, t, eff);
  EXPECT_EQ(big.algorithm, CollectiveAlgorithm::kNvls);
  EXPECT_EQ(big.protocol, CollectiveProtocol::kSimple);
  auto ag = [&](int64_t bytes) { return choose_collective(CollectiveKind::kAllGather, bytes, node, t, eff); };
  EXPECT_EQ(ag(1 << 10).protocol, CollectiveProtocol::kLL);
  EXPECT_EQ(ag(int64_t{1} << 30).protocol, CollectiveProtocol::kSimple);
  // LL128 between them: where its 14 + 7 x 1.9 us latency and 92 % bandwidth beat both.
  bool saw_ll128 = false;
  for (int64_t b = 1 << 10; b <= (int64_t{1} << 30); b *= 2) saw_ll128 |= ag(b).protocol == CollectiveProtocol::kLL128;
  EXPECT_TRUE(saw_ll128);
  EXPECT_EQ(choose_collective(CollectiveKind::kAllReduce, 1 << 26, node, t, eff, "", "LL").protocol,
            CollectiveProtocol::kLL);
  EXPECT_EQ(choose_collective(CollectiveKind::kAllReduce, 1 << 26, node, t, eff, "", "LL").algorithm,
            CollectiveAlgorithm::kRing);
  EXPECT_THROW(choose_collective(CollectiveKind::kAllReduce, 1 << 26, node, t, eff, "nvls", "LL"),
               ConfigError);
  EXPECT_THROW(choose_collective(CollectiveKind::kAllReduce, 1 << 26, node, t, eff, "", "LL64"),
               ConfigError);
  // All-to-all is send/recv, one protocol: a forced LL is refused, never dropped.
  EXPECT_THROW(choose_collective(CollectiveKind::kAllToAll, 1 << 20, node, t, eff, "", "LL"),
               ConfigError);
  EXPECT_EQ(choose_collective(CollectiveKind::kAllToAll, 1 << 20, node, t, eff, "", "Simple").algorithm,
            CollectiveAlgorithm::kP2p);
}

// All-to-all as NCCL runs it: grouped send/recv to every peer. Inside one node of 8: each GPU
// sends 7/8 S over NVLink, one alpha. Across 4 nodes with 2 members each (n 8, k 2): PXN flows
// A_j -> B_j of k S / n per node pair and rail (4 x 3 x 2 = 24 flows), each NIC sending
// (n - k)/n S = 3/4 S; NVLink ((k-1) + (n-k)(k-1)/k)/n S = (1 + 3)/8 S.
TEST(Collectives, AllToAllIsPairwiseWithPxnAcrossNodes) {
  const TopologySpec t = h100();
  const FabricEfficiency eff;
  const double S = 1 << 28;
  EXPECT_EQ(choose_algorithm(CollectiveKind::kAllToAll, S, {8, 1, 8}, t, eff), CollectiveAlgorithm::kP2p);
  EXPECT_EQ(choose_algorithm(CollectiveKind::kAllToAll, S, {8, 1, 8}, t, eff, "ring"), CollectiveAlgorithm::kP2p);
  EXPECT_THROW(choose_algorithm(CollectiveKind::kAllToAll, S, {8, 1, 8}, t, eff, "tree"), ConfigError);
  const double intra_alpha = t.node.nvlink_latency_s + eff.step_overhead_s;
  EXPECT_NEAR(collective_time_s(CollectiveKind::kAllToAll, CollectiveAlgorithm::kP2p, S, {8, 1, 8}, t, eff),
              intra_alpha + 7.0 / 8 * S / (t.node.nvlink_bandwidth_Bps * eff.nvlink_ring), 1e-12);
  const CollectivePlan in_node = plan_collective(CollectiveKind::kAllToAll, S, {0, 1, 2, 3, 4, 5, 6, 7}, t, eff);
  EXPECT_TRUE(in_node.flows.empty());
  EXPECT_NEAR(uncontended_time_s(in_node, t),
              collective_time_s(CollectiveKind::kAllToAll, CollectiveAlgorithm::kP2p, S, {8, 1, 8}, t, eff), 1e-12);

  const std::vector<int64_t> members = {0, 1, 8, 9, 16, 17, 24, 25};
  const CollectivePlan p = plan_collective(CollectiveKind::kAllToAll, S, members, t, eff);
  EXPECT_EQ(p.algorithm, CollectiveAlgorithm::kP2p);
  ASSERT_EQ(p.flows.size(), 24u);
  std::map<int64_t, double> sent, received;
  for (const auto& f : p.flows) {
    EXPECT_EQ(f.src % 8, f.dst % 8) << "rail kept";
    EXPECT_NE(f.src / 8, f.dst / 8);
    EXPECT_DOUBLE_EQ(f.bytes, 2 * S / 8 / eff.ib);
    sent[f.src] += f.bytes;
    received[f.dst] += f.bytes;
  }
  for (int64_t r : members) {
    EXPECT_DOUBLE_EQ(sent[r], 0.75 * S / eff.ib);
    EXPECT_DOUBLE_EQ(received[r], 0.75 * S / eff.ib);
  }
  const double alpha = 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s + eff.step_overhead_s;
  EXPECT_NEAR(p.latency_s, alpha, 1e-15);
  EXPECT_NEAR(p.local_time_s, 4.0 / 8 * S / (t.node.nvlink_bandwidth_Bps * eff.nvlink_ring), 1e-12);
  // Uncontended: each NIC sends its three flows one after another, 3/4 S / ib at line rate
  // (+ the route latency and the alpha); the closed form agrees up to that route latency.
  const double Bps = std::min(t.nic.line_rate_Bps, t.fabric.link_rate_Bps);
  const double nic_s = 0.75 * S / eff.ib / Bps;
  const double route = uncontended_transfer_s(0, 8, 0, t);
  EXPECT_NEAR(uncontended_time_s(p, t), std::max(route + nic_s, p.local_time_s) + alpha, 1e-12);
  const double closed = collective_time_s(CollectiveKind::kAllToAll, CollectiveAlgorithm::kP2p, S,
                                          group_span(members, 8), t, eff);
  EXPECT_NEAR(closed, alpha + std::max(0.75 * S / (t.nic.line_rate_Bps * eff.ib), p.local_time_s),
              1e-12);
}

}  // namespace
}  // namespace traintwin

namespace traintwin {
namespace {

// Issue 14 defect 2: `for (b = min; b <= max; b *= 2)` looped forever for min 0 and overflowed
// near INT64_MAX. nccl-tests' doubling sizes from min to max, both included when reached.
TEST(Collectives, NcclTestsSizesDoubleFromMinToMaxAndRefuseEmptyRanges) {
  EXPECT_EQ(nccl_tests_sizes(8, 64), (std::vector<int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(nccl_tests_sizes(8, 100), (std::vector<int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(nccl_tests_sizes(5, 5), (std::vector<int64_t>{5}));
  EXPECT_EQ(nccl_tests_sizes().size(), 31u);  // 8 B .. 8 GiB: 2^3 .. 2^33
  const auto all = nccl_tests_sizes(1, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(all.size(), 63u);  // 2^0 .. 2^62, no overflow
  EXPECT_EQ(all.back(), int64_t{1} << 62);
  EXPECT_THROW(nccl_tests_sizes(0, 8), InvalidArgument);
  EXPECT_THROW(nccl_tests_sizes(-8, 8), InvalidArgument);
  EXPECT_THROW(nccl_tests_sizes(16, 8), InvalidArgument);
}

}  // namespace
}  // namespace traintwin
