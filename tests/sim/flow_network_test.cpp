// Tests of sim/flow_network: a lone flow ends at latency + bytes / bandwidth without entering
// SimGrid's solver; a lone flow met half-way by a second one is handed over with what it has
// left, and both end when the hand-worked max-min sharing says (the same numbers with every flow
// in SimGrid from its start, the reference). SimGrid allows one Engine per process; ctest runs
// each TEST in its own process.
#include "sim/flow_network.hpp"

#include <gtest/gtest.h>
#include <xbt/log.h>

#include <map>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>

#include "sim/platform.hpp"
#include "sim_test_support.hpp"
#include "simgrid_test_engine.hpp"

namespace traintwin {
namespace {

namespace sg4 = simgrid::s4u;

sg4::Engine& engine() { return testing::simgrid_test_engine(); }

constexpr double kBytes = 1e9;

// GPU 3 -> node 32 (another SU: NIC, leaf, spine, leaf, NIC), alone: S / B + 2 nic + 3 hops.
void lone_flow(bool closed_form) {
  const TopologySpec t = testing::h100();
  const auto p = Platform::build(engine(), t, 1024);
  std::map<uint64_t, double> end;
  FlowNetwork net([&](uint64_t tag, double e) { end[tag] = e; }, closed_form);
  const auto [from, to] = p->endpoints(3, 8 * 32 + 1);
  net.start(from, to, kBytes, 7);
  engine().run();
  const double expected =
      kBytes / t.nic.line_rate_Bps + 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s;
  ASSERT_EQ(end.count(7), 1u);
  EXPECT_NEAR(end[7], expected, 1e-9 * expected);
  EXPECT_EQ(net.stats().flows, 1);
  EXPECT_EQ(net.stats().lone_flows, closed_form ? 1 : 0);
  EXPECT_EQ(net.stats().solver_flows, closed_form ? 0 : 1);
  const FlowRoute& r = net.route(from, to);
  EXPECT_EQ(r.links.size(), 4u);  // NIC up, leaf -> spine, spine -> leaf, NIC down
  EXPECT_NEAR(r.latency_s, 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s, 1e-15);
  EXPECT_DOUBLE_EQ(r.bandwidth_Bps, t.nic.line_rate_Bps);
}

TEST(FlowNetwork, LoneFlowTakesLatencyPlusBytesOverBandwidthOutsideTheSolver) { lone_flow(true); }
TEST(FlowNetwork, LoneFlowInSimGridTakesTheSameTime) { lone_flow(false); }

// Flow A (GPU 0 -> node 1) is half sent when flow B (GPU 0 -> node 2) starts on the same NIC.
// Both routes stay under one leaf (latency L = 2 nic + hop, bandwidth B of the NIC). Hand-worked
// CM02: B pays its latency first (using no bandwidth) while A runs at B; then they share the NIC
// equally (equal latencies, equal penalties); A ends at t1 + S/B - L, B at t1 + 1.5 S/B.
void handover(bool closed_form) {
  const TopologySpec t = testing::h100();
  const auto p = Platform::build(engine(), t, 1024);
  std::map<uint64_t, double> end;
  FlowNetwork net([&](uint64_t tag, double e) { end[tag] = e; }, closed_form);
  const double B = t.nic.line_rate_Bps;
  const double L = 2 * t.nic.latency_s + t.fabric.hop_latency_s;
  const auto [a_from, a_to] = p->endpoints(0, 8);
  const auto [b_from, b_to] = p->endpoints(0, 16);
  net.start(a_from, a_to, kBytes, 1);
  const double t1 = L + 0.5 * kBytes / B;
  simgrid::kernel::timer::Timer::set(t1, [&, from = b_from, to = b_to] { net.start(from, to, kBytes, 2); });
  engine().run();
  const double a_end = t1 + kBytes / B - L;
  const double b_end = t1 + 1.5 * kBytes / B;
  EXPECT_NEAR(end.at(1), a_end, 1e-9 * a_end);
  EXPECT_NEAR(end.at(2), b_end, 1e-9 * b_end);
  EXPECT_EQ(net.stats().handovers, closed_form ? 1 : 0);
  EXPECT_EQ(net.stats().solver_flows, 2);
  EXPECT_EQ(net.stats().max_in_solver, 2);
}

TEST(FlowNetwork, LoneFlowMetHalfWayIsHandedOverWithWhatItHasLeft) { handover(true); }
TEST(FlowNetwork, SameSharingWithEveryFlowInSimGrid) { handover(false); }

// Flows on other rails or in the other direction share no link: all stay lone; a third flow on
// a link a lone flow holds hands that one over, not the others.
TEST(FlowNetwork, OnlyFlowsThatMeetOnALinkEnterTheSolver) {
  const TopologySpec t = testing::h100();
  const auto p = Platform::build(engine(), t, 1024);
  std::map<uint64_t, double> end;
  FlowNetwork net([&](uint64_t tag, double e) { end[tag] = e; });
  auto start = [&](int64_t src, int64_t dst, uint64_t tag) {
    const auto [from, to] = p->endpoints(src, dst);
    net.start(from, to, kBytes, tag);
  };
  start(8 * 4, 8 * 5, 1);          // node 4 -> 5, rail 0
  start(8 * 4 + 1, 8 * 5 + 1, 2);  // rail 1
  start(8 * 5, 8 * 4, 3);          // node 5 -> 4, rail 0 (full duplex)
  start(8 * 4, 8 * 6, 4);          // node 4 -> 6, rail 0: meets flow 1 on node4-nic0-up
  engine().run();
  EXPECT_EQ(net.stats().flows, 4);
  EXPECT_EQ(net.stats().lone_flows, 2);
  EXPECT_EQ(net.stats().handovers, 1);
  EXPECT_EQ(net.stats().solver_flows, 2);
  const double L = 2 * t.nic.latency_s + t.fabric.hop_latency_s;
  EXPECT_NEAR(end.at(2), kBytes / t.nic.line_rate_Bps + L, 1e-9);
  EXPECT_NEAR(end.at(3), kBytes / t.nic.line_rate_Bps + L, 1e-9);
  EXPECT_NEAR(end.at(1), 2 * kBytes / t.nic.line_rate_Bps + L, 1e-6);
}

}  // namespace
}  // namespace traintwin
