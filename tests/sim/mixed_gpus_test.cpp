// Tests of a job on a mixed cluster (topologies' node_groups): each rank timed on its own GPU by
// the timing layer (sim/timed_program.hpp), the replay against a straggler that slows the same
// ranks by the same factor, the summary's MFU over the job's peaks, and the estimator's refusal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>

#include "core/error.hpp"
#include "core/program.hpp"
#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "core/flops.hpp"
#include "core/memory.hpp"
#include "sim/analytical.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "sim/timed_program.hpp"
#include "tests/sim/sim_test_support.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;

const std::string kScenarios = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/";

/// The tiny GPT widened to h 2048, 16 heads, sequences of 2048 (so that compute, not latency,
/// sets its pace) as TP 8 x PP 2 on 16 GPUs (two DGX nodes): node 0 holds pipeline stage 0
/// (ranks 0-7), node 1 stage 1 (ranks 8-15).
Scenario tiny_on_two_nodes() {
  return load_scenario(kScenarios + "gpt-tiny-brown.yaml",
                       {{"model.hidden_size", "2048"},
                        {"model.num_attention_heads", "16"},
                        {"model.seq_length", "2048"},
                        {"parallelism.tensor_model_parallel_size", "8"},
                        {"parallelism.pipeline_model_parallel_size", "2"},
                        {"cluster.num_gpus", "16"}});
}

/// `g` at `factor` of every peak and of its HBM bandwidth, under another name.
GpuSpec scaled(GpuSpec g, const std::string& name, double factor) {
  g.name = name;
  g.hbm_bandwidth_Bps *= factor;
  g.peak.fp32_FLOPs *= factor;
  g.peak.fp16_FLOPs *= factor;
  g.peak.bf16_FLOPs *= factor;
  if (g.peak.tf32_FLOPs) *g.peak.tf32_FLOPs *= factor;
  if (g.peak.fp8_FLOPs) *g.peak.fp8_FLOPs *= factor;
  return g;
}

/// DGX H100 whose node 0 keeps its H100s and whose other nodes hold `other`.
TopologySpec h100_then(const GpuSpec& other) {
  TopologySpec t = testing::h100();
  t.node_groups.push_back({"first", 1, t.gpu, ""});
  t.gpu = other;
  return t;
}

/// The roofline without its fixed launch overhead: every kernel's time is inversely
/// proportional to the GPU's peaks and bandwidth, so a GPU at half of each takes exactly twice.
std::unique_ptr<CostModel> proportional_roofline(const GpuSpec& gpu) {
  RooflineEfficiency eff = default_roofline_efficiency(gpu);
  eff.launch_overhead_s = 0;
  return make_roofline_cost_model(eff);
}

double replayed_iteration_s(const Scenario& s, const TopologySpec& t, const CostModel& costs,
                            const SimulationOptions& o = {}) {
  return std::stod(run_isolated(
      [&] { return fmt::format("{:.17g}", simulate(s, t, costs, o).iteration_time_s); }));
}

TEST(MixedGpus, EachRankIsTimedOnItsOwnGpu) {
  const Scenario s = tiny_on_two_nodes();
  const TopologySpec t = h100_then(scaled(testing::h100().gpu, "H100-half", 0.5));
  const JobGpus gpus = job_gpus(t, 16);
  ASSERT_EQ(gpus.describe(), "8 x H100-SXM-80GB + 8 x H100-half");
  const auto costs = proportional_roofline(t.gpu);
  const Program prog = build_program(s);
  const TimedProgram timed(prog, *costs, gpus);
  ASSERT_EQ(timed.gpu_types(), 2u);
  EXPECT_EQ(timed.gpu_type(7), 0u);
  EXPECT_EQ(timed.gpu_type(8), 1u);
  int compared = 0;
  for (const auto& [r, rp] : prog.ranks) {
    const std::vector<double>& fast = timed.durations(r, 0);
    const std::vector<double>& slow = timed.durations(r, 1);
    for (const Op& op : rp.ops) {
      if (op.kind != OpKind::kCompute || fast[op.id] == 0) continue;
      EXPECT_NEAR(slow[op.id] / fast[op.id], 2.0, 1e-12) << "rank " << r << " op " << op.id;
      ++compared;
    }
    // compute_s picks the rank's type: a stage-0 rank on node 0, a stage-1 rank on node 1.
    const int64_t rank = rp.coord.pp == 0 ? 0 : 8;
    for (const Op& op : rp.ops) {
      if (op.kind != OpKind::kCompute) continue;
      EXPECT_EQ(timed.compute_s(rank, r, op.id), (rp.coord.pp == 0 ? fast : slow)[op.id]);
    }
  }
  EXPECT_GT(compared, 10);
  EXPECT_THROW(TimedProgram(prog, *costs, JobGpus{gpus.types, {0, 1}}), InvalidArgument);
}

