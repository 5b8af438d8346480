// Degraded, not down (sim/degraded_states.hpp, sim/goodput.hpp): the Monte Carlo's straggler and
// degraded-link badput against the closed form of an M/M/inf episode process, the runs without
// degradation unchanged, each distinct state replayed once, the states' links on the platform,
// a straggler's replay, and the bad inputs naming their key and range.
#include "sim/degraded_states.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "sim/goodput.hpp"
#include "sim/isolated.hpp"
#include "sim/platform.hpp"
#include "sim/session.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;

constexpr double kDay = 86400.0;
const std::string kScenarios = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/";

/// One node, failures almost never (one per 10^6 node-days), instant saves
/// (an empty checkpoint), 10 s iterations: the wall time is computing time.
GoodputJob quiet_job() {
  GoodputJob job;
  job.iteration_s = 10;
  job.tokens_per_iteration = 1;
  job.nodes = 1;
  job.gpus = 8;
  job.checkpoint_bytes = 0;
  ReliabilitySpec& r = job.reliability;
  r.failures = {{"gpu", {1e-3, 1.0}}};
  r.planned_interruptions_per_1000_node_days = 0;
  r.spare_nodes = 1;
  return job;
}

/// Episodes per 1000 node-days for `per_day` episodes a day on one node.
double per_1000_node_days(double per_day) { return per_day * 1000.0; }

/// Mean and standard error of the mean of `cause`'s share over `runs` runs.
std::pair<double, double> share_mean_se(const GoodputAtInterval& a, size_t cause) {
  double sum = 0, sum2 = 0;
  for (const GoodputRun& r : a.runs) {
    const double x = r.badput.values()[cause] / r.wall_s;
    sum += x;
    sum2 += x * x;
  }
  const auto n = static_cast<double>(a.runs.size());
  const double mean = sum / n;
  return {mean, std::sqrt(std::max(0.0, sum2 / n - mean * mean) / (n - 1))};
}

// Episodes arrive at rate lambda and last D on average (exponential), started stationary: the
// number under way is Poisson of mean lambda D at every instant (M/M/inf), so the share of time
// with at least one is 1 - exp(-lambda D), and a state of twice the iteration time costs half of
// it: straggler badput = (1 - exp(-lambda D)) x (1 - t_healthy / t_degraded).
TEST(DegradedGoodput, StragglerBadputIsTheClosedForm) {
  GoodputJob job = quiet_job();
  job.reliability.straggler = {per_1000_node_days(12), 3600};  // lambda D = 0.5
  job.degraded_iteration_s[static_cast<size_t>(DegradedKind::kStraggler)] = 2 * job.iteration_s;
  const GoodputAtInterval a = goodput_at_interval(job, 3600, GoodputHorizon{30 * kDay, 0}, 200, 7);
  const double expected = (1 - std::exp(-0.5)) * (1 - 10.0 / 20.0);
  const auto [mean, se] = share_mean_se(a, 6);
  EXPECT_NEAR(mean, expected, 4 * se) << "standard error " << se;
  EXPECT_NEAR(a.mean_badput_share.straggler_s, mean, 1e-12);
  EXPECT_LT(se, 0.01 * expected * 2);  // the test is sharp: 4 SE is within 8 % of the value
  EXPECT_EQ(a.mean_badput_share.degraded_links_s, 0);
  EXPECT_LE(a.badput_share[6].p10, a.badput_share[6].p50);
  EXPECT_LE(a.badput_share[6].p50, a.badput_share[6].p90);
  for (const GoodputRun& r : a.runs) {
    EXPECT_NEAR(r.useful_s + r.badput.total(), r.wall_s, 1e-6 * r.wall_s);
    EXPECT_GT(r.degraded_episodes, 0);
  }
}

// The link kinds charge "degraded links"; a flapping link at 4/3 of the iteration time (lambda D
// = 0.25) costs (1 - exp(-0.25)) x 1/4.
TEST(DegradedGoodput, LinkBadputIsTheClosedForm) {
  GoodputJob job = quiet_job();
  job.reliability.link_flap = {per_1000_node_days(6), 3600};
  job.degraded_iteration_s[static_cast<size_t>(DegradedKind::kLinkFlap)] = 40.0 / 3.0;
  const GoodputAtInterval a = goodput_at_interval(job, 3600, GoodputHorizon{30 * kDay, 0}, 200, 3);
  const auto [mean, se] = share_mean_se(a, 7);
  EXPECT_NEAR(mean, (1 - std::exp(-0.25)) * 0.25, 4 * se);
  EXPECT_EQ(a.mean_badput_share.straggler_s, 0);
}

