// The analytical estimator's shortcuts change no result. estimate() lowers only the boundary
// steps of its probe (StepScope::kBoundary: per model chunk the first forward and the last
// backward); the straightforward estimate lowers every micro-batch of the probe
// (StepScope::kAll). Both must give the same iteration time and the same breakdown on every
// stage, bit for bit, on the shipped scenarios and on a sample of the sweep grid of
// bench/sweep_bench.cpp (GPT-3 175B on 1024 H100: TP, PP, micro-batch, VPP, recompute, SP,
// distributed optimizer). An EstimateCache (what one estimate reuses from the last: schedules,
// collective and p2p times) changes no result either, on every layout of that grid the memory
// model accepts, estimated in enumeration order as a sweep does.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/sweep_grid.hpp"
#include "core/error.hpp"
#include "core/program.hpp"
#include "core/scenario.hpp"
#include "sim/analytical.hpp"
#include "sim/cost_model.hpp"
#include "sim/sweep.hpp"

namespace traintwin {
namespace {

std::string scenario_path(const std::string& name) {
  return std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/" + name + ".yaml";
}

/// Every field of two breakdowns, exactly.
void expect_same(const TimeBreakdown& a, const TimeBreakdown& b, const std::string& what) {
  EXPECT_EQ(a.rank, b.rank) << what;
  EXPECT_EQ(a.compute_s, b.compute_s) << what;
  EXPECT_EQ(a.optimizer_s, b.optimizer_s) << what;
  EXPECT_EQ(a.exposed_tp_s, b.exposed_tp_s) << what;
  EXPECT_EQ(a.exposed_cp_s, b.exposed_cp_s) << what;
  EXPECT_EQ(a.exposed_ep_s, b.exposed_ep_s) << what;
  EXPECT_EQ(a.exposed_pp_s, b.exposed_pp_s) << what;
  EXPECT_EQ(a.exposed_dp_s, b.exposed_dp_s) << what;
  EXPECT_EQ(a.bubble_s, b.bubble_s) << what;
}

/// The boundary-step probe against the full probe on `s`: the same metrics, exactly. Returns
/// the iteration time.
double expect_probe_scopes_agree(const Scenario& s, const TopologySpec& topo,
                                 const CostModel& costs, const std::string& what) {
  const IterationMetrics fast = estimate(s, topo, costs, {}, StepScope::kBoundary);
  const IterationMetrics full = estimate(s, topo, costs, {}, StepScope::kAll);
  EXPECT_EQ(fast.iteration_time_s, full.iteration_time_s) << what;
  expect_same(fast.critical, full.critical, what + " critical");
  EXPECT_EQ(fast.per_stage.size(), full.per_stage.size()) << what;
  for (size_t r = 0; r < std::min(fast.per_stage.size(), full.per_stage.size()); ++r) {
    expect_same(fast.per_stage[r], full.per_stage[r], what + " stage " + std::to_string(r));
  }
  EXPECT_LE(fast.ops, full.ops) << what;  // the boundary probe lowers a subset of the steps
  return full.iteration_time_s;
}

class ProbeScopeOnShippedScenarios : public ::testing::TestWithParam<const char*> {};

TEST_P(ProbeScopeOnShippedScenarios, BoundaryStepsGiveTheFullProbesResult) {
  const Scenario s = load_scenario(scenario_path(GetParam()));
  const TopologySpec topo = load_topology(s.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  expect_probe_scopes_agree(s, topo, *costs, GetParam());
}

// Every shipped scenario the estimator takes (gpt-400b-h100-16384 too: its probe is small).
INSTANTIATE_TEST_SUITE_P(Shipped, ProbeScopeOnShippedScenarios,
                         ::testing::Values("gpt-1.3b-h100-8", "gpt-1.3b-h200-8", "gpt-22b-a100-8",
                                           "gpt-tiny-brown", "gpt3-175b-a100-1024",
                                           "gpt3-175b-h100-1024", "gpt3-175b-h100-128",
                                           "megatron-145b-a100-1536", "whatif-175b-2x-ib",
                                           "llama3.1-8b-h100-8", "llama3.1-70b-h100-64",
                                           "llama3.1-405b-h100-1024", "nemotron4-15b-h100-16",
                                           "llama3.1-8b-128k-h100-64", "mixtral-8x7b-h100-64",
                                           "qwen3-30b-a3b-h100-16", "grok1-314b-h100-512",
                                           "gpt-400b-h100-16384", "llama3.1-405b-gb200-256"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

// The switches that make the first forward and the last backward of a chunk differ from the
// other steps — parameter all-gathers the first forward waits for (overlap_param_gather, on in
// this scenario), gradient buckets the last backward triggers (overlap_grad_reduce on and off) —
// and the features that add ops to a step (TP communication overlap, on here; FP8 with the
// delayed and the tensorwise recipes; CP; recomputation; an uneven split; Megatron-FSDP's
// per-micro-batch reduce-scatters and ZeRO-3's per-layer gathers), with interleaving.
TEST(ProbeScope, BoundaryStepsGiveTheFullProbesResultWithEveryStepFeature) {
  const std::string f = scenario_path("gpt3-175b-h100-128");  // TP 4, PP 8, VPP 12
  const Scenario base = load_scenario(f);
  ASSERT_TRUE(base.training.overlap_param_gather);
  ASSERT_TRUE(base.training.tp_comm_overlap);
  const TopologySpec topo = load_topology(base.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const std::vector<std::vector<Override>> cases = {
      {},
      {{"parallelism.virtual_pipeline_model_parallel_size", "3"}},
      {{"training.overlap_param_gather", "false"}},
      {{"training.overlap_param_gather", "false"}, {"training.overlap_grad_reduce", "false"}},
      {{"training.overlap_param_gather", "false"}, {"training.use_distributed_optimizer", "false"}},
      {{"training.tp_comm_overlap", "false"}},
      {{"training.tp_comm_overlap", "false"}, {"parallelism.sequence_parallel", "false"}},
      {{"training.recompute_granularity", "full"}},
      {{"training.recompute_granularity", "selective"}},
      {{"training.fp8_format", "hybrid"}},
      {{"training.fp8_format", "hybrid"}, {"training.fp8_recipe", "tensorwise"}},
      {{"parallelism.context_parallel_size", "2"}, {"cluster.num_gpus", "256"}},
      {{"parallelism.virtual_pipeline_model_parallel_size", "2"},
       {"parallelism.decoder_first_pipeline_num_layers", "6"},
       {"parallelism.decoder_last_pipeline_num_layers", "6"}},
      // Megatron-FSDP ZeRO-2 and ZeRO-3 (every step's DP-stream ops queued), ZeRO-3 with HSDP
      // (the replica all-reduces of the last micro-batch only).
      {{"training.use_megatron_fsdp", "true"},
       {"training.data_parallel_sharding_strategy", "optim_grads"}},
      {{"training.use_megatron_fsdp", "true"},
       {"training.data_parallel_sharding_strategy", "optim_grads_params"}},
      {{"training.use_megatron_fsdp", "true"},
       {"training.data_parallel_sharding_strategy", "optim_grads_params"},
       {"training.num_distributed_optimizer_instances", "2"}},
      // ZeRO-3 with the units kept for the step (PP 8: gathered by each chunk's first forward
      // only, core/fsdp_gather_once.hpp): the later forwards have no gathers.
      {{"training.use_megatron_fsdp", "true"},
       {"training.data_parallel_sharding_strategy", "optim_grads_params"},
       {"training.reshard_after_forward", "false"}},
  };
  for (const auto& set : cases) {
    std::string what;
    for (const Override& o : set) what += o.key + "=" + o.value + " ";
    expect_probe_scopes_agree(load_scenario(f, set), topo, *costs, what);
  }
}

// A sample of the grid bench/sweep_bench.cpp times (bench/sweep_grid.hpp): every 13th
// configuration the memory model accepts, fitting or not — ~130 layouts with every TP, PP, VPP,
// micro-batch, recompute, SP and distributed-optimizer value.
TEST(ProbeScope, BoundaryStepsGiveTheFullProbesResultOnTheSweepGrid) {
  const Scenario base = load_scenario(scenario_path("gpt3-175b-h100-1024"));
  const TopologySpec topo = load_topology(base.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const SweepAxes axes = gpt3_175b_speed_grid();
  int compared = 0, interleaved = 0;
  int64_t valid = 0;
  for (const SweepConfiguration& c :
       enumerate_configurations(base, axes, topo.gpu.memory_bytes)) {
    if (!c.valid || valid++ % 13 != 0) continue;
    const ParallelConfig& p = c.scenario.parallel;
    const std::string what = "TP " + std::to_string(p.tensor_model_parallel_size) + " PP " +
                             std::to_string(p.pipeline_model_parallel_size) + " VPP " +
                             std::to_string(p.virtual_pipeline_model_parallel_size) + " mbs " +
                             std::to_string(c.scenario.training.micro_batch_size) + " " +
                             to_string(c.scenario.training.recompute_granularity) + " SP " +
                             std::to_string(p.sequence_parallel) + " DO " +
                             std::to_string(c.scenario.training.use_distributed_optimizer);
    expect_probe_scopes_agree(c.scenario, topo, *costs, what);
    ++compared;
    interleaved += p.virtual_pipeline_model_parallel_size > 1;
  }
  std::printf("compared %d grid configurations (%d interleaved)\n", compared, interleaved);
  EXPECT_GE(compared, 100);
  EXPECT_GE(interleaved, 40);
}

// Every valid layout of the grid, in enumeration order with one cache (neighbours share their
// schedule and collectives: the cache hits), against an estimate without one: the same metrics,
// bit for bit.
TEST(EstimateCache, ReusedSchedulesAndCollectiveTimesGiveTheSameResultOnTheSweepGrid) {
  const Scenario base = load_scenario(scenario_path("gpt3-175b-h100-1024"));
  const TopologySpec topo = load_topology(base.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const FabricEfficiency eff;
  EstimateCache cache;
  int compared = 0;
  for (const SweepConfiguration& c :
       enumerate_configurations(base, gpt3_175b_speed_grid(), topo.gpu.memory_bytes)) {
    if (!c.valid) continue;
    const std::string what = "configuration " + std::to_string(c.index);
    const IterationMetrics cached =
        estimate(c.scenario, topo, *costs, eff, StepScope::kBoundary, &cache);
    const IterationMetrics plain = estimate(c.scenario, topo, *costs, eff, StepScope::kBoundary);
    EXPECT_EQ(cached.iteration_time_s, plain.iteration_time_s) << what;
    EXPECT_EQ(cached.ops, plain.ops) << what;
    expect_same(cached.critical, plain.critical, what + " critical");
    ASSERT_EQ(cached.per_stage.size(), plain.per_stage.size()) << what;
    for (size_t r = 0; r < plain.per_stage.size(); ++r) {
      expect_same(cached.per_stage[r], plain.per_stage[r], what + " stage " + std::to_string(r));
    }
    ++compared;
  }
  EXPECT_EQ(compared, 1692);
}

// The sweep evaluates a Megatron-FSDP optim row (ZeRO-1 with the distributed optimizer) as its
// no_shard twin (SweepConfiguration::evaluates_as): on the grid with the sharding axis, every
// pair the enumeration links estimates alike, bit for bit, each on its own scenario.
TEST(EstimateCache, ZeroOneTwinsOfTheShardingGridEstimateAlike) {
  const Scenario base = load_scenario(scenario_path("gpt3-175b-h100-1024"));
  const TopologySpec topo = load_topology(base.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const auto configs =
      enumerate_configurations(base, gpt3_175b_sharding_grid(), topo.gpu.memory_bytes);
  int linked = 0, compared = 0;
  for (const SweepConfiguration& c : configs) {
    if (c.evaluates_as < 0) continue;
    const SweepConfiguration& twin = configs.at(static_cast<size_t>(c.evaluates_as));
    EXPECT_EQ(twin.index, c.evaluates_as);
    EXPECT_EQ(c.scenario.training.data_parallel_sharding_strategy,
              DataParallelShardingStrategy::kOptim);
    EXPECT_EQ(twin.scenario.training.data_parallel_sharding_strategy,
              DataParallelShardingStrategy::kNoShard);
    EXPECT_EQ(twin.peak_memory_bytes, c.peak_memory_bytes);
    if (linked++ % 7 != 0) continue;
    const std::string what = "configuration " + std::to_string(c.index);
    const IterationMetrics a = estimate(c.scenario, topo, *costs);
    const IterationMetrics b = estimate(twin.scenario, topo, *costs);
    EXPECT_EQ(a.iteration_time_s, b.iteration_time_s) << what;
    EXPECT_EQ(a.ops, b.ops) << what;
    ASSERT_EQ(a.per_stage.size(), b.per_stage.size()) << what;
    for (size_t r = 0; r < a.per_stage.size(); ++r) {
      expect_same(a.per_stage[r], b.per_stage[r], what + " stage " + std::to_string(r));
    }
    ++compared;
  }
  std::printf("%d linked pairs, %d compared\n", linked, compared);
  EXPECT_EQ(linked, 846);  // every valid distributed-optimizer row of the grid without the axis
  EXPECT_GE(compared, 100);
}

// A cache serves the topology and fabric efficiency it was first used with.
TEST(EstimateCache, RefusesAnotherTopology) {
  const Scenario s = load_scenario(scenario_path("gpt3-175b-h100-1024"));
  const TopologySpec topo = load_topology(s.cluster.topology);
  const TopologySpec other = topo;
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const FabricEfficiency eff;
  EstimateCache cache;
  estimate(s, topo, *costs, eff, StepScope::kBoundary, &cache);
  EXPECT_THROW(estimate(s, other, *costs, eff, StepScope::kBoundary, &cache), InvalidArgument);
}

}  // namespace
}  // namespace traintwin
