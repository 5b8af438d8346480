// Tests of sim/flow_network: a lone flow ends at latency + bytes / bandwidth without entering
// SimGrid's solver; a lone flow met half-way by a second one is handed over with what it has
// left (lone flows only) or timed with it as a closed-form group, and both end when the
// hand-worked max-min sharing says (the same numbers with every flow in SimGrid from its start,
// the reference); an all-to-all ends when the hand-worked sharing of its NICs says; random flows
// end at the reference's times whether grouped, handed over or all in SimGrid. SimGrid allows one
// Engine per process; ctest runs each TEST in its own process, and the comparison of several
// configurations runs each in a forked child.
#include "sim/flow_network.hpp"

#include <gtest/gtest.h>
#include <xbt/log.h>

#include <cmath>
#include <map>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>

#include <array>
#include <random>
#include <sstream>

#include "tests/bounded_child.hpp"
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
// equally (equal latencies, equal penalties); A ends at t1 + S/B - L, B at t1 + 1.5 S/B. The
// same times whether A is handed to SimGrid (groups of one flow), A and B are a closed-form
// group, or both run in SimGrid from their start. Their rates over time (record_rates) are the
// same hand-worked steps in each mode: A at B from L, at B/2 from t1 + L (B's latency paid); B at
// B/2 from t1 + L, at B from A's end; so in bins of the NIC link they never sum above 1.
enum class Mode { kReference, kLoneOnly, kGroups };

void handover(Mode mode) {
  const TopologySpec t = testing::h100();
  const auto p = Platform::build(engine(), t, 1024);
  std::map<uint64_t, double> end;
  FlowNetwork net([&](uint64_t tag, double e) { end[tag] = e; }, mode != Mode::kReference,
                  mode == Mode::kLoneOnly ? 1 : FlowNetwork::kDefaultMaxGroupFlows);
  const double B = t.nic.line_rate_Bps;
  const double L = 2 * t.nic.latency_s + t.fabric.hop_latency_s;
  const auto [a_from, a_to] = p->endpoints(0, 8);
  const auto [b_from, b_to] = p->endpoints(0, 16);
  std::map<uint64_t, std::vector<RateStep>> rates;
  net.record_rates([&](uint64_t tag, std::span<const RateStep> steps) {
    ASSERT_EQ(end.count(tag), 0u);  // before its end is reported
    rates[tag].assign(steps.begin(), steps.end());
  });
  net.start(a_from, a_to, kBytes, 1);
  const double t1 = L + 0.5 * kBytes / B;
  simgrid::kernel::timer::Timer::set(
      t1, [&, from = b_from, to = b_to] { net.start(from, to, kBytes, 2); });
  engine().run();
  const double a_end = t1 + kBytes / B - L;
  const double b_end = t1 + 1.5 * kBytes / B;
  EXPECT_NEAR(end.at(1), a_end, 1e-9 * a_end);
  EXPECT_NEAR(end.at(2), b_end, 1e-9 * b_end);
  const std::vector<std::array<double, 2>> a_steps = {{L, B}, {t1 + L, B / 2}};
  const std::vector<std::array<double, 2>> b_steps = {{t1 + L, B / 2}, {a_end, B}};
  for (const auto& [tag, want] : {std::pair{1, a_steps}, std::pair{2, b_steps}}) {
    const std::vector<RateStep>& got = rates[static_cast<uint64_t>(tag)];
    ASSERT_EQ(got.size(), want.size()) << "flow " << tag;
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_NEAR(got[k].t_s, want[k][0], 1e-9 * b_end) << "flow " << tag << " step " << k;
      EXPECT_NEAR(got[k].rate_Bps, want[k][1], 1e-6 * B) << "flow " << tag << " step " << k;
    }
  }
  // The NIC link in 8 bins over both flows: exactly their 2 S bytes, never above its bandwidth.
  LinkSeries nic;
  nic.bin_s = b_end / 8;
  nic.utilization.assign(8, 0.0);
  add_to_series(nic, B, rates[1], end.at(1));
  add_to_series(nic, B, rates[2], end.at(2));
  double total = 0;
  for (double u : nic.utilization) {
    EXPECT_LE(u, 1 + 1e-9);
    total += u * B * nic.bin_s;
  }
  EXPECT_NEAR(total, 2 * kBytes, 1e-6 * kBytes);
  EXPECT_NEAR(nic.utilization[7], 1.0, 1e-6);  // B alone at B for the last eighth
  EXPECT_EQ(net.stats().handovers, mode == Mode::kLoneOnly ? 1 : 0);
  EXPECT_EQ(net.stats().solver_flows, mode == Mode::kGroups ? 0 : 2);
  EXPECT_EQ(net.stats().group_flows, mode == Mode::kGroups ? 2 : 0);
  EXPECT_EQ(net.stats().max_in_solver, mode == Mode::kGroups ? 0 : 2);
}