// No degradation: the runs are today's, bit for bit, whatever the degraded iteration times say;
// with stragglers on, a seed's failures and planned interruptions stay where they were (the
// episodes draw from a stream of their own) and only computing slows.
TEST(DegradedGoodput, WithoutDegradationTheRunsAreUnchanged) {
  GoodputJob job = quiet_job();
  job.reliability = default_reliability();
  job.nodes = 64;
  job.gpus = 512;
  job.checkpoint_bytes = 1e12;
  const GoodputHorizon h{20 * kDay, 0};
  const GoodputRun plain = simulate_goodput_run(job, 3600, h, 11);
  GoodputJob times = job;
  times.degraded_iteration_s.fill(25);  // rates 0: never used
  const GoodputRun same = simulate_goodput_run(times, 3600, h, 11);
  EXPECT_EQ(plain.wall_s, same.wall_s);
  EXPECT_EQ(plain.useful_s, same.useful_s);
  EXPECT_EQ(plain.failures, same.failures);
  EXPECT_EQ(plain.checkpoints, same.checkpoints);
  EXPECT_EQ(plain.badput.lost_progress_s, same.badput.lost_progress_s);
  EXPECT_EQ(same.badput.straggler_s + same.badput.degraded_links_s, 0);
  EXPECT_EQ(same.degraded_episodes, 0);

  GoodputJob slow = times;
  slow.reliability.straggler = {50, 3600};
  const GoodputRun s = simulate_goodput_run(slow, 3600, h, 11);
  EXPECT_EQ(s.failures, plain.failures);
  EXPECT_EQ(s.planned, plain.planned);
  EXPECT_GT(s.badput.straggler_s, 0);
  EXPECT_LT(s.useful_s, plain.useful_s);
  EXPECT_NEAR(s.useful_s + s.badput.total(), s.wall_s, 1e-6 * s.wall_s);
  const GoodputRun again = simulate_goodput_run(slow, 3600, h, 11);  // a seed gives one run
  EXPECT_EQ(again.useful_s, s.useful_s);
  EXPECT_EQ(again.badput.straggler_s, s.badput.straggler_s);
}

// The cache replays each distinct state once, however often the Monte Carlo's caller asks; the
// healthy state is replayed only when asked for, and scales the degraded times to the job's.
TEST(DegradedStates, EachDistinctStateIsReplayedOnce) {
  const Scenario s = load_scenario(kScenarios + "gpt3-175b-h100-1024.yaml");
  const TopologySpec topo = SimulationSession(s, {}, SimulationOptions{}).topology();
  ReliabilitySpec r = default_reliability();
  r.straggler.rate_per_1000_node_days = 1;
  r.nic_down.rate_per_1000_node_days = 1;
  r.link_flap.rate_per_1000_node_days = 1;
  int calls = 0;
  IterationTimeCache cache([&](const DegradedState& st) {
    ++calls;
    if (st.straggler) return 20.0;
    return st.degraded_links.empty() ? 8.0 : 10.0 + static_cast<double>(st.degraded_links.size());
  });
  for (int i = 0; i < 5; ++i) {
    const DegradedReplays d = replay_degraded_states(s, topo, r, cache, true);
    EXPECT_EQ(d.replayed_s[0], 20.0);
    EXPECT_EQ(d.replayed_s[1], 0.0);   // link_down: rate 0, not replayed
    EXPECT_EQ(d.replayed_s[2], 14.0);  // both directions of two NIC links
    EXPECT_EQ(d.replayed_s[3], 12.0);
    EXPECT_EQ(d.healthy_s, 8.0);
    GoodputJob job;
    job.iteration_s = 4;  // e.g. the estimator's: the replays' ratios apply
    apply_degraded_replays(job, d);
    EXPECT_EQ(job.degraded_iteration_s[0], 10.0);
    EXPECT_EQ(job.degraded_iteration_s[3], 6.0);
  }
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(cache.replays(), 4);
  // Nothing in use: nothing replayed, not even the healthy state.
  IterationTimeCache none([&](const DegradedState&) { return ++calls, 1.0; });
  replay_degraded_states(s, topo, default_reliability(), none, true);
  EXPECT_EQ(none.replays(), 0);
}

