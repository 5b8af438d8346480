// End-to-end checks of the replay engine against closed forms. SimGrid allows one engine per
// process: every TEST here simulates once and runs in its own process under ctest.
#include "sim/replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim_test_support.hpp"

#include "core/error.hpp"
#include "core/schedule.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using testing::h100;

using testing::TableCostModel;

/// PP stages x DP replicas filling whole 8-GPU nodes (DP = 8 / PP).
Scenario pipeline_scenario(int64_t pp, int64_t v, int64_t m, int64_t layers) {
  Scenario s;
  s.name = "pipeline";
  s.model = ModelSpec{"gpt", layers, 64, 8, 256, 32, 1024};
  s.parallel.pipeline_model_parallel_size = pp;
  s.parallel.virtual_pipeline_model_parallel_size = v;
  s.parallel.data_parallel_size = 8 / pp;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = m * (8 / pp);
  s.cluster.num_gpus = 8;
  return s;
}

// A pipeline with unit costs (forward of a chunk 1/v s, backward 1/v s, everything else free;
// the activations are a few KB, so transfers take microseconds) reproduces the schedule's
// bubble (p-1)/(v m + p - 1) of the foundation issue. The DP gradient all-reduce of this tiny
// model inside the node takes microseconds.
void expect_pipeline_bubble(int64_t pp, int64_t v, int64_t m) {
  const int64_t layers = 2 * pp * v;
  const Scenario s = pipeline_scenario(pp, v, m, layers);
  const double per_layer = 1.0 / v / 2.0;  // 2 layers per chunk
  TableCostModel costs({{"attention_fwd", per_layer}, {"attention_bwd", per_layer}});
  SimulationOptions opts;
  opts.record_timeline = false;
  const SimulationResult r = simulate(s, h100(), costs, opts);
  const double ideal = ideal_bubble_fraction(PipelineScheduleKind::k1F1B, pp, m, v);
  const double iteration = 2.0 * (static_cast<double>(v * m + pp - 1)) / static_cast<double>(v);
  EXPECT_NEAR(r.iteration_time_s, iteration, iteration * 2e-3);
  EXPECT_NEAR(r.critical.bubble_s / r.iteration_time_s, ideal, 2e-3);
  EXPECT_NEAR(r.critical.compute_s, 2.0 * m, 1e-9);
}

// The progress hook: with no interval it is called every 256 ops started, with counts that only
// grow, a total equal to the ops the replay ran, and simulated times inside the iteration.
TEST(Replay, ProgressReportsOpsAndSimulatedTimeAsTheReplayGoes) {
  const Scenario s = pipeline_scenario(4, 2, 8, 16);
  TableCostModel costs({{"attention_fwd", 0.25}, {"attention_bwd", 0.25}});
  SimulationOptions opts;
  opts.record_timeline = false;
  opts.progress_interval_s = 0;
  std::vector<ReplayProgress> calls;
  opts.progress = [&calls](const ReplayProgress& p) { calls.push_back(p); };
  const SimulationResult r = simulate(s, h100(), costs, opts);
  ASSERT_GE(r.ops, 512);
  EXPECT_EQ(static_cast<int64_t>(calls.size()), r.ops / 256);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].ops_started, 256 * static_cast<int64_t>(i + 1));
    EXPECT_EQ(calls[i].ops_total, r.ops);
    EXPECT_GE(calls[i].simulated_s, 0.0);
    EXPECT_LE(calls[i].simulated_s, r.iteration_time_s);
    if (i > 0) EXPECT_GE(calls[i].elapsed_s, calls[i - 1].elapsed_s);
  }
}

TEST(Replay, TwoStagePipelineBubble) { expect_pipeline_bubble(2, 1, 8); }
TEST(Replay, FourStagePipelineBubble) { expect_pipeline_bubble(4, 1, 8); }
TEST(Replay, InterleavingReducesTheBubbleAsTheFormulaSays) { expect_pipeline_bubble(4, 2, 8); }

/// A Program of `world` ranks where every rank runs one all-reduce of `bytes` on `group`.
Program one_collective(const RankLayout& layout, GroupKind group, int64_t bytes) {
  return testing::one_collective(pipeline_scenario(1, 1, 1, 1), layout, group, bytes);
}