TEST(FlowNetwork, LoneFlowMetHalfWayIsHandedOverWithWhatItHasLeft) { handover(Mode::kLoneOnly); }
TEST(FlowNetwork, LoneFlowMetHalfWayJoinsAClosedFormGroup) { handover(Mode::kGroups); }
TEST(FlowNetwork, SameSharingWithEveryFlowInSimGrid) { handover(Mode::kReference); }

// Flows on other rails or in the other direction share no link: all stay lone; a third flow on
// a link a lone flow holds hands that one over (lone flows only), not the others.
TEST(FlowNetwork, OnlyFlowsThatMeetOnALinkEnterTheSolver) {
  const TopologySpec t = testing::h100();
  const auto p = Platform::build(engine(), t, 1024);
  std::map<uint64_t, double> end;
  FlowNetwork net([&](uint64_t tag, double e) { end[tag] = e; }, true, 1);
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

// An all-to-all among the rail-0 GPUs of nodes 0..3 (one leaf): 12 flows of S bytes start
// together; every NIC link carries 3 of them, all of latency L, so under max-min each runs at
// B / 3 and all end at L + 3 S / B (the closed form of uncontended_time_s for an all-to-all).
// One group of 12 flows in closed form, none in SimGrid; with groups of at most 4 flows, the
// flow that would make a fifth member hands the group to SimGrid, with the same end.
void all_to_all(int64_t max_group_flows) {
  const TopologySpec t = testing::h100();
  const auto p = Platform::build(engine(), t, 1024);
  std::map<uint64_t, double> end;
  FlowNetwork net([&](uint64_t tag, double e) { end[tag] = e; }, true, max_group_flows);
  for (int64_t a = 0; a < 4; ++a) {
    for (int64_t b = 0; b < 4; ++b) {
      if (a == b) continue;
      const auto [from, to] = p->endpoints(8 * a, 8 * b);
      net.start(from, to, kBytes, static_cast<uint64_t>(4 * a + b));
    }
  }
  engine().run();
  const double L = 2 * t.nic.latency_s + t.fabric.hop_latency_s;
  const double expected = L + 3 * kBytes / t.nic.line_rate_Bps;
  ASSERT_EQ(end.size(), 12u);
  for (const auto& [tag, e] : end) EXPECT_NEAR(e, expected, 1e-9 * expected) << "flow " << tag;
  const bool grouped = max_group_flows >= 12;
  EXPECT_EQ(net.stats().group_flows, grouped ? 12 : 0);
  EXPECT_EQ(net.stats().solver_flows, grouped ? 0 : 12);
}

TEST(FlowNetwork, AllToAllIsOneClosedFormGroup) { all_to_all(FlowNetwork::kDefaultMaxGroupFlows); }
TEST(FlowNetwork, AllToAllPastTheGroupSizeGoesToSimGrid) { all_to_all(4); }

// 120 flows between random GPUs of 12 nodes in two scalable units (1, 2 or 4 hops: routes of
// different latencies, hence different CM02 penalties), of random sizes (64 KiB .. 256 MiB),
// starting at random times over 2 ms: each flow ends at the same time whether every flow is in
// SimGrid from its start, lone flows are handed over, small groups (at most 6 flows) fill and are
// handed over, or groups are large. "The same" is to 1 ns: SimGrid takes events less than its
// timing precision apart (config precision/timing, 1e-9 s) as one, so it ends a flow up to 1 ns
// early and the flows that share with it see that (measured here: at most 0.53 ns, large groups
// against all in SimGrid; 0.03 ns with lone flows only, SimGrid's whole-byte payloads). Each
// configuration runs in its own process (one SimGrid engine per process).
std::string random_flows(bool closed_form, int64_t max_group_flows) {
  const TopologySpec t = testing::h100();
  const auto p = Platform::build(engine(), t, 1024);
  std::map<uint64_t, double> end;
  FlowNetwork net([&](uint64_t tag, double e) { end[tag] = e; }, closed_form, max_group_flows);
  std::mt19937_64 rng(20261126);
  const int64_t nodes[] = {0, 1, 2, 3, 4, 5, 32, 33, 34, 35, 36, 37};
  std::uniform_int_distribution<int> node(0, 11), other(1, 11), gpu(0, 1);
  std::uniform_real_distribution<double> start_s(0, 2e-3),
      log_bytes(std::log(65536.0), std::log(268435456.0));
  for (uint64_t tag = 0; tag < 120; ++tag) {
    const int ia = node(rng);
    const int64_t a = nodes[ia], b = nodes[(ia + other(rng)) % 12];  // two different nodes
    const int64_t src = 8 * a + gpu(rng), dst = 8 * b + gpu(rng);
    const double bytes = std::round(std::exp(log_bytes(rng)));
    const double at = start_s(rng);
    const auto [from, to] = p->endpoints(src, dst);
    simgrid::kernel::timer::Timer::set(
        at, [&net, from = from, to = to, bytes, tag] { net.start(from, to, bytes, tag); });
  }
  engine().run();
  std::ostringstream out;
  out.precision(17);
  for (const auto& [tag, e] : end) out << tag << ' ' << e << '\n';
  out << "stats " << net.stats().group_flows << ' ' << net.stats().solver_flows << ' '
      << net.stats().handovers << '\n';
  return out.str();
}

std::map<uint64_t, double> read_ends(const std::string& text, std::vector<int64_t>* stats) {
  std::istringstream in(text);
  std::map<uint64_t, double> ends;
  for (std::string word; in >> word;) {
    if (word == "stats") {
      for (int64_t v; in >> v;) stats->push_back(v);
      break;
    }
    in >> ends[std::stoull(word)];
  }
  return ends;
}

TEST(FlowNetwork, RandomFlowsEndAsInSimGridWhetherGroupedHandedOverOrNot) {
  struct Config {
    const char* name;
    bool closed_form;
    int64_t max_group_flows;
  };
  const Config configs[] = {{"all in SimGrid", false, 1},
                            {"lone flows only", true, 1},
                            {"groups of at most 6", true, 6},
                            {"groups (default size)", true, FlowNetwork::kDefaultMaxGroupFlows}};
  std::vector<std::map<uint64_t, double>> ends;
  std::vector<std::vector<int64_t>> stats(4);
  for (size_t c = 0; c < 4; ++c) {
    const auto r = testing::run_bounded(
        [&] { return random_flows(configs[c].closed_form, configs[c].max_group_flows); }, 120,
        1ULL << 30);
    ASSERT_TRUE(r.ok) << configs[c].name << ": " << r.failure;
    ends.push_back(read_ends(r.text, &stats[c]));
    ASSERT_EQ(ends.back().size(), 120u) << configs[c].name;
    ASSERT_EQ(stats[c].size(), 3u) << configs[c].name;
  }
  for (size_t c = 1; c < 4; ++c) {
    for (const auto& [tag, e] : ends[0]) {
      EXPECT_NEAR(ends[c].at(tag), e, 1e-9) << configs[c].name << ", flow " << tag;
    }
  }
  // The configurations did what their names say: no group without groups, handovers where
  // groups are small, and large groups keep flows out of SimGrid.
  EXPECT_EQ(stats[1][0], 0);
  EXPECT_GT(stats[1][2], 0);
  EXPECT_GT(stats[2][0], 0);
  EXPECT_GT(stats[2][2], 0);
  EXPECT_GT(stats[3][0], stats[2][0]);
  EXPECT_LT(stats[3][1], stats[2][1]);
}

}  // namespace
}  // namespace traintwin
