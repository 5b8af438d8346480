// The analytical fast path (sim/analytical.hpp) against the replay (sim/replay.hpp): iteration
// time within 5 % on every shipped scenario. The replay runs in a child process (run_isolated:
// one SimGrid engine per process). gpt-400b-h100-16384 is left out: its replay takes ~70 s
// (bench/analytical_bench.cpp covers it by hand).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "core/pipeline_split.hpp"
#include "core/program.hpp"
#include "core/scenario.hpp"
#include "sim/analytical.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/replay.hpp"

namespace traintwin {
namespace {

std::string scenario_path(const std::string& name) {
  return std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/" + name + ".yaml";
}

class AnalyticalVsReplay : public ::testing::TestWithParam<const char*> {};

TEST_P(AnalyticalVsReplay, IterationTimeWithinFivePercent) {
  const Scenario s = load_scenario(scenario_path(GetParam()));
  const TopologySpec topo = load_topology(s.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const std::string replay_text = run_isolated([&] {
    SimulationOptions opts;
    opts.record_timeline = false;
    const SimulationResult r = simulate(s, topo, *costs, opts);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", r.iteration_time_s);
    return std::string(buf);
  });
  const double replay_s = std::stod(replay_text);
  const AnalyticalResult a = estimate(s, topo, *costs);
  const double diff = (a.iteration_time_s - replay_s) / replay_s;
  std::printf("%-28s replay %10.6f s  analytical %10.6f s  diff %+6.2f %%\n", GetParam(), replay_s,
              a.iteration_time_s, 100 * diff);
  std::printf("  critical stage: compute %.4f tp %.4f pp %.4f dp %.4f bubble %.4f s\n",
              a.critical.compute_s, a.critical.exposed_tp_s, a.critical.exposed_pp_s,
              a.critical.exposed_dp_s, a.critical.bubble_s);
  EXPECT_LT(std::abs(diff), 0.05);
  // The breakdown adds up to the iteration time on every stage.
  ASSERT_EQ(a.per_stage.size(), static_cast<size_t>(s.parallel.pipeline_model_parallel_size));
  for (const TimeBreakdown& b : a.per_stage) {
    EXPECT_NEAR(b.compute_s + b.exposed_tp_s + b.exposed_pp_s + b.exposed_dp_s + b.bubble_s,
                a.iteration_time_s, 1e-9 * a.iteration_time_s);
  }
}

INSTANTIATE_TEST_SUITE_P(ShippedScenarios, AnalyticalVsReplay,
                         ::testing::Values("gpt-1.3b-h100-8", "gpt-1.3b-h200-8", "gpt-22b-a100-8",
                                           "gpt3-175b-a100-1024", "gpt3-175b-h100-1024",
                                           "gpt3-175b-h100-128", "megatron-145b-a100-1536"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

// Uneven pipeline splits (core/pipeline_split.hpp) on the DGX Cloud GPT-3 recipe (TP 4 x PP 8 on
// 128 H100): the two engines agree within 5 %, and the compute of each stage follows its layers.
struct UnevenCase {
  const char* name;
  std::vector<Override> overrides;
};

/// gtest prints the case by its name (not its bytes) in test names and failures.
void PrintTo(const UnevenCase& c, std::ostream* os) { *os << c.name; }

class UnevenAnalyticalVsReplay : public ::testing::TestWithParam<UnevenCase> {};

TEST_P(UnevenAnalyticalVsReplay, IterationTimeWithinFivePercentAndComputeFollowsLayers) {
  const Scenario s = load_scenario(scenario_path("gpt3-175b-h100-128"), GetParam().overrides);
  const TopologySpec topo = load_topology(s.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const double replay_s = std::stod(run_isolated([&] {
    SimulationOptions opts;
    opts.record_timeline = false;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", simulate(s, topo, *costs, opts).iteration_time_s);
    return std::string(buf);
  }));
  const AnalyticalResult a = estimate(s, topo, *costs);
  const double diff = (a.iteration_time_s - replay_s) / replay_s;
  std::printf("%-24s layers %s: replay %10.6f s  analytical %10.6f s  diff %+6.2f %%\n",
              GetParam().name, layers_per_stage_text(s).c_str(), replay_s, a.iteration_time_s,
              100 * diff);
  EXPECT_LT(std::abs(diff), 0.05);
  // Every transformer layer costs the same wherever it runs: a middle stage's compute (less the
  // optimizer) per layer equals that of the even split of the 96-layer model on the same layout
  // (12 layers per stage, 2 chunks), and the end stages, holding fewer layers, compute less.
  ASSERT_EQ(a.per_stage.size(), 8u);
  const Scenario even = load_scenario(scenario_path("gpt3-175b-h100-128"),
                                      {{"parallelism.virtual_pipeline_model_parallel_size", "2"}});
  const AnalyticalResult e = estimate(even, topo, *costs);
  auto layer_compute_s = [](const TimeBreakdown& b) { return b.compute_s - b.optimizer_s; };
  const double even_per_layer = layer_compute_s(e.per_stage[1]) / 12.0;
  for (int64_t r = 1; r < 7; ++r) {
    const double per_layer = layer_compute_s(a.per_stage[static_cast<size_t>(r)]) /
                             static_cast<double>(layers_on_stage(s, r));
    EXPECT_NEAR(per_layer, even_per_layer, 1e-9 * even_per_layer) << "stage " << r;
  }
  EXPECT_LT(layers_on_stage(s, 0), layers_on_stage(s, 1));
  EXPECT_LT(layers_on_stage(s, 7), layers_on_stage(s, 1));
  EXPECT_LT(layer_compute_s(a.per_stage[0]), layer_compute_s(a.per_stage[1]));
  EXPECT_LT(layer_compute_s(a.per_stage[0]), layer_compute_s(e.per_stage[0]));
}

INSTANTIATE_TEST_SUITE_P(
    UnevenSplits, UnevenAnalyticalVsReplay,
    ::testing::Values(
        // 94 layers + embedding + loss = 96 = 8 stages x 6 chunks x 2: chunks 1, 2, ..., 2, 1.
        UnevenCase{"AccountForEmbeddingAndLoss",
                   {{"model.num_layers", "94"},
                    {"parallelism.virtual_pipeline_model_parallel_size", "6"},
                    {"parallelism.account_for_embedding_in_pipeline_split", "true"},
                    {"parallelism.account_for_loss_in_pipeline_split", "true"}}},
        // 96 layers: 6 on the first and last stages, 14 on each of the 6 others, 2 chunks each.
        UnevenCase{"FirstAndLastStageLayers",
                   {{"parallelism.virtual_pipeline_model_parallel_size", "2"},
                    {"parallelism.decoder_first_pipeline_num_layers", "6"},
                    {"parallelism.decoder_last_pipeline_num_layers", "6"}}}),
    [](const auto& info) { return std::string(info.param.name); });

// One stage, no pipeline: the estimate is the compute and TP chain plus the DP tail.
TEST(Analytical, SingleStageHasNoPipelineTime) {
  const Scenario s = load_scenario(scenario_path("gpt-22b-a100-8"));
  const TopologySpec topo = load_topology(s.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const AnalyticalResult a = estimate(s, topo, *costs);
  EXPECT_GT(a.iteration_time_s, 0);
  EXPECT_EQ(a.critical.exposed_pp_s, 0);
  EXPECT_GT(a.critical.exposed_tp_s, 0);
  EXPECT_NEAR(a.critical.bubble_s, 0, 1e-9);
}

// Closed-form p2p: NVLink inside a node, NIC rate across nodes, latency by route.
TEST(Analytical, PointToPointClosedForm) {
  const TopologySpec topo =
      load_topology(std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/dgx-h100-superpod.yaml");
  const double S = 50e6;
  EXPECT_NEAR(p2p_time_s(0, 1, S, topo),
              topo.node.nvlink_latency_s + S / topo.node.nvlink_bandwidth_Bps, 1e-15);
  EXPECT_NEAR(p2p_time_s(0, 8, S, topo),
              2 * topo.nic.latency_s + topo.fabric.hop_latency_s + S / topo.nic.line_rate_Bps,
              1e-15);
  EXPECT_THROW(p2p_time_s(3, 3, S, topo), InvalidArgument);
}

// Interleaving lowers the bubble: VPP 2 beats 1F1B on the same layout, as in the replay.
TEST(Analytical, InterleavingShrinksTheBubble) {
  const std::string f = scenario_path("gpt3-175b-h100-1024");
  const Scenario one = load_scenario(f);
  const Scenario two =
      load_scenario(f, {{"parallelism.virtual_pipeline_model_parallel_size", "2"}});
  const TopologySpec topo = load_topology(one.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const AnalyticalResult a = estimate(one, topo, *costs);
  const AnalyticalResult b = estimate(two, topo, *costs);
  EXPECT_LT(b.critical.bubble_s, a.critical.bubble_s);
}

// CP > 1 is refused as build_program refuses it.
TEST(Analytical, ContextParallelIsUnsupported) {
  Scenario s = load_scenario(scenario_path("gpt-1.3b-h100-8"));
  s.parallel.context_parallel_size = 2;
  s.parallel.data_parallel_size = 4;
  const TopologySpec topo = load_topology(s.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  EXPECT_THROW(estimate(s, topo, *costs), UnsupportedError);
}

}  // namespace
}  // namespace traintwin

namespace traintwin {
namespace {

// What-ifs: gpu_speed_scale halves every compute op, ib_bandwidth_scale speeds the cross-node
// collectives; a straggler or a degraded link breaks the one-rank-per-stage symmetry and is
// refused (the replay handles them).
TEST(AnalyticalWhatIf, ScalesComputeAndLinksAndRefusesAsymmetricKnobs) {
  const std::string f = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt3-175b-h100-1024.yaml";
  const Scenario base = load_scenario(f);
  const TopologySpec topo = load_topology(base.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const AnalyticalResult b = estimate(base, topo, *costs);
  const AnalyticalResult fast = estimate(load_scenario(f, {{"cluster.what_if.gpu_speed_scale", "2"}}), topo, *costs);
  EXPECT_NEAR(fast.critical.compute_s, b.critical.compute_s / 2, 1e-9 * b.critical.compute_s);
  const AnalyticalResult ib = estimate(load_scenario(f, {{"cluster.what_if.ib_bandwidth_scale", "2"}}), topo, *costs);
  EXPECT_LT(ib.critical.exposed_dp_s, b.critical.exposed_dp_s);
  EXPECT_LT(ib.iteration_time_s, b.iteration_time_s);
  const Scenario straggler = load_scenario(
      f, {{"cluster.what_if.straggler.rank", "3"}, {"cluster.what_if.straggler.compute_scale", "1.2"}});
  EXPECT_THROW(estimate(straggler, topo, *costs), UnsupportedError);
}

}  // namespace
}  // namespace traintwin
