// Tests of a job on a mixed cluster (topologies' node_groups): each rank timed on its own GPU by
// the timing layer (sim/timed_program.hpp), the replay against a straggler that slows the same
// ranks by the same factor, the summary's MFU over the job's peaks, and the estimator (each
// stage on its own GPU; a stage across node groups refused).
// Node groups with their own NVLink and NIC rates (DGX A100 nodes beside DGX H100 ones): the
// platform's links per node, the closed forms of a group at its slowest node's rates
// (group_topology), the replay's plans per node kind, and a job on one kind against the
// homogeneous cluster of that kind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/program.hpp"
#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "core/flops.hpp"
#include "core/memory.hpp"
#include "sim/analytical.hpp"
#include "sim/collectives.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/platform.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "sim/timed_program.hpp"
#include "tests/sim/sim_test_support.hpp"
#include "tests/sim/simgrid_test_engine.hpp"

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
  EXPECT_NE(layout_memory_fit(s, stages, gpu_memory_per_stage_bytes(s, job)).verdict,
            MemoryVerdict::kOutOfMemory);
  // Below stage 1's peak on node 1 it does not fit.
  small.memory_bytes = m1 * 0.9;
  const TopologySpec tight = h100_then(small);
  const JobGpus tight_job = job_gpus(tight, s.cluster.num_gpus);
  EXPECT_FALSE(summarize(s, tight, IterationMetrics{}).fits_in_memory);
  EXPECT_EQ(layout_memory_fit(s, stages, gpu_memory_per_stage_bytes(s, tight_job)).verdict,
            MemoryVerdict::kOutOfMemory);
  // One GPU type: every stage against it.
  const JobGpus one = job_gpus(testing::h100(), s.cluster.num_gpus);
  EXPECT_EQ(gpu_memory_per_stage_bytes(s, one),
            std::vector<double>(2, testing::h100().gpu.memory_bytes));
}

/// The replay without link contention: the rule the estimator follows (sim/analytical.hpp).
double uncontended_iteration_s(const Scenario& s, const TopologySpec& t, const CostModel& costs) {
  SimulationOptions o;
  o.link_contention = false;
  return replayed_iteration_s(s, t, costs, o);
}

/// TP 8 x DP 2 on two nodes, one pipeline stage: the stage spans both nodes.
Scenario one_stage_on_two_nodes() {
  return load_scenario(kScenarios + "gpt-tiny-brown.yaml",
                       {{"model.hidden_size", "2048"},
                        {"model.num_attention_heads", "16"},
                        {"model.seq_length", "2048"},
                        {"parallelism.tensor_model_parallel_size", "8"},
                        {"parallelism.pipeline_model_parallel_size", "1"},
                        {"cluster.num_gpus", "16"}});
}