// Each state's links are platform links: a link down spreads over rail 0's leaf 0's k uplink
// cables at (k - 1) / k, a NIC down halves node 0's first two NIC links, a flapping link is node
// 0's first NIC link at the factor; both directions each time.
TEST(DegradedStates, TheStatesNamePlatformLinks) {
  const Scenario s = load_scenario(kScenarios + "gpt3-175b-h100-1024.yaml");
  const TopologySpec topo = SimulationSession(s, {}, SimulationOptions{}).topology();
  const std::vector<std::string> names = platform_link_names(topo, s.cluster.num_gpus);
  ReliabilitySpec r = default_reliability();
  r.straggler_slowdown = 3;
  r.link_flap_bandwidth_factor = 0.25;
  const DegradedState down = degraded_state(s, topo, r, DegradedKind::kLinkDown);
  ASSERT_GE(down.degraded_links.size(), 4u);
  const double k = static_cast<double>(down.degraded_links.size()) / 2;
  for (const DegradedLink& l : down.degraded_links) {
    EXPECT_NE(std::find(names.begin(), names.end(), l.name), names.end()) << l.name;
    EXPECT_THAT(l.name, ::testing::StartsWith("rail0-leaf0-spine"));
    EXPECT_DOUBLE_EQ(l.bandwidth_scale, (k - 1) / k);
  }
  const DegradedState nic = degraded_state(s, topo, r, DegradedKind::kNicDown);
  EXPECT_EQ(
      nic.key(),
      "node0-nic0-up x 0.5; node0-nic0-down x 0.5; node0-nic1-up x 0.5; node0-nic1-down x 0.5");
  EXPECT_EQ(degraded_state(s, topo, r, DegradedKind::kLinkFlap).key(),
            "node0-nic0-up x 0.25; node0-nic0-down x 0.25");
  const DegradedState slow = degraded_state(s, topo, r, DegradedKind::kStraggler);
  ASSERT_TRUE(slow.straggler.has_value());
  EXPECT_EQ(slow.straggler->rank, 0);
  EXPECT_EQ(slow.straggler->compute_scale, 3);
  const SimulationOptions o = with_state(SimulationOptions{}, nic);
  EXPECT_EQ(o.scaling.degraded_links.size(), 4u);
  EXPECT_NO_THROW(check_platform_scaling(topo, s.cluster.num_gpus, o.scaling));
  // A scenario that slows a rank already cannot take another straggler.
  const Scenario what_if = load_scenario(
      kScenarios + "gpt3-175b-h100-1024.yaml",
      {{"cluster.what_if.straggler.rank", "3"}, {"cluster.what_if.straggler.compute_scale", "2"}});
  try {
    degraded_state(what_if, topo, r, DegradedKind::kStraggler);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cluster.reliability.straggler_rate_per_1000_node_days"));
  }
}

// A straggler slowing rank 0's compute 2x, replayed (in a child) on the tiny scenario: slower
// than the healthy iteration, at most twice it.
TEST(DegradedStates, AStragglersReplayIsSlower) {
  const Scenario s = load_scenario(kScenarios + "gpt-tiny-brown.yaml");
  const SimulationSession session(s, {}, SimulationOptions{});
  IterationTimeCache cache(
      isolated_state_replay(s, session.topology(), session.costs(), SimulationOptions{}));
  ReliabilitySpec r = default_reliability();
  r.straggler.rate_per_1000_node_days = 5;
  const DegradedReplays d = replay_degraded_states(s, session.topology(), r, cache, true);
  const double healthy = d.healthy_s, slow = d.replayed_s[0];
  EXPECT_GT(slow, 1.05 * healthy);
  EXPECT_LE(slow, 2 * healthy * (1 + 1e-9));
  EXPECT_EQ(cache.replays(), 2);
}

