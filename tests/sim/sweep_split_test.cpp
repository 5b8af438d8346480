// Tests of the sweep's pipeline-split axis (sim/sweep_split.hpp): the water-filling split and the
// family of splits against hand-worked examples, the layout strings against Megatron-Core's
// parser (core/pipeline_split.hpp), the configurations the axis adds (checked by the rules, each
// stage's memory on its own GPUs) and the refusals. No engine runs here.
#include "sim/sweep_split.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/memory_reserve.hpp"
#include "core/pipeline_split.hpp"
#include "sim/summary.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;

std::string gpt3_path() {
  return std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt3-175b-h100-128.yaml";
}

// Worked by hand. Stage A 3 s per layer, B 1 s, 8 layers: max(3a, b) with a + b = 8 is least at
// a = 2, b = 6 (6 s each). With a fixed 2 s on A and 1 s per layer on both, 6 layers: a + 2 = b,
// a = 2, b = 4.
TEST(SweepSplit, BalancedLayersMinimiseTheSlowestStage) {
  EXPECT_EQ(balanced_layers({{0, 3}, {0, 1}}, 8), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(balanced_layers({{2, 1}, {0, 1}}, 6), (std::vector<int64_t>{2, 4}));
  // Equal stages: the even split.
  EXPECT_EQ(balanced_layers({{0, 1}, {0, 1}, {0, 1}, {0, 1}}, 12),
            (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_THROW(balanced_layers({}, 4), InvalidArgument);
  EXPECT_THROW(balanced_layers({{0, 0}}, 4), InvalidArgument);
}

// Even {6, 6} towards balanced {3, 9}, t = 0, 1/8, ..., 3/2 rounded by largest remainders (worked
// by hand in steps of 1/8): {6,6}, {5,7}, {4,8}, {3,9}, then past the balanced split {2,10}; each
// once, even first, every one summing to 12.
TEST(SweepSplit, FamilyMovesFromEvenTowardsBalancedAndPast) {
  const auto family = split_family({6, 6}, {3, 9});
  const std::vector<std::vector<int64_t>> expected = {{6, 6}, {5, 7}, {4, 8}, {3, 9}, {2, 10}};
  EXPECT_EQ(family, expected);
  EXPECT_EQ(split_family({4, 4}, {4, 4}), (std::vector<std::vector<int64_t>>{{4, 4}}));
  EXPECT_THROW(split_family({6, 6}, {3, 8}), InvalidArgument);
}

// The layout strings parse under Megatron-Core's rules into the layers asked for, per stage and,
// under interleaving, per chunk (the first chunks one more).
TEST(SweepSplit, LayoutStringsGiveTheLayersAskedFor) {
  EXPECT_EQ(layout_of_layers({5, 19}, 1), "E,t*5|t*19,L");
  EXPECT_EQ(layout_of_layers({3, 4}, 2), "E,t*2|t*2|t*1|t*2,L");
  Scenario s = load_scenario(gpt3_path(), {{"parallelism.virtual_pipeline_model_parallel_size", "2"}});
  const std::vector<int64_t> layers = {6, 6, 6, 6, 18, 18, 18, 18};
  s.parallel.pipeline_model_parallel_layout = layout_of_layers(layers, 2);
  EXPECT_EQ(stage_layers(s), layers);
  EXPECT_EQ(chunk_layers(s, 4, 0).num_layers, 9);
  EXPECT_EQ(chunk_layers(s, 0, 1).num_layers, 3);
  EXPECT_THROW(layout_of_layers({}, 1), InvalidArgument);
}

TEST(SweepSplit, ParsesAutoOrALayoutListAndRefusesBadLists) {
  EXPECT_TRUE(parse_pipeline_split_axis("--pipeline-split", "auto").automatic);
  const PipelineSplitAxis two = parse_pipeline_split_axis("--pipeline-split", "E,t*5|t*19,L; E,t*6|t*18,L");
  EXPECT_EQ(two.layouts, (std::vector<std::string>{"E,t*5|t*19,L", "E,t*6|t*18,L"}));
  for (const char* bad : {"", "E,t*5|t*19,L;", "auto;E|L", "E|L;E|L"}) {
    try {
      parse_pipeline_split_axis("--pipeline-split", bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("--pipeline-split")) << bad;
    }
  }
}

/// The GPT-3 175B layout (TP 4, PP 8, DP 4) with VPP 1, as the one configuration of a sweep.
std::vector<SweepConfiguration> one_configuration(const Scenario& base) {
  return enumerate_configurations(base, SweepAxes{}, 80e9);
}

// Explicit layouts: one new row each, after the enumerated one; a layout of the wrong stage
// count is an invalid row with Megatron-Core's rule; the split a row holds is the one listed.
TEST(SweepSplit, ListedLayoutsAddCheckedRows) {
  const Scenario base =
      load_scenario(gpt3_path(), {{"parallelism.virtual_pipeline_model_parallel_size", "1"}});
  PipelineSplitAxis axis;
  axis.layouts = {"E,t*8|t*8|t*8|t*8|t*16|t*16|t*16|t*16,L", "E,t*48|t*48,L"};
  const auto rows = add_pipeline_splits(one_configuration(base), axis, {}, 80e9, {});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0].scenario.parallel.pipeline_model_parallel_layout.empty());
  EXPECT_EQ(rows[1].index, 1);
  EXPECT_EQ(rows[2].index, 2);
  ASSERT_TRUE(rows[1].valid) << rows[1].invalid_reason;
  EXPECT_EQ(stage_layers(rows[1].scenario), (std::vector<int64_t>{8, 8, 8, 8, 16, 16, 16, 16}));
  EXPECT_FALSE(rows[2].valid);
  EXPECT_THAT(rows[2].invalid_reason, HasSubstr("pipeline_model_parallel_layout"));
}

// A row the axis adds holds another split than its base: it takes no twin's evaluation
// (SweepConfiguration::evaluates_as, a Megatron-FSDP optim row's link to its no_shard twin), even
// when its base does.
TEST(SweepSplit, AddedRowsTakeNoTwinsEvaluation) {
  const Scenario base =
      load_scenario(gpt3_path(), {{"parallelism.virtual_pipeline_model_parallel_size", "1"}});
  std::vector<SweepConfiguration> configs = one_configuration(base);
  configs.push_back(configs[0]);
  configs[1].index = 1;
  configs[1].evaluates_as = 0;  // as if its twin
  PipelineSplitAxis axis;
  axis.layouts = {"E,t*8|t*8|t*8|t*8|t*16|t*16|t*16|t*16,L"};
  const auto rows = add_pipeline_splits(configs, axis, {}, 80e9, {});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1].evaluates_as, 0);
  EXPECT_EQ(rows[3].scenario.parallel.pipeline_model_parallel_layout, axis.layouts[0]);
  EXPECT_EQ(rows[2].evaluates_as, -1);
  EXPECT_EQ(rows[3].evaluates_as, -1);
}