// The estimator times each pipeline stage on its own node group's GPU, as the replay does: stage
// 1 on GPUs at half of every rate, the two engines agree without contention (0.5 %, as on one
// GPU type: tests/sim/analytical_test.cpp), and the job is slower than on H100s alone. A stage
// whose ranks lie in both groups would not run in lockstep: refused, naming the stage.
TEST(MixedGpus, TheEstimatorTimesEachStageOnItsOwnGpu) {
  const Scenario s = tiny_on_two_nodes();
  const TopologySpec mixed = h100_then(scaled(testing::h100().gpu, "H100-half", 0.5));
  const auto costs = proportional_roofline(mixed.gpu);
  const double estimated = estimate(s, mixed, *costs).iteration_time_s;
  const double replayed = uncontended_iteration_s(s, mixed, *costs);
  EXPECT_NEAR(estimated, replayed, 0.005 * replayed);
  EXPECT_GT(estimated, 1.2 * estimate(s, testing::h100(), *costs).iteration_time_s);
  try {
    estimate(one_stage_on_two_nodes(), mixed, *costs);
    ADD_FAILURE() << "no error";
  } catch (const UnsupportedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("pipeline stage 0"));
    EXPECT_THAT(e.what(), HasSubstr("two node groups"));
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

// ---- node groups with their own NVLink and NIC rates (DGX A100 beside DGX H100) -------------

const std::string kTopologies = std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/";

TopologySpec a100() { return load_topology(kTopologies + "dgx-a100-superpod.yaml"); }
TopologySpec mixed_a100() { return load_topology(kTopologies + "mixed-h100-a100-superpod.yaml"); }

/// DGX H100 whose first `nodes` nodes are DGX A100s (GPU, NVLink domain and NICs), built in code
/// as the loader builds the shipped mixed file's group.
TopologySpec a100_then_h100(int64_t nodes) {
  TopologySpec t = testing::h100();
  const TopologySpec old = a100();
  t.node_groups.push_back({"a100", nodes, old.gpu, "", old.node, old.nic});
  return t;
}

/// DGX H100 with DGX A100 node and NIC rates everywhere (H100 GPUs): every node as fast as the
/// slowest of a100_then_h100's, so a group across both kinds must time as on it.
TopologySpec h100_at_a100_rates() {
  TopologySpec t = testing::h100();
  t.node = a100().node;
  t.nic = a100().nic;
  return t;
}

int64_t GiB(int64_t n) { return n << 30; }

/// The tiny GPT as TP `tp` x DP on `gpus` GPUs (one pipeline stage), for Programs of one
/// collective on that layout (testing::one_collective).
Scenario tiny_tp_dp(int64_t tp, int64_t gpus) {
  return load_scenario(kScenarios + "gpt-tiny-brown.yaml",
                       {{"model.num_attention_heads", "8"},
                        {"parallelism.tensor_model_parallel_size", std::to_string(tp)},
                        {"parallelism.pipeline_model_parallel_size", "1"},
                        {"cluster.num_gpus", std::to_string(gpus)}});
}

TEST(MixedNodes, ThePlatformBuildsEachNodeFromItsGroupsTemplate) {
  const TopologySpec t = mixed_a100();
  const auto p = Platform::build(testing::simgrid_test_engine(), t, 1024);  // nodes 0-127
  std::map<std::string, double> bw;
  for (const PlatformLink& l : p->links()) bw[l.name] = l.bandwidth_Bps;
  // DGX A100 (nodes 0-63): NVLink 3 at 300 GB/s per direction, HDR 200 Gb/s = 25 GB/s.
  EXPECT_EQ(bw.at("node0-gpu0-nvlink-up"), 300e9);
  EXPECT_EQ(bw.at("node63-gpu7-nvlink-down"), 300e9);
  EXPECT_EQ(bw.at("node0-nic0-up"), 25e9);
  EXPECT_EQ(bw.at("node63-nic7-down"), 25e9);
  // DGX H100 (nodes 64-127): 450 GB/s, NDR 400 Gb/s = 50 GB/s.
  EXPECT_EQ(bw.at("node64-gpu0-nvlink-up"), 450e9);
  EXPECT_EQ(bw.at("node64-nic0-up"), 50e9);
  EXPECT_EQ(bw.at("node127-nic7-down"), 50e9);
  // The fabric is the file's: NDR switch-to-switch links under A100 and H100 leaves alike.
  EXPECT_EQ(bw.at("rail0-leaf0-spine0-c0-up"), 50e9);
  EXPECT_EQ(bw.at("rail0-leaf2-spine0-c0-up"), 50e9);
}

// A job on the A100 nodes of the mixed cluster (nodes 0-63) is the same job on a DGX A100
// SuperPOD: replay and estimate alike, exactly. TP 8 x DP 2 x PP 2 on 4 nodes of one leaf: TP
// all-reduces on NVLink 3, DP rings and pipeline sends over the HDR NICs (the two files' fabrics
// differ only above the leaves, which these routes do not reach).
TEST(MixedNodes, AJobOnTheA100NodesIsTheJobOnADgxA100SuperPod) {
  const Scenario s = load_scenario(kScenarios + "gpt-tiny-brown.yaml",
                                   {{"model.hidden_size", "2048"},
                                    {"model.num_attention_heads", "16"},
                                    {"model.seq_length", "2048"},
                                    {"parallelism.tensor_model_parallel_size", "8"},
                                    {"parallelism.pipeline_model_parallel_size", "2"},
                                    {"cluster.num_gpus", "32"}});
  const TopologySpec mixed = mixed_a100();
  ASSERT_FALSE(job_gpus(mixed, 32).mixed());
  ASSERT_TRUE(job_on_one_node_kind(mixed, 32));
  const auto costs = proportional_roofline(a100().gpu);
  const double on_a100 = replayed_iteration_s(s, a100(), *costs);
  EXPECT_EQ(replayed_iteration_s(s, mixed, *costs), on_a100);
  // The same job on H100 nodes (and GPUs) is faster: the A100 rates are really used.
  EXPECT_LT(replayed_iteration_s(s, testing::h100(), *costs), 0.8 * on_a100);
  EXPECT_EQ(estimate(s, mixed, *costs).iteration_time_s,
            estimate(s, a100(), *costs).iteration_time_s);
}

// A TP-8 all-reduce of 1 GiB inside an A100 node of the mixed cluster costs what the DGX A100
// topology gives: a ring on NVLink 3 (no NVLS), 2 (n-1)/n S / (300 GB/s x 0.80) = 7.83 ms plus
// NCCL's latency (under 1 %); inside an H100 node what the DGX H100 topology gives (NVLS).
TEST(MixedNodes, AnAllReduceInsideANodeTakesThatNodesNvlink) {
  const TopologySpec mixed = mixed_a100();
  const FabricEfficiency eff;
  const std::vector<int64_t> a100_node = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<int64_t> h100_node = {512, 513, 514, 515, 516, 517, 518, 519};
  const CollectivePlan on_mixed = plan_collective(CollectiveKind::kAllReduce, GiB(1), a100_node,
                                                  mixed, eff);
  const CollectivePlan on_a100 =
      plan_collective(CollectiveKind::kAllReduce, GiB(1), a100_node, a100(), eff);
  EXPECT_EQ(on_mixed.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(on_mixed.local_time_s, on_a100.local_time_s);
  const double by_hand = 2.0 * 7 / 8 * static_cast<double>(GiB(1)) / (300e9 * eff.nvlink_ring);
  EXPECT_NEAR(on_mixed.local_time_s, by_hand, 0.01 * by_hand);
  const CollectivePlan h100_mixed =
      plan_collective(CollectiveKind::kAllReduce, GiB(1), h100_node, mixed, eff);
  const CollectivePlan h100_alone =
      plan_collective(CollectiveKind::kAllReduce, GiB(1), a100_node, testing::h100(), eff);
  EXPECT_EQ(h100_mixed.algorithm, CollectiveAlgorithm::kNvls);
  EXPECT_EQ(h100_mixed.local_time_s, h100_alone.local_time_s);
  // NVLS asked of an A100 node is refused; of an H100 node of the same cluster it runs.
  EXPECT_THROW(plan_collective(CollectiveKind::kAllReduce, GiB(1), a100_node, mixed, eff, "nvls"),
               ConfigError);
  EXPECT_EQ(plan_collective(CollectiveKind::kAllReduce, GiB(1), h100_node, mixed, eff, "nvls")
                .algorithm,
            CollectiveAlgorithm::kNvls);
  // The rule: the group's slowest node (here one node: its own rates).
  EXPECT_EQ(group_topology(mixed, a100_node).node.nvlink_bandwidth_Bps, 300e9);
  EXPECT_FALSE(group_topology(mixed, a100_node).node.nvls);
  EXPECT_EQ(group_topology(mixed, h100_node).node.nvlink_bandwidth_Bps, 450e9);
}

// A DP ring over GPU 0 of nodes 62-65 (two A100 nodes, two H100 nodes) runs at the A100's HDR
// NIC: every ring step waits for its slowest edge. 1 GiB: 2 (n-1)/n S / (25 GB/s x 0.94) =
// 68.5 ms plus latency (under 1 %), as on H100 nodes with A100 rates, twice the all-H100 ring.
TEST(MixedNodes, ARingAcrossBothKindsTakesTheSlowerNic) {
  const TopologySpec mixed = mixed_a100();
  const FabricEfficiency eff;
  const std::vector<int64_t> ring = {62 * 8, 63 * 8, 64 * 8, 65 * 8};
  const TopologySpec slowest = group_topology(mixed, ring);
  EXPECT_EQ(slowest.nic.line_rate_Bps, 25e9);
  EXPECT_EQ(slowest.node.nvlink_bandwidth_Bps, 300e9);
  EXPECT_FALSE(slowest.node.nvls);
  EXPECT_TRUE(slowest.node_groups.empty());
  const CollectivePlan plan = plan_collective(CollectiveKind::kAllReduce, GiB(1), ring, mixed, eff);
  EXPECT_EQ(plan.algorithm, CollectiveAlgorithm::kRing);
  const double t = uncontended_time_s(plan, mixed);
  const TopologySpec ref = h100_at_a100_rates();
  EXPECT_EQ(t, uncontended_time_s(
                   plan_collective(CollectiveKind::kAllReduce, GiB(1), ring, ref, eff), ref));
  const double by_hand = 1.5 * static_cast<double>(GiB(1)) / (25e9 * eff.ib);
  EXPECT_NEAR(t, by_hand, 0.01 * by_hand);
  const TopologySpec h100 = testing::h100();
  const double fast = uncontended_time_s(
      plan_collective(CollectiveKind::kAllReduce, GiB(1), ring, h100, eff), h100);
  EXPECT_NEAR(t / fast, 2.0, 0.02);
  // A transfer between an A100 and an H100 node: the A100's NIC bounds it.
  EXPECT_EQ(uncontended_transfer_s(63 * 8, 64 * 8, 25e9, mixed),
            uncontended_transfer_s(63 * 8, 64 * 8, 25e9, ref));
}

// The replay of a DP all-reduce over nodes 0-3 (A100, A100, H100, H100: TP 8 x DP 4), its flows
// on the platform's links with contention: as on four nodes at A100 rates, twice the all-H100.
TEST(MixedNodes, TheReplayedRingAcrossBothKindsTakesTheSlowerNic) {
  const RankLayout layout(8, 1, 4, 1);
  const Program prog =
      testing::one_collective(tiny_tp_dp(8, 32), layout, GroupKind::kDp, GiB(1) / 4);
  testing::TableCostModel costs;
  const auto replayed = [&](const TopologySpec& t) {
    return std::stod(run_isolated([&] {
      return fmt::format("{:.17g}", simulate_program(prog, t, costs).iteration_time_s);
    }));
  };
  const double mixed = replayed(a100_then_h100(2));
  const double slow = replayed(h100_at_a100_rates());
  EXPECT_NEAR(mixed, slow, 1e-9 * slow);
  EXPECT_GT(mixed, 1.8 * replayed(testing::h100()));
}

// Each node's TP all-reduce at its own NVLink in one replay: rank 0's group on the A100 node,
// rank 8's on the H100 node (one template for both: the plan is kept per node kind, not per
// group kind alone).
TEST(MixedNodes, EachNodesTpAllReduceTakesItsOwnNvlinkInOneReplay) {
  const RankLayout layout(8, 1, 2, 1);
  const Program prog =
      testing::one_collective(tiny_tp_dp(8, 16), layout, GroupKind::kTp, GiB(1));
  testing::TableCostModel costs;
  const TopologySpec mixed = a100_then_h100(1);
  const std::string out = run_isolated([&] {
    SimulationOptions o;
    o.trace_ranks = {0, 8};
    const SimulationResult r = simulate_program(prog, mixed, costs, o);
    std::string s;
    for (const TimelineEvent& e : r.timeline.events) {
      s += fmt::format("{} {:.17g} {}\n", e.rank, e.end_s - e.start_s, e.args.count("algorithm")
                                                                          ? e.args.at("algorithm")
                                                                          : "-");
    }
    return s;
  });
  const FabricEfficiency eff;
  const std::vector<int64_t> node = {0, 1, 2, 3, 4, 5, 6, 7};
  const TopologySpec a = a100(), h = testing::h100();
  const double on_a100 = uncontended_time_s(
      plan_collective(CollectiveKind::kAllReduce, GiB(1), node, a, eff), a);
  const double on_h100 = uncontended_time_s(
      plan_collective(CollectiveKind::kAllReduce, GiB(1), node, h, eff), h);
  ASSERT_GT(on_a100, 1.5 * on_h100);
  std::istringstream in(out);
  int64_t rank = 0;
  double d = 0;
  std::string algorithm;
  int seen = 0;
  while (in >> rank >> d >> algorithm) {
    ++seen;
    EXPECT_NEAR(d, rank == 0 ? on_a100 : on_h100, 1e-9 * d) << "rank " << rank;
    EXPECT_EQ(algorithm, rank == 0 ? "ring" : "nvls") << "rank " << rank;
  }
  EXPECT_EQ(seen, 2) << out;
}

// The estimator times a job on one kind of node with that kind's rates; across node kinds of one
// GPU (HDR NICs on node 0) each stage at its own nodes' rates, agreeing with the replay without
// contention, and a stage across both kinds is refused.
TEST(MixedNodes, TheEstimatorTimesEachStageAtItsNodesRates) {
  TopologySpec hdr_first = testing::h100();
  hdr_first.node_groups.push_back({"hdr", 1, hdr_first.gpu, "", std::nullopt, a100().nic});
  ASSERT_TRUE(has_per_node_rates(hdr_first));
  const Scenario two_nodes = tiny_on_two_nodes();
  ASSERT_FALSE(job_gpus(hdr_first, 16).mixed());
  const auto costs = proportional_roofline(hdr_first.gpu);
  const double replayed = uncontended_iteration_s(two_nodes, hdr_first, *costs);
  EXPECT_NEAR(estimate(two_nodes, hdr_first, *costs).iteration_time_s, replayed, 0.005 * replayed);
  EXPECT_THROW(estimate(one_stage_on_two_nodes(), hdr_first, *costs), UnsupportedError);
  const Scenario one_node = load_scenario(kScenarios + "gpt-tiny-brown.yaml",
                                          {{"model.num_attention_heads", "8"},
                                           {"parallelism.tensor_model_parallel_size", "8"},
                                           {"parallelism.pipeline_model_parallel_size", "1"},
                                           {"cluster.num_gpus", "8"}});
  TopologySpec hdr = testing::h100();
  hdr.nic = a100().nic;
  EXPECT_EQ(estimate(one_node, hdr_first, *costs).iteration_time_s,
            estimate(one_node, hdr, *costs).iteration_time_s);
}

}  // namespace
}  // namespace traintwin