// Stage 1 on GPUs at half of every rate is the same replay as all-H100 with stage 1's ranks
// made stragglers at compute_scale 2 (the straggler of rank 8 with its TP group, ranks 8-15).
TEST(MixedGpus, AHalfSpeedStageReplaysAsAStragglerStage) {
  const Scenario s = tiny_on_two_nodes();
  const TopologySpec h100 = testing::h100();
  const TopologySpec mixed = h100_then(scaled(h100.gpu, "H100-half", 0.5));
  const auto costs = proportional_roofline(h100.gpu);
  SimulationOptions straggler;
  straggler.straggler = Straggler{8, 2.0};
  straggler.straggler_tp_group = true;
  const double mixed_s = replayed_iteration_s(s, mixed, *costs);
  const double straggler_s = replayed_iteration_s(s, h100, *costs, straggler);
  const double healthy_s = replayed_iteration_s(s, h100, *costs);
  EXPECT_NEAR(mixed_s, straggler_s, 1e-9 * straggler_s);
  EXPECT_GT(mixed_s, 1.2 * healthy_s);
  // MFU against the job's peaks: 8 GPUs at P and 8 at P / 2.
  SimulationResult r;
  r.iteration_time_s = mixed_s;
  const SimulationSummary m = summarize(s, mixed, r);
  const double peak = h100.gpu.peak_FLOPs(gemm_precision(s.training));
  const double model = model_flops_per_iteration(s.model, s.training.global_batch_size);
  EXPECT_NEAR(m.mfu, model / (mixed_s * (8 * peak + 8 * peak / 2)), 1e-12);
  // Memory against the smaller GPU.
  TopologySpec small = h100_then(scaled(h100.gpu, "H100-small", 1.0));
  small.gpu.memory_bytes = 1.0;
  EXPECT_FALSE(summarize(s, small, r).fits_in_memory);
  EXPECT_TRUE(summarize(s, h100, r).fits_in_memory);
}

// Megatron-Core's custom layout balances the pipeline: with stage 1 at half speed, 3 layers on
// stage 0 and 1 on stage 1 ("Et*3|tL", 3 and 2 units of layer work) beat the even 2 and 2 (2 and
// 4).
TEST(MixedGpus, ALayoutBalancesAPipelineOverUnequalGpus) {
  const Scenario even = tiny_on_two_nodes();
  const Scenario balanced = load_scenario(
      kScenarios + "gpt-tiny-brown.yaml",
      {{"model.hidden_size", "2048"},
       {"model.num_attention_heads", "16"},
       {"model.seq_length", "2048"},
       {"parallelism.tensor_model_parallel_size", "8"},
       {"parallelism.pipeline_model_parallel_size", "2"},
       {"parallelism.pipeline_model_parallel_layout", "Et*3|tL"},
       {"cluster.num_gpus", "16"}});
  const TopologySpec mixed = h100_then(scaled(testing::h100().gpu, "H100-half", 0.5));
  const auto costs = proportional_roofline(mixed.gpu);
  const double even_s = replayed_iteration_s(even, mixed, *costs);
  const double balanced_s = replayed_iteration_s(balanced, mixed, *costs);
  EXPECT_LT(balanced_s, 0.9 * even_s) << balanced_s << " vs " << even_s;
  // On equal GPUs the layout gains less (it still helps: the last stage also holds the LM head
  // and the loss, as Megatron's account_for_loss_in_pipeline_split says).
  const TopologySpec h100 = testing::h100();
  const double gain_equal =
      replayed_iteration_s(balanced, h100, *costs) / replayed_iteration_s(even, h100, *costs);
  EXPECT_LT(balanced_s / even_s, gain_equal - 0.05) << gain_equal;
}