// auto: the family from the even split towards the balanced one of the stage costs given (A100-
// like stages 0-3 three times slower per layer than 4-7: 3a = b, 4a + 4b = 96, a = 6, b = 18),
// the even split itself not added again.
TEST(SweepSplit, AutoAddsTheFamilyTowardsTheBalancedSplit) {
  const Scenario base =
      load_scenario(gpt3_path(), {{"parallelism.virtual_pipeline_model_parallel_size", "1"}});
  PipelineSplitAxis axis;
  axis.automatic = true;
  const StageCostFunction costs = [](const Scenario&) {
    std::vector<StageCost> c(8, StageCost{0, 1});
    for (int i = 0; i < 4; ++i) c[static_cast<size_t>(i)].per_layer_s = 3;
    return c;
  };
  const auto rows = add_pipeline_splits(one_configuration(base), axis, costs, 80e9, {});
  ASSERT_GT(rows.size(), 2u);
  std::vector<std::vector<int64_t>> splits;
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_TRUE(rows[i].valid) << rows[i].invalid_reason;
    splits.push_back(stage_layers(rows[i].scenario));
  }
  const std::vector<int64_t> balanced = {6, 6, 6, 6, 18, 18, 18, 18};
  const std::vector<int64_t> even(8, 12);
  EXPECT_NE(std::find(splits.begin(), splits.end(), balanced), splits.end());
  EXPECT_EQ(std::find(splits.begin(), splits.end(), even), splits.end());
  // No cost (the estimator refused the layout): nothing added.
  const auto none = add_pipeline_splits(one_configuration(base), axis,
                                        [](const Scenario&) { return std::vector<StageCost>{}; },
                                        80e9, {});
  EXPECT_EQ(none.size(), 1u);
}