// Cross-node DP all-reduce on the fat tree: 4 nodes, one member each (TP 8 x DP 4), ring over
// the nodes' rail: alpha-beta 2(n-1)/n S / (NIC x ib) + 2(n-1) alpha, every rail in parallel.
TEST(Replay, CrossNodeAllReduceMatchesAlphaBeta) {
  const TopologySpec t = h100();
  const RankLayout layout(8, 1, 4, 1);
  const int64_t S = 256 << 20;
  TableCostModel costs;
  SimulationOptions opts;
  opts.collective_algorithm = "ring";
  opts.exact_reductions = false;  // every rail replayed
  const SimulationResult r = simulate_program(one_collective(layout, GroupKind::kDp, S), t, costs, opts);
  const FabricEfficiency eff;
  const double alpha = 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s + eff.step_overhead_s;
  const double expected = 1.5 * S / (t.nic.line_rate_Bps * eff.ib) + 6 * alpha;
  EXPECT_NEAR(r.iteration_time_s, expected, expected * 0.01);
  EXPECT_EQ(r.flows, 8 * 4);  // 8 DP groups (one per rail) x 4 ring edges
  EXPECT_TRUE(r.reductions.empty());
}

// The same all-reduce with the exact reductions on (the default): TP fills each node and every
// GPU has its own rail, so TP rank 0's DP group stands for all 8 — 4 flows on rail 0, the same
// time, and every rail's NIC links loaded (simulation_test compares it with the full replay).
TEST(Replay, TpAggregationByDefaultReplaysOneRailAndLoadsEvery) {
  const TopologySpec t = h100();
  const RankLayout layout(8, 1, 4, 1);
  const int64_t S = 256 << 20;
  TableCostModel costs;
  SimulationOptions opts;
  opts.collective_algorithm = "ring";
  const SimulationResult r = simulate_program(one_collective(layout, GroupKind::kDp, S), t, costs, opts);
  const FabricEfficiency eff;
  const double alpha = 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s + eff.step_overhead_s;
  const double expected = 1.5 * S / (t.nic.line_rate_Bps * eff.ib) + 6 * alpha;
  EXPECT_NEAR(r.iteration_time_s, expected, expected * 0.01);
  EXPECT_EQ(r.flows, 4);
  EXPECT_EQ(r.replayed_ranks, 4);
  ASSERT_EQ(r.reductions.size(), 1u);
  EXPECT_THAT(r.reductions[0], HasSubstr("TP aggregation"));
  EXPECT_EQ(r.collective_algorithms.at("ring"), 8);  // one per DP group, as in the full replay
  for (const TierTraffic& tier : r.link_tiers) {
    if (tier.tier != "nic") continue;
    // Each NIC link of each of the 32 GPUs (8 rails) carries one ring edge: all alike.
    EXPECT_GT(tier.bytes_mean, 0);
    EXPECT_NEAR(tier.bytes_max, tier.bytes_mean, 1e-9 * tier.bytes_max) << "every rail loaded alike";
  }
}

// A send whose recv is never posted ends with an error naming the ranks and ops, not a hang.
TEST(Replay, UnmatchedSendIsAnErrorNamingRankAndOp) {
  const RankLayout layout(1, 1, 4, 2);
  Scenario s = pipeline_scenario(2, 1, 1, 2);
  Program prog{s, layout, {}, {}};
  for (int64_t r = 0; r < 8; ++r) {
    RankProgram rp;
    rp.rank = r;
    rp.coord = layout.coord(r);
    if (r == 0) {
      Op op;
      op.kind = OpKind::kSend;
      op.stream = Stream::kPpComm;
      op.peer = 4;
      op.tag = 7;
      op.bytes = 1024;
      op.what = "send activation";
      rp.ops.push_back(op);
    }
    prog.ranks.emplace(r, std::move(rp));
  }
  TableCostModel costs;
  try {
    simulate_program(prog, h100(), costs);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("rank 0 op 0"), HasSubstr("send activation"),
                                HasSubstr("recv on rank 4 (tag 7)")));
  }
}

TEST(Replay, DependencyOnALaterOpIsAnError) {
  const RankLayout layout(1, 1, 8, 1);
  Program prog{pipeline_scenario(1, 1, 1, 1), layout, {}, {}};
  RankProgram rp;
  Op a, b;
  a.id = 0;
  a.deps = {1};
  a.what = "first";
  b.id = 1;
  b.deps = {0};
  b.what = "second";
  rp.ops = {a, b};
  prog.ranks.emplace(0, rp);
  TableCostModel costs;
  try {
    simulate_program(prog, h100(), costs);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("rank 0 op 0"), HasSubstr("dependency cycle")));
  }
}

}  // namespace
}  // namespace traintwin