// Node groups of the same GPU under another name change nothing.
TEST(MixedGpus, AGroupOfTheSameGpuReplaysAsTheHomogeneousCluster) {
  const Scenario s = tiny_on_two_nodes();
  const TopologySpec h100 = testing::h100();
  const TopologySpec copy = h100_then(scaled(h100.gpu, "H100-copy", 1.0));
  ASSERT_TRUE(job_gpus(copy, 16).mixed());
  const auto costs = proportional_roofline(h100.gpu);
  EXPECT_EQ(replayed_iteration_s(s, copy, *costs), replayed_iteration_s(s, h100, *costs));
}

// Memory per stage on its own GPUs: stage 0 (node 0's H100s) holds the embedding and two
// micro-batches in flight, stage 1 (node 1) less. With node 1's GPU between the two stages'
// peaks, each stage fits its own GPU, so the job fits, though its largest stage would not fit its
// smallest GPU (the rule before: every stage against the smallest GPU).
TEST(MixedGpus, EachStagesMemoryIsJudgedOnItsOwnGpu) {
  const Scenario s = tiny_on_two_nodes();
  const std::vector<StageMemory> stages = memory_per_stage(s);
  ASSERT_EQ(stages.size(), 2u);
  const double m0 = stages[0].total_bytes(), m1 = stages[1].total_bytes();
  ASSERT_GT(m0, m1);
  GpuSpec small = testing::h100().gpu;
  small.name = "H100-small";
  small.memory_bytes = (m0 + m1) / 2;
  const TopologySpec mixed = h100_then(small);
  const JobGpus job = job_gpus(mixed, s.cluster.num_gpus);
  ASSERT_TRUE(job.mixed());
  EXPECT_EQ(gpu_memory_per_stage_bytes(s, job),
            (std::vector<double>{testing::h100().gpu.memory_bytes, (m0 + m1) / 2}));
  EXPECT_LT(job.smallest_memory_bytes(), m0);  // the old rule's verdict: out of memory
  EXPECT_TRUE(summarize(s, mixed, IterationMetrics{}).fits_in_memory);
  EXPECT_NE(job_memory_fit(s, job).verdict, MemoryVerdict::kOutOfMemory);
  // Below stage 1's peak on node 1 it does not fit.
  small.memory_bytes = m1 * 0.9;
  const TopologySpec tight = h100_then(small);
  const JobGpus tight_job = job_gpus(tight, s.cluster.num_gpus);
  EXPECT_FALSE(summarize(s, tight, IterationMetrics{}).fits_in_memory);
  EXPECT_EQ(job_memory_fit(s, tight_job).verdict, MemoryVerdict::kOutOfMemory);
  // One GPU type: every stage against it.
  const JobGpus one = job_gpus(testing::h100(), s.cluster.num_gpus);
  EXPECT_EQ(gpu_memory_per_stage_bytes(s, one),
            std::vector<double>(2, testing::h100().gpu.memory_bytes));
}

TEST(MixedGpus, TheEstimatorRefusesAMixedJob) {
  const Scenario s = tiny_on_two_nodes();
  const TopologySpec mixed = h100_then(scaled(testing::h100().gpu, "H100-half", 0.5));
  const auto costs = proportional_roofline(mixed.gpu);
  try {
    estimate(s, mixed, *costs);
    ADD_FAILURE() << "no error";
  } catch (const UnsupportedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("GPUs of several kinds"));
    EXPECT_THAT(e.what(), HasSubstr("use the replay"));
  }
  // Within its first group the job is not mixed: estimated on that group's GPU (node 0's
  // H100s), as on the homogeneous cluster.
  const Scenario one_node = load_scenario(kScenarios + "gpt-tiny-brown.yaml",
                                          {{"model.num_attention_heads", "8"},
                                           {"parallelism.tensor_model_parallel_size", "8"},
                                           {"parallelism.pipeline_model_parallel_size", "1"},
                                           {"cluster.num_gpus", "8"}});
  const double on_mixed = estimate(one_node, mixed, *costs).iteration_time_s;
  EXPECT_GT(on_mixed, 0);
  EXPECT_EQ(on_mixed, estimate(one_node, testing::h100(), *costs).iteration_time_s);
}

}  // namespace
}  // namespace traintwin