TEST(SweepSplit, RefusesABaseWithItsOwnUnevenSplit) {
  const Scenario base = load_scenario(
      gpt3_path(), {{"parallelism.virtual_pipeline_model_parallel_size", "1"},
                    {"parallelism.decoder_first_pipeline_num_layers", "6"},
                    {"parallelism.decoder_last_pipeline_num_layers", "6"}});
  PipelineSplitAxis axis;
  axis.layouts = {"E,t*8|t*8|t*8|t*8|t*16|t*16|t*16|t*16,L"};
  try {
    add_pipeline_splits(one_configuration(base), axis, {}, 80e9, {});
    FAIL() << "a base with decoder_first_pipeline_num_layers was split again";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("parallelism.decoder_first_pipeline_num_layers"));
  }
}

// On a mixed cluster each stage is judged on its own GPUs: H200 nodes (141 GB) for stages 0-3 and
// H100 nodes (80 GB) for 4-7 (mixed-h100-h200-superpod.yaml with its H200 group cut to 8 nodes).
// The verdict and excess are layout_memory_fit's and the largest peak-less-capacity of the stages,
// computed here from the memory model; a layout heavy on the H200 stages fits where the smallest
// GPU (80 GB for every stage) would not.
TEST(SweepSplit, EachStageIsJudgedOnItsOwnGpuMemory) {
  TopologySpec topo = load_topology(std::string(TRAINTWIN_SOURCE_DIR) +
                                    "/topologies/mixed-h100-h200-superpod.yaml");
  ASSERT_EQ(topo.node_groups.size(), 1u);
  topo.node_groups[0].nodes = 8;
  const StageMemoryCapacity capacity = stage_memory_capacity(topo, {128});
  const Scenario base = load_scenario(
      gpt3_path(), {{"parallelism.virtual_pipeline_model_parallel_size", "1"},
                    {"training.use_distributed_optimizer", "false"},
                    {"training.overlap_param_gather", "false"}});
  const std::vector<double> caps = capacity(base);
  ASSERT_EQ(caps.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(caps[static_cast<size_t>(i)],
              i < 4 ? topo.node_groups[0].gpu.memory_bytes : topo.gpu.memory_bytes);
  }
  EXPECT_GT(caps[0], caps[7]);
  SweepConfiguration c = one_configuration(base).front();
  c.scenario.parallel.pipeline_model_parallel_layout = "E,t*20|t*20|t*20|t*20|t*4|t*4|t*4|t*4,L";
  check_configuration(c, smallest_gpu_memory_bytes(topo), capacity);
  ASSERT_TRUE(c.valid) << c.invalid_reason;
  const std::vector<StageMemory> stages = memory_per_stage(c.scenario);
  double excess = -1e300, peak = 0;
  for (const StageMemory& m : stages) {
    excess = std::max(excess, m.total_bytes() - caps[static_cast<size_t>(m.pp_rank)]);
    peak = std::max(peak, m.total_bytes());
  }
  EXPECT_EQ(c.excess_memory_bytes, std::max(0.0, excess));
  EXPECT_EQ(c.memory_verdict, layout_memory_fit(c.scenario, stages, caps).verdict);
  EXPECT_EQ(c.peak_memory_bytes, peak);
  SweepConfiguration smallest = c;
  check_configuration(smallest, smallest_gpu_memory_bytes(topo));
  EXPECT_EQ(smallest.excess_memory_bytes, std::max(0.0, peak - smallest_gpu_memory_bytes(topo)));
  // The heavy stages sit on the H200s: judged on their own GPU the layout is closer to fitting.
  EXPECT_LT(c.excess_memory_bytes, smallest.excess_memory_bytes + 1e-9);
  EXPECT_GT(peak, smallest_gpu_memory_bytes(topo));  // (it would not fit 80 GB everywhere)
}

}  // namespace
}  // namespace traintwin