// The straggler state slows the straggler's whole TP group, so TP aggregation stays exact: the
// reduced replay (TP rank 0 of each group) gives the full replay's iteration time, and a lone
// straggler (not its group) still refuses the reduction.
TEST(DegradedStates, AStragglerTpGroupKeepsTpAggregationExact) {
  const Scenario s = load_scenario(kScenarios + "gpt-tiny-brown.yaml");  // TP 2
  const SimulationSession session(s, {}, SimulationOptions{});
  ReliabilitySpec r = default_reliability();
  r.straggler_slowdown = 3;
  const SimulationOptions slow = with_state(
      SimulationOptions{}, degraded_state(s, session.topology(), r, DegradedKind::kStraggler));
  ASSERT_TRUE(slow.straggler_tp_group);
  EXPECT_EQ(tp_aggregation_blocker(layout_of(s), session.topology(), slow), "");
  SimulationOptions lone = slow;
  lone.straggler_tp_group = false;
  EXPECT_EQ(tp_aggregation_blocker(layout_of(s), session.topology(), lone), "a straggler");
  auto replay = [&](SimulationOptions o) {
    const std::string text = run_isolated([&] {
      const SimulationResult res = simulate(s, session.topology(), session.costs(), o);
      return fmt::format("{:.17g} {}", res.iteration_time_s, res.replayed_ranks);
    });
    std::istringstream in(text);
    double t = 0;
    int64_t ranks = 0;
    in >> t >> ranks;
    return std::make_pair(t, ranks);
  };
  SimulationOptions full = slow;
  full.exact_reductions = false;
  const auto [reduced_s, reduced_ranks] = replay(slow);
  const auto [full_s, full_ranks] = replay(full);
  const auto [lone_s, lone_ranks] = replay(lone);
  EXPECT_EQ(reduced_ranks, 4);  // 8 GPUs, TP 2
  EXPECT_EQ(full_ranks, 8);
  EXPECT_NEAR(reduced_s, full_s, 1e-9 * full_s);
  EXPECT_GE(full_s, lone_s * (1 - 1e-12));  // slowing the group costs at least the one GPU
  EXPECT_EQ(lone_ranks, 8);
}

// Out of range: errors naming the key and the values allowed, from the Monte Carlo's checks and
// from the scenario file.
TEST(DegradedInputs, OutOfRangeValuesNameTheirKeyAndRange) {
  auto error = [](auto edit) {
    GoodputJob j = quiet_job();
    j.degraded_iteration_s.fill(20);
    edit(j);
    try {
      goodput_costs(j);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error([](GoodputJob& j) { j.reliability.straggler.rate_per_1000_node_days = -1; }),
              HasSubstr("cluster.reliability.straggler_rate_per_1000_node_days: must be a finite "
                        "number >= 0 (got -1)"));
  EXPECT_THAT(error([](GoodputJob& j) { j.reliability.nic_down.duration_s = 0; }),
              HasSubstr("cluster.reliability.nic_down_duration_s: must be a finite number > 0"));
  EXPECT_THAT(error([](GoodputJob& j) { j.reliability.straggler_slowdown = 0.5; }),
              HasSubstr("cluster.reliability.straggler_slowdown: must be a finite number >= 1 "
                        "(got 0.5)"));
  EXPECT_THAT(error([](GoodputJob& j) { j.reliability.link_flap_bandwidth_factor = 1.5; }),
              HasSubstr("cluster.reliability.link_flap_bandwidth_factor: must be in (0, 1] "
                        "(got 1.5)"));
  EXPECT_THAT(error([](GoodputJob& j) {
                j.reliability.link_down.rate_per_1000_node_days = 1;
                j.degraded_iteration_s.fill(0);
              }),
              HasSubstr("the iteration time of the link_down state"));

  auto file_error = [](const std::string& key, const std::string& value) {
    try {
      load_scenario(kScenarios + "gpt3-175b-h100-1024.yaml", {{key, value}});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string k = "cluster.reliability.";
  EXPECT_THAT(file_error(k + "link_down_rate_per_1000_node_days", "-2"),
              HasSubstr(k + "link_down_rate_per_1000_node_days: must be >= 0 (got -2)"));
  EXPECT_THAT(file_error(k + "straggler_slowdown", "0.9"),
              HasSubstr(k + "straggler_slowdown: must be >= 1 (got 0.9)"));
  EXPECT_THAT(file_error(k + "link_flap_duration_s", "0"),
              HasSubstr(k + "link_flap_duration_s: must be > 0 (got 0)"));
  EXPECT_THAT(file_error(k + "link_flap_bandwidth_factor", "0"),
              HasSubstr(k + "link_flap_bandwidth_factor: must be in (0, 1] (got 0)"));
  const Scenario s = load_scenario(kScenarios + "gpt3-175b-h100-1024.yaml",
                                   {{k + "straggler_rate_per_1000_node_days", "3"},
                                    {k + "straggler_slowdown", "1.5"},
                                    {k + "link_flap_bandwidth_factor", "1"}});
  ASSERT_TRUE(s.cluster.reliability.has_value());
  EXPECT_EQ(s.cluster.reliability->straggler.rate_per_1000_node_days, 3);
  EXPECT_EQ(s.cluster.reliability->straggler_slowdown, 1.5);
  EXPECT_EQ(s.cluster.reliability->link_flap_bandwidth_factor, 1);
}

}  // namespace
}  // namespace traintwin
