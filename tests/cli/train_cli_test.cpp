// `traintwin train`: live training by the executor (CPU backend; CUDA where a GPU is visible). The same 20 steps on the same data give
// the same losses (relative 1e-5) whatever the parallel layout, because the executor trains the
// same model (layout-independent initialization, dropout masks and padding) and only the
// floating-point summation order differs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "exec/checkpoint.hpp"
#include "sim/chakra_import.hpp"
#include "tests/cli/run_cli.hpp"
#include "tests/cli/train_log.hpp"
#include "tests/mpi_child_run.hpp"
#include "tests/tiny_training.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

using testing::Losses;
using testing::parse_losses;

class TrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("traintwin-train-cli-" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    prefix_ = new std::string(testing::write_synthetic_dataset(*dir_));
    scenario_ = new std::string(testing::write_tiny_scenario(*dir_, *prefix_));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete prefix_;
    delete scenario_;
  }

  static testing::CliResult train(const std::string& args, int ranks = 1) {
    if (ranks == 1) return testing::run_cli("train " + *scenario_ + " " + args);
    return run_mpi(ranks, "train " + *scenario_ + " " + args);
  }

  static testing::CliResult run_mpi(int ranks, const std::string& args) {
    return testing::run_mpi_cli(ranks, args);
  }

  /// Checkpoint resumption on `ranks` ranks: 20 steps straight under `save_args`, then 10 of them
  /// saved to `ckpt` and 10 resumed from it under `load_args`. The resumed run says so, the saved
  /// run's losses are the straight run's first 10 exactly and the resumed run's its last 10
  /// (exactly for rel_tol 0, else within rel_tol relative).
  static void expect_resume_matches_straight(const std::string& save_args,
                                             const std::string& load_args, const fs::path& ckpt,
                                             int ranks, double rel_tol) {
    const testing::CliResult straight = train(save_args, ranks);
    const testing::CliResult first =
        train(save_args + "--train-iters 10 --lr-decay-iters 20 --save " + ckpt.string(), ranks);
    const testing::CliResult rest = train(load_args + "--load " + ckpt.string(), ranks);
    ASSERT_EQ(straight.status, 0) << straight.output;
    ASSERT_EQ(first.status, 0) << first.output;
    ASSERT_EQ(rest.status, 0) << rest.output;
    EXPECT_THAT(rest.output, HasSubstr("resumed from"));
    const Losses all = parse_losses(straight.output), a = parse_losses(first.output),
                 b = parse_losses(rest.output);
    ASSERT_EQ(all.train.size(), 20u);
    ASSERT_EQ(a.train.size(), 10u);
    ASSERT_EQ(b.train.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_EQ(a.train[i], all.train[i]) << "step " << i + 1;
      if (rel_tol == 0) {
        EXPECT_EQ(b.train[i], all.train[10 + i]) << "step " << i + 11;
      } else {
        EXPECT_NEAR(b.train[i], all.train[10 + i], rel_tol * all.train[10 + i])
            << "step " << i + 11;
      }
    }
  }

  /// The single-process TP = PP = DP = 1 run every layout is compared with (run once per
  /// `model_args`, the overrides that change the model itself, e.g. its number of layers).
  static const Losses& baseline(const std::string& model_args = "") {
    static std::map<std::string, Losses> runs;
    auto it = runs.find(model_args);
    if (it == runs.end()) {
      const testing::CliResult r = train(model_args);
      EXPECT_EQ(r.status, 0) << r.output;
      it = runs.emplace(model_args, parse_losses(r.output)).first;
    }
    return it->second;
  }

  /// Checks that `r` printed the losses of the one-process run of the same model (`model_args`).
  static void expect_same_losses(const testing::CliResult& r, const std::string& model_args = "") {
    ASSERT_EQ(r.status, 0) << r.output;
    const Losses l = parse_losses(r.output);
    const Losses& base = baseline(model_args);
    ASSERT_EQ(base.train.size(), 20u);
    ASSERT_EQ(l.train.size(), base.train.size()) << r.output;
    double worst = 0;
    for (size_t i = 0; i < l.train.size(); ++i) {
      EXPECT_NEAR(l.train[i], base.train[i], 1e-5 * base.train[i]) << "iteration " << i + 1;
      worst = std::max(worst, std::abs(l.train[i] - base.train[i]) / base.train[i]);
    }
    // Informational: how close the layouts come (the log prints 7 significant digits).
    std::printf("largest relative difference of the 20 losses: %.2e\n", worst);
    ASSERT_EQ(l.validation.size(), base.validation.size()) << r.output;
    for (size_t i = 0; i < l.validation.size(); ++i) {
      EXPECT_NEAR(l.validation[i], base.validation[i], 1e-5 * base.validation[i]) << "evaluation " << i;
    }
  }

  static bool have_mpirun() { return testing::have_mpirun(); }

  static fs::path* dir_;
  static std::string* prefix_;
  static std::string* scenario_;
};

fs::path* TrainCli::dir_ = nullptr;
std::string* TrainCli::prefix_ = nullptr;
std::string* TrainCli::scenario_ = nullptr;

// The untrained model predicts the uniform distribution: loss ln V at the first step (init std
// 0.02 keeps the logits near 0); the Markov chain is learnable, so 20 steps bring it down.
// One process for a layout of several ranks: the hint sets every size of the scenario back to 1
// (CP and EP included) and turns off what needs TP > 1.
TEST_F(TrainCli, TheOneProcessHintCoversEveryParallelSize) {
  const testing::CliResult r = train("--context-parallel-size 2 --tensor-model-parallel-size 2 "
                                     "--sequence-parallel --set cluster.num_gpus=4");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("or in one process with --set cluster.num_gpus=1 "
                                  "--tensor-model-parallel-size 1 --context-parallel-size 1 "
                                  "--set parallelism.sequence_parallel=false"));
}

TEST_F(TrainCli, LossStartsAtLnVocabAndFalls) {
  const Losses& l = baseline();
  ASSERT_EQ(l.train.size(), 20u);
  EXPECT_NEAR(l.train.front(), std::log(static_cast<double>(testing::kTinyVocab)), 0.05);
  EXPECT_LT(l.train.back(), l.train.front() - 1.0);
  ASSERT_EQ(l.validation.size(), 2u);  // after iterations 10 and 20
  EXPECT_LT(l.validation[1], l.validation[0]);
}

TEST_F(TrainCli, TensorPipelineAndDataParallelOnEightRanks) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                           "--set cluster.num_gpus=8",
                           8));
}

// Without cluster.num_gpus on the command line the job's size is the cluster (DP derived, as
// Megatron-LM derives it from the world size); a cluster.num_gpus that contradicts it is refused.
TEST_F(TrainCli, TensorParallelWithSequenceParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train("--tensor-model-parallel-size 2 --sequence-parallel", 2));
  const testing::CliResult bad =
      train("--tensor-model-parallel-size 2 --sequence-parallel --set cluster.num_gpus=4", 2);
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.output, HasSubstr("cluster.num_gpus = 4 (TP 2 x PP 1 x DP 2) set on the command "
                                    "line, but mpirun started 2 processes"));
}

TEST_F(TrainCli, InterleavedPipelineWithTwoModelChunks) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train("--pipeline-model-parallel-size 2 "
                           "--virtual-pipeline-model-parallel-size 2 --set cluster.num_gpus=2",
                           2));
}

// Zero-bubble schedules (Qi et al., ICLR 2024: ZB-H1, ZB-H2) split each backward into B (input
// gradients) and W (weight gradients) run at other times, so the model keeps each layer's GEMM
// inputs and output gradients from B to W: the same model, the same losses (TP 2 without SP
// too: the column-parallel dgrad all-reduce is then waited by the next B kernel; full and
// selective recomputation too).
TEST_F(TrainCli, ZeroBubbleSchedulesSplitTheBackward) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  for (const std::string zb : {"zb-h1", "zb-h2"}) {
    SCOPED_TRACE(zb);
    expect_same_losses(train("--pipeline-model-parallel-size 2 --set parallelism.pipeline_schedule=" +
                                 zb + " --set cluster.num_gpus=2",
                             2));
  }
  expect_same_losses(train("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                           "--set parallelism.sequence_parallel=false "
                           "--set parallelism.pipeline_schedule=zb-h2 --set cluster.num_gpus=4",
                           4));
  // Recomputation runs in B (the recomputed forward feeds the input gradients), and what W
  // reads is kept from there.
  for (const std::string r : {"full", "selective"}) {
    SCOPED_TRACE(r);
    expect_same_losses(train("--pipeline-model-parallel-size 2 --set "
                             "parallelism.pipeline_schedule=zb-h1 --set cluster.num_gpus=2 "
                             "--recompute-granularity " + r,
                             2));
  }
}

// Uneven pipeline stages (core/pipeline_split.hpp), trained for real. NVIDIA's Llama 3.1 405B
// split (126 layers, PP 8 x VP 8, embedding and loss each counted as a layer) shrunk to 6 layers
// on PP 2 x VP 2: stage 0 chunk 0 holds the embedding and layer 0, the last chunk layer 5 and the
// loss, the other two chunks 2 layers; with TP 2 and sequence parallelism on 4 ranks.
TEST_F(TrainCli, UnevenInterleavedStagesAccountingForEmbeddingAndLoss) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string model = "--set model.num_layers=6";
  const testing::CliResult r =
      train(model + " --tensor-model-parallel-size 2 --sequence-parallel "
                    "--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 "
                    "--account-for-embedding-in-pipeline-split "
                    "--account-for-loss-in-pipeline-split --set cluster.num_gpus=4",
            4);
  expect_same_losses(r, model);
}

// 2 layers on PP 2 x VP 2 with both flags: one layer per virtual stage, so the first chunk holds
// only the embedding and the last only the final LayerNorm, LM head and loss (chunks 0, 1, 1, 0);
// with TP 2 and sequence parallelism (the embedding's gradient is gathered from the received one).
TEST_F(TrainCli, UnevenStagesWithChunksHoldingOnlyTheEmbeddingOrTheLoss) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string model = "--set model.num_layers=2";
  expect_same_losses(train(model + " --tensor-model-parallel-size 2 --sequence-parallel "
                                   "--pipeline-model-parallel-size 2 "
                                   "--virtual-pipeline-model-parallel-size 2 "
                                   "--account-for-embedding-in-pipeline-split "
                                   "--account-for-loss-in-pipeline-split --set cluster.num_gpus=4",
                           4),
                     model);
}

// --decoder-first-pipeline-num-layers 1: stage 0 holds 1 layer, stage 1 the other 3, with the
// distributed optimizer and overlapped gradient buckets.
TEST_F(TrainCli, UnevenFirstStageLayerCount) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1 "
                           "--set cluster.num_gpus=2 --use-distributed-optimizer "
                           "--set training.overlap_grad_reduce=true",
                           2));
}

TEST_F(TrainCli, DataParallelWithOverlappedGradientBuckets) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train("--set cluster.num_gpus=2 --set training.overlap_grad_reduce=true", 2));
}

// `--timeline DIR --timeline-format chakra`: the last iteration of a 2-rank run (PP 2: sends and
// recvs of activations and gradients, and the DP-less layout's collectives) as Chakra ET files,
// one per rank, with measured compute durations; the importer reads them and `simulate --trace
// chakra` replays them on two H100s, one per node (cuda-h100-1gpu.yaml).
TEST_F(TrainCli, ChakraTimelineOfATwoRankRunReplaysInTheSimulator) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const fs::path out = *dir_ / "chakra-timeline";
  const testing::CliResult r =
      train("--pipeline-model-parallel-size 2 --set cluster.num_gpus=2 --set "
            "training.train_iters=2 --set training.lr_warmup_iters=1 --timeline " +
                out.string() + " --timeline-format chakra",
            2);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("timeline of iteration 2 written to"));
  for (const char* f : {"tiny.0.et", "tiny.1.et", "tiny.comm_groups.json"}) {
    EXPECT_TRUE(fs::exists(out / f)) << f;
  }
  const ChakraTrace t = read_chakra_trace(out);
  EXPECT_EQ(t.name, "tiny");
  EXPECT_EQ(t.layout_source, "traintwin metadata");
  EXPECT_EQ(t.program.layout.size(GroupKind::kPp), 2);
  int64_t sends = 0, recvs = 0, measured = 0, compute = 0;
  for (const auto& [rank, rp] : t.program.ranks) {
    for (const Op& op : rp.ops) {
      sends += op.kind == OpKind::kSend;
      recvs += op.kind == OpKind::kRecv;
      if (op.kind != OpKind::kCompute || op.kernels.empty()) continue;
      ++compute;
      measured += t.program.kernels[op.kernels[0]].key.shape.at(0) > 0;
    }
  }
  EXPECT_GT(sends, 0);
  EXPECT_EQ(sends, recvs);
  EXPECT_GT(compute, 0);
  EXPECT_GT(measured, compute / 2);  // most ops of a CPU run last a microsecond or more
  const testing::CliResult sim = testing::run_cli(
      "simulate --quiet --trace chakra " + out.string() + " --topology " +
      (fs::path(TRAINTWIN_SOURCE_DIR) / "topologies/cuda-h100-1gpu.yaml").string());
  ASSERT_EQ(sim.status, 0) << sim.output;
  EXPECT_THAT(sim.output, HasSubstr("Chakra trace"));
  EXPECT_THAT(sim.output, HasSubstr("iteration time"));
}

// ZeRO-1: each DP rank updates its piece of every tensor (reduce-scatter of the gradient buckets,
// parameter all-gather overlapped with the next forward); the tied embedding's pieces on the first
// and last stage line up.
TEST_F(TrainCli, DistributedOptimizerOnEightRanks) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                           "--set cluster.num_gpus=8 --use-distributed-optimizer "
                           "--set training.overlap_grad_reduce=true "
                           "--set training.overlap_param_gather=true",
                           8));
}

TEST_F(TrainCli, DistributedOptimizerOverDataParallelOnly) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train("--set cluster.num_gpus=2 --use-distributed-optimizer", 2));
}

// Checkpoints on several ranks: 10 steps saved by 2 DP ranks with the distributed optimizer
// (overlapped parameter gather: the pieces are synchronized before saving), resumed for 10 more,
// print the same losses as 20 steps straight.
TEST_F(TrainCli, ResumeOnTwoRanksWithTheDistributedOptimizer) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string layout =
      "--set cluster.num_gpus=2 --use-distributed-optimizer --set training.overlap_grad_reduce=true "
      "--set training.overlap_param_gather=true ";
  expect_resume_matches_straight(layout, layout, *dir_ / "ckpt-dist", 2, 0.0);
}

// The CUDA backend trains the same fp32 model as the CPU backend: the same 20 losses (relative
// 1e-5), and a checkpoint saved on the GPU after 10 steps resumes on the CPU for the other 10.
// Without a GPU (or a build without CUDA) --backend cuda is refused with the reason, never run on
// the CPU instead, and the comparison is skipped.
TEST_F(TrainCli, CudaBackendTrainsTheSameModelAndItsCheckpointsResumeOnTheCpu) {
  const testing::CliResult r = train("--backend cuda");
  if (r.status != 0) {
    EXPECT_THAT(r.output, ::testing::AnyOf(HasSubstr("no usable CUDA device"),
                                           HasSubstr("built without CUDA")));
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("lm loss")));
    GTEST_SKIP() << "no GPU: " << r.output;
  }
  EXPECT_THAT(r.output, HasSubstr("allocator peak"));
  expect_same_losses(r);
  const fs::path ckpt = *dir_ / "ckpt-cuda";
  const testing::CliResult first =
      train("--backend cuda --train-iters 10 --lr-decay-iters 20 --save " + ckpt.string());
  const testing::CliResult rest = train("--backend cpu --load " + ckpt.string());
  ASSERT_EQ(first.status, 0) << first.output;
  ASSERT_EQ(rest.status, 0) << rest.output;
  const Losses b = parse_losses(rest.output);
  const Losses& all = baseline();
  ASSERT_EQ(b.train.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_NEAR(b.train[i], all.train[10 + i], 1e-5 * all.train[10 + i]) << "step " << i + 11;
  }
}

TEST_F(TrainCli, FullRecomputation) { expect_same_losses(train("--recompute-granularity full")); }

TEST_F(TrainCli, SelectiveRecomputation) {
  expect_same_losses(train("--recompute-granularity selective"));
}

// A tiny Llama (RMSNorm, SwiGLU, RoPE, grouped-query attention with 2 query groups for 4 heads,
// untied LM head, no biases; the tiny scenario's hidden and attention dropout 0.1, the attention
// mask drawn on global (sample, head, query, key) coordinates by every attention kernel) trains
// and gives the same losses under TP + SP, PP, DP and CP as in one process.
constexpr const char* kLlama =
    "--set model.architecture=llama --set model.num_query_groups=2";

TEST_F(TrainCli, LlamaLossStartsAtLnVocabAndFalls) {
  const Losses& l = baseline(kLlama);
  ASSERT_EQ(l.train.size(), 20u);
  EXPECT_NEAR(l.train.front(), std::log(static_cast<double>(testing::kTinyVocab)), 0.05);
  EXPECT_LT(l.train.back(), l.train.front() - 1.0);
  ASSERT_EQ(l.validation.size(), 2u);
  EXPECT_LT(l.validation[1], l.validation[0]);
}

TEST_F(TrainCli, LlamaTensorParallelWithSequenceParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train(std::string(kLlama) + " --tensor-model-parallel-size 2 "
                                                 "--sequence-parallel --set cluster.num_gpus=2",
                           2),
                     kLlama);
}

TEST_F(TrainCli, LlamaPipelineParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(
      train(std::string(kLlama) + " --pipeline-model-parallel-size 2 --set cluster.num_gpus=2", 2),
      kLlama);
}

TEST_F(TrainCli, LlamaDataParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train(std::string(kLlama) + " --set cluster.num_gpus=2", 2), kLlama);
}

TEST_F(TrainCli, LlamaSelectiveRecomputation) {
  expect_same_losses(train(std::string(kLlama) + " --recompute-granularity selective"), kLlama);
}

// A tiny Llama-style mixture of experts: every layer's MLP is 4 SwiGLU experts of width 96, top-2,
// the alltoall dispatcher and the Switch aux loss. Expert parallelism moves tokens between ranks
// but trains the same model, so EP 2 prints the losses of one process (EP 1), dropless and with a
// capacity (per-rank token counts are the same with TP 1). TP 2 + SP routes each rank's sequence
// shard (ETP 1: the experts are not split; the aux loss counts tokens over the TP group).
constexpr const char* kMoe =
    "--set model.architecture=llama --set model.num_query_groups=2 "
    "--set training.attention_dropout=0 --set model.num_moe_experts=4 "
    "--set model.moe_router_topk=2 --set model.moe_ffn_hidden_size=96 "
    "--set model.moe_token_dispatcher_type=alltoall --set model.moe_aux_loss_coeff=0.01 "
    "--set model.moe_grouped_gemm=true --set parallelism.rank_order=tp-cp-ep-dp-pp";

TEST_F(TrainCli, MoeLossFallsAndPrintsTheLoadBalancingLoss) {
  const testing::CliResult r = train(kMoe);
  ASSERT_EQ(r.status, 0) << r.output;
  const Losses& l = baseline(kMoe);
  ASSERT_EQ(l.train.size(), 20u);
  EXPECT_NEAR(l.train.front(), std::log(static_cast<double>(testing::kTinyVocab)), 0.3);
  EXPECT_LT(l.train.back(), l.train.front() - 0.5);
  EXPECT_THAT(r.output, HasSubstr("load_balancing_loss: "));
}

TEST_F(TrainCli, MoeExpertParallelOnTwoRanks) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(
      train(std::string(kMoe) + " --expert-model-parallel-size 2 --set cluster.num_gpus=2", 2),
      kMoe);
}

TEST_F(TrainCli, MoeExpertParallelWithTensorAndSequenceParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train(std::string(kMoe) +
                               " --tensor-model-parallel-size 2 --sequence-parallel "
                               "--expert-model-parallel-size 2 --expert-tensor-parallel-size 1 "
                               "--set cluster.num_gpus=4",
                           4),
                     kMoe);
}

TEST_F(TrainCli, MoeCapacityWithExpertParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  for (const std::string mode : {" --set model.moe_expert_capacity_factor=1.0",
                                 " --set model.moe_expert_capacity_factor=1.0 "
                                 "--set model.moe_pad_expert_input_to_capacity=true"}) {
    SCOPED_TRACE(mode);
    const std::string model = kMoe + mode;
    expect_same_losses(
        train(model + " --expert-model-parallel-size 2 --set cluster.num_gpus=2", 2), model);
  }
}

// Expert-DP 2 (EP 2 on 4 ranks): the experts' buckets reduce-scatter over expert-DP, the
// distributed optimizer shards their state there, the parameter all-gather brings them back.
TEST_F(TrainCli, MoeDistributedOptimizerOverExpertDataParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train(std::string(kMoe) +
                               " --expert-model-parallel-size 2 --set cluster.num_gpus=4 "
                               "--use-distributed-optimizer --set training.overlap_grad_reduce=true",
                           4),
                     kMoe);
}

// Context parallelism (cp_comm_type p2p): each CP rank holds Megatron-Core's load-balanced
// chunks r and 2 CP - 1 - r of every sequence, ring attention passes K/V (and dK/dV in the
// backward) around the CP group over MPI, gradients are reduced over DP x CP. The llama runs use
// flash attention (its default backend), which the executor computes blockwise like a ring block.
TEST_F(TrainCli, LlamaContextParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train(std::string(kLlama) + " --set parallelism.context_parallel_size=2 "
                                                 "--set cluster.num_gpus=2",
                           2),
                     kLlama);
}

// cp_comm_type all_gather: K/V of every CP rank all-gathered, dK/dV reduce-scattered.
TEST_F(TrainCli, LlamaContextParallelAllGather) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train(std::string(kLlama) + " --set parallelism.context_parallel_size=2 "
                                                 "--set parallelism.cp_comm_type=all_gather "
                                                 "--set cluster.num_gpus=2",
                           2),
                     kLlama);
}

TEST_F(TrainCli, LlamaContextAndTensorParallelWithSequenceParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train(std::string(kLlama) + " --set parallelism.context_parallel_size=2 "
                                                 "--tensor-model-parallel-size 2 "
                                                 "--sequence-parallel --set cluster.num_gpus=4",
                           4),
                     kLlama);
}

TEST_F(TrainCli, LlamaContextAndPipelineParallel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train(std::string(kLlama) + " --set parallelism.context_parallel_size=2 "
                                                 "--pipeline-model-parallel-size 2 "
                                                 "--set cluster.num_gpus=4",
                           4),
                     kLlama);
}

// The GPT (learned absolute positions, multi-head attention, unfused backend at CP 1) under CP 2
// with DP 2 and the distributed optimizer sharded over the four DP x CP ranks.
TEST_F(TrainCli, ContextParallelWithDistributedOptimizerOverDataAndContextRanks) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  expect_same_losses(train("--set parallelism.context_parallel_size=2 --set cluster.num_gpus=4 "
                           "--use-distributed-optimizer",
                           4));
}

// model.rotary_base reaches the executor's RoPE: Llama 3's base 500000 trains another model
// than the default 10000 (same data, same initialization).
TEST_F(TrainCli, LlamaRotaryBaseChangesTheModel) {
  const testing::CliResult r = train(std::string(kLlama) + " --set model.rotary_base=500000");
  ASSERT_EQ(r.status, 0) << r.output;
  const Losses l = parse_losses(r.output);
  const Losses& base = baseline(kLlama);
  ASSERT_EQ(l.train.size(), base.train.size());
  double most = 0;
  for (size_t i = 0; i < l.train.size(); ++i) {
    most = std::max(most, std::abs(l.train[i] - base.train[i]) / base.train[i]);
  }
  EXPECT_GT(most, 1e-4);
}

// Megatron-FSDP's sharding strategies (Rajbhandari et al., SC 2020): optim_grads (ZeRO-2: each
// gradient bucket reduce-scattered after every micro-batch's backward, a rank keeping only its
// reduced pieces) and optim_grads_params (ZeRO-3: and every transformer layer, an FSDP unit,
// all-gathered before its forward and again before its backward, only the rank's pieces of its
// parameters kept between uses) train the model plain DP trains: the one-process losses
// (relative 1e-5) on DP 2 (2 micro-batches per rank: the reduced pieces accumulate), DP 4 (pieces
// of unequal size), ZeRO-3 with overlapped buckets and parameter gathers, and with TP 2 + SP.
constexpr const char* kZero2 =
    " --use-distributed-optimizer --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads";
constexpr const char* kZero3 =
    " --use-distributed-optimizer --use-megatron-fsdp "
    "--data-parallel-sharding-strategy optim_grads_params";

TEST_F(TrainCli, ShardedDataParallelZero2AndZero3TrainThePlainDataParallelModel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  for (const char* zero : {kZero2, kZero3}) {
    SCOPED_TRACE(zero);
    expect_same_losses(train(std::string("--set cluster.num_gpus=2") + zero, 2));
    expect_same_losses(train(std::string("--set cluster.num_gpus=4") + zero, 4));
  }
  expect_same_losses(train(std::string("--set cluster.num_gpus=2 "
                                       "--set training.overlap_grad_reduce=true "
                                       "--set training.overlap_param_gather=true") + kZero3, 2));
  expect_same_losses(train(std::string("--tensor-model-parallel-size 2 --sequence-parallel "
                                       "--set cluster.num_gpus=4") + kZero3, 4));
}

// ZeRO-2 and ZeRO-3 under DualPipe: each rank's two parameter copies sharded over DP like its
// other parameters, the gradient pieces reduce-scattered per micro-batch, then summed with the
// mirror rank's (the pp-mirror all-reduce of the pieces): the tiny GPT on PP 2 x DP 2 (16
// micro-batches of 2 in the global batch, 4 per rank) trains the one-process model.
TEST_F(TrainCli, DualPipeUnderZero2AndZero3TrainsThePlainModel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string gbs16 = "--set training.global_batch_size=16";
  for (const char* zero : {kZero2, kZero3}) {
    SCOPED_TRACE(zero);
    expect_same_losses(train(gbs16 + " --pipeline-model-parallel-size 2 --set cluster.num_gpus=4 "
                                     "--virtual-pipeline-model-parallel-size 2 "
                                     "--set parallelism.pipeline_schedule=dualpipe" + zero,
                             4),
                       gbs16);
  }
}

// ZeRO-3's unit schedule changes when parameters are gathered, not what they hold: with
// reshard_after_forward false (no backward gather: each layer's parameters kept whole from its
// forward) and with fsdp_prefetch_depth 0, 2 or 3 (gathers issued that many layers ahead), the
// executor trains the model plain DP trains (the one-process losses, relative 1e-5): the tiny
// GPT on DP 2 (with overlapped buckets and gathers for depth 2), and the Llama on PP 2 x DP 2.
TEST_F(TrainCli, Zero3ReshardAfterForwardAndPrefetchDepthTrainThePlainModel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string zero3 = kZero3;
  expect_same_losses(
      train("--set cluster.num_gpus=2 --set training.reshard_after_forward=false" + zero3, 2));
  expect_same_losses(train("--set cluster.num_gpus=2 --set training.fsdp_prefetch_depth=0" +
                               zero3, 2));
  expect_same_losses(train("--set cluster.num_gpus=2 --set training.fsdp_prefetch_depth=2 "
                           "--set training.overlap_grad_reduce=true "
                           "--set training.overlap_param_gather=true" + zero3, 2));
  expect_same_losses(train(std::string(kLlama) + " --pipeline-model-parallel-size 2 "
                                                 "--set cluster.num_gpus=4 "
                                                 "--set training.reshard_after_forward=false "
                                                 "--set training.fsdp_prefetch_depth=3" + zero3,
                           4),
                     kLlama);
}

TEST_F(TrainCli, LlamaShardedDataParallelZero2AndZero3) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  for (const char* zero : {kZero2, kZero3}) {
    SCOPED_TRACE(zero);
    expect_same_losses(train(std::string(kLlama) + " --set cluster.num_gpus=2" + zero, 2), kLlama);
  }
  expect_same_losses(train(std::string(kLlama) + " --tensor-model-parallel-size 2 "
                                                 "--sequence-parallel --set cluster.num_gpus=4" +
                               kZero2, 4), kLlama);
  expect_same_losses(train(std::string(kLlama) + " --tensor-model-parallel-size 2 "
                                                 "--sequence-parallel --set cluster.num_gpus=4" +
                               kZero3, 4), kLlama);
  expect_same_losses(train(std::string(kLlama) + " --pipeline-model-parallel-size 2 "
                                                 "--set cluster.num_gpus=4" + kZero3, 4), kLlama);
}

// The V-shaped schedules (ZB-V, Qi et al. ICLR 2024 sec. 6; DualPipeV, deepseek-ai/DualPipe
// dualpipev.py) place rank r's model chunks at virtual stages r and 2p - 1 - r (core/schedule.hpp
// virtual_stage_of), as the Program does: the last stage and its loss sit on rank 0 beside the
// embedding (the tied LM head then reads the word embedding itself, no copy), and on rank p - 1
// chunk 0's output feeds chunk 1 without a transfer. The same model, the same losses: the tiny
// GPT on PP 2 and PP 4 (8 layers, 16 micro-batches of 2 in the global batch), the Llama (untied
// head) on PP 2 x DP 2 and CP 2 x PP 2, and an uneven split with chunks holding only the
// embedding or the loss.
TEST_F(TrainCli, VShapedSchedulesPlaceTheModelChunksInAV) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string gbs16 = " --set training.global_batch_size=16";
  const std::string pp4 = "--set model.num_layers=8" + gbs16;
  const std::string llama = std::string(kLlama) + gbs16;
  for (const std::string schedule : {"zb-v", "dualpipev"}) {
    SCOPED_TRACE(schedule);
    const std::string v = " --virtual-pipeline-model-parallel-size 2 "
                          "--set parallelism.pipeline_schedule=" + schedule;
    expect_same_losses(train("--pipeline-model-parallel-size 2 --set cluster.num_gpus=2" + v, 2));
    expect_same_losses(
        train(pp4 + " --pipeline-model-parallel-size 4 --set cluster.num_gpus=4" + v, 4), pp4);
    expect_same_losses(
        train(llama + " --pipeline-model-parallel-size 2 --set cluster.num_gpus=4" + v, 4), llama);
  }
  // Context parallelism (ring attention over CP 2) in the V: the Llama on CP 2 x PP 2.
  const std::string v = " --virtual-pipeline-model-parallel-size 2 "
                        "--set parallelism.pipeline_schedule=dualpipev";
  expect_same_losses(train(std::string(kLlama) + " --context-parallel-size 2 "
                                                 "--pipeline-model-parallel-size 2 "
                                                 "--set cluster.num_gpus=4" + v,
                           4),
                     kLlama);
  // 2 layers with the embedding and the loss each counted as a layer: rank 0's chunks hold only
  // the embedding (stage 0) and only the head and loss (stage 3, reading the embedding's
  // weight), rank 1's a layer each, handed over in the V's turn; TP 2 + SP on 4 ranks.
  const std::string two = "--set model.num_layers=2";
  expect_same_losses(train(two + " --tensor-model-parallel-size 2 --sequence-parallel "
                                 "--pipeline-model-parallel-size 2 "
                                 "--virtual-pipeline-model-parallel-size 2 "
                                 "--set parallelism.pipeline_schedule=dualpipev "
                                 "--account-for-embedding-in-pipeline-split "
                                 "--account-for-loss-in-pipeline-split --set cluster.num_gpus=4",
                           4),
                     two);
}

// A checkpoint of a V: 10 steps of ZB-V on PP 2 resume under DualPipeV (the same V placement)
// for 10 more, with the losses of 20 ZB-V steps straight; interleaved 1F1B, whose chunks hold
// other layers, refuses it by its signature.
TEST_F(TrainCli, VShapedCheckpointsResumeOnlyInAV) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string layout = "--pipeline-model-parallel-size 2 --set cluster.num_gpus=2 "
                             "--virtual-pipeline-model-parallel-size 2 ";
  const std::string zbv = layout + "--set parallelism.pipeline_schedule=zb-v ";
  const fs::path ckpt = *dir_ / "ckpt-zbv";
  expect_resume_matches_straight(zbv, layout + "--set parallelism.pipeline_schedule=dualpipev ",
                                 ckpt, 2, 1e-5);
  if (HasFatalFailure()) return;
  const testing::CliResult interleaved = train(layout + "--load " + ckpt.string(), 2);
  EXPECT_NE(interleaved.status, 0);
  EXPECT_THAT(interleaved.output,
              HasSubstr("parallelism.model_chunk_placement: checkpoint v, this run (absent)"));
}

// Where the V changes no order of gradient accumulation (untied LM head: every parameter sums
// its micro-batches' gradients in micro-batch order, as under 1F1B, and the loss is counted in
// the same order), ZB-V and DualPipeV print the very losses of 1F1B on the same layout.
TEST_F(TrainCli, VShapedSchedulesPrintTheLossesOf1F1B) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string layout = std::string(kLlama) +
                             " --pipeline-model-parallel-size 2 --set cluster.num_gpus=2 "
                             "--virtual-pipeline-model-parallel-size 2";
  const testing::CliResult base = train(layout, 2);
  ASSERT_EQ(base.status, 0) << base.output;
  const Losses b = parse_losses(base.output);
  ASSERT_EQ(b.train.size(), 20u);
  for (const std::string schedule : {"zb-v", "dualpipev"}) {
    SCOPED_TRACE(schedule);
    const testing::CliResult r =
        train(layout + " --set parallelism.pipeline_schedule=" + schedule, 2);
    ASSERT_EQ(r.status, 0) << r.output;
    const Losses l = parse_losses(r.output);
    EXPECT_EQ(l.train, b.train);
    EXPECT_EQ(l.validation, b.validation);
  }
}

/// The gradient norms `traintwin train` printed, one per logged iteration ("grad norm: 1.234").
std::vector<double> parse_grad_norms(const std::string& out) {
  std::vector<double> norms;
  const std::regex norm(R"(\| grad norm: ([-+0-9.Ee]+) \|)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), norm); it != std::sregex_iterator();
       ++it) {
    norms.push_back(std::stod((*it)[1]));
  }
  return norms;
}

// DualPipe (DeepSeek-V3 Technical Report sec. 3.2.1; deepseek-ai/DualPipe dualpipe.py): rank r
// holds two parameter copies, chunk 0 = stage r of the forward direction and chunk 1 = stage
// p - 1 - r of the reverse one (core/schedule.hpp virtual_stage_of); micro-batches 0..m/2-1 run
// forward (embedding on rank 0, loss on rank p - 1), m/2..m-1 in reverse (embedding on rank
// p - 1, loss on rank 0: core/schedule.hpp takes_embedding, computes_loss), and after the DP
// gradient sync each rank's gradients are all-reduced with its mirror's, {r, p - 1 - r}. Every
// micro-batch runs once through the same model, so the losses are those of one process
// (relative 1e-5), and so is the gradient norm, which counts each stage once (the log prints 3
// decimals): the tiny GPT (tied LM head: each end rank's head adds into its own copy of stage
// 0's word embedding) on PP 2 and on PP 4 (8 layers, 8 micro-batches), the Llama (untied head)
// on PP 2 x DP 2 with the distributed optimizer (the mirror all-reduce of the DP pieces),
// TP 2 + SP x PP 2, the MoE on EP 2 x PP 2 and the tiny GPT on PP 2 x DP 2. The two copies stay equal: after the 20 steps of PP 4, rank r's chunk 0 and
// rank 3 - r's chunk 1 hold the same parameters and AdamW moments, bit for bit (their
// checkpoint files; PP is the only size above 1, so rank r is pipeline rank r).
TEST_F(TrainCli, DualPipeTrainsTwoEqualCopiesFedFromBothEnds) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string dualpipe = " --virtual-pipeline-model-parallel-size 2 "
                               "--set parallelism.pipeline_schedule=dualpipe";
  const testing::CliResult pp2 =
      train("--pipeline-model-parallel-size 2 --set cluster.num_gpus=2" + dualpipe, 2);
  expect_same_losses(pp2);
  const testing::CliResult one = train("");
  ASSERT_EQ(one.status, 0) << one.output;
  const std::vector<double> base_norms = parse_grad_norms(one.output),
                            norms = parse_grad_norms(pp2.output);
  ASSERT_EQ(base_norms.size(), 20u);
  ASSERT_EQ(norms.size(), base_norms.size()) << pp2.output;
  for (size_t i = 0; i < norms.size(); ++i) {
    EXPECT_NEAR(norms[i], base_norms[i], 1.5e-3) << "iteration " << i + 1;
  }

  const std::string pp4 = "--set model.num_layers=8 --set training.global_batch_size=16";
  const fs::path ckpt = *dir_ / "ckpt-dualpipe";
  expect_same_losses(train(pp4 + " --pipeline-model-parallel-size 4 --set cluster.num_gpus=4 "
                                 "--save " + ckpt.string() + dualpipe,
                           4),
                     pp4);
  ASSERT_EQ(read_latest_iteration(ckpt), 20);
  for (int64_t r = 0; r < 4; ++r) {
    SCOPED_TRACE("pipeline rank " + std::to_string(r));
    const RankCheckpoint mine = read_rank_checkpoint(ckpt, 20, r);
    const RankCheckpoint mirror = read_rank_checkpoint(ckpt, 20, 3 - r);
    std::map<std::string, const CheckpointTensor*> of_mirror;
    for (const CheckpointTensor& t : mirror.tensors) of_mirror[t.name] = &t;
    size_t compared = 0, chunk1 = 0;
    for (const CheckpointTensor& t : mine.tensors) {
      chunk1 += t.name.starts_with("chunk1.");
      if (!t.name.starts_with("chunk0.")) continue;
      const auto it = of_mirror.find("chunk1." + t.name.substr(7));
      ASSERT_NE(it, of_mirror.end()) << t.name << " has no copy on rank " << 3 - r;
      EXPECT_EQ(t.shape, it->second->shape) << t.name;
      EXPECT_TRUE(t.data == it->second->data) << t.name << " differs from its copy";
      ++compared;
    }
    EXPECT_GT(compared, 0u);
    EXPECT_EQ(chunk1, compared);  // the two chunks hold the same tensors
  }

  const std::string llama = std::string(kLlama) + " --set training.global_batch_size=16";
  expect_same_losses(train(llama + " --pipeline-model-parallel-size 2 --set cluster.num_gpus=4 "
                                   "--use-distributed-optimizer" + dualpipe,
                           4),
                     llama);
  expect_same_losses(train("--tensor-model-parallel-size 2 --sequence-parallel "
                           "--pipeline-model-parallel-size 2 --set cluster.num_gpus=4" + dualpipe,
                           4));
  // The MoE on EP 2 x PP 2: the routed experts' all-to-alls in both directions.
  const std::string moe = std::string(kMoe) + " --set training.global_batch_size=16";
  expect_same_losses(train(moe + " --expert-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                                 "--set cluster.num_gpus=4" + dualpipe,
                           4),
                     moe);
  // The tied head on PP 2 x DP 2 with overlapped buckets: each end rank's head adds into the
  // stage-0 copy's word embedding before that chunk's last DP bucket reduces it.
  const std::string gbs16 = " --set training.global_batch_size=16";
  expect_same_losses(train("--pipeline-model-parallel-size 2 --set cluster.num_gpus=4 "
                           "--set training.overlap_grad_reduce=true" + gbs16 + dualpipe,
                           4),
                     gbs16);
}

// A DualPipe checkpoint: 10 steps on PP 2 resume for 10 more with the losses of 20 straight
// (relative 1e-5); ZB-V, whose V holds other layers in chunk 1, refuses it by its signature.
TEST_F(TrainCli, DualPipeCheckpointsResumeOnlyUnderDualPipe) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string layout = "--pipeline-model-parallel-size 2 --set cluster.num_gpus=2 "
                             "--virtual-pipeline-model-parallel-size 2 ";
  const std::string dualpipe = layout + "--set parallelism.pipeline_schedule=dualpipe ";
  const fs::path ckpt = *dir_ / "ckpt-dualpipe-resume";
  expect_resume_matches_straight(dualpipe, dualpipe, ckpt, 2, 1e-5);
  if (HasFatalFailure()) return;
  const testing::CliResult zbv =
      train(layout + "--set parallelism.pipeline_schedule=zb-v --load " + ckpt.string(), 2);
  EXPECT_NE(zbv.status, 0);
  EXPECT_THAT(zbv.output,
              HasSubstr("parallelism.model_chunk_placement: checkpoint dualpipe, this run v"));
}

// The B/W split under sequence parallelism (W all-gathers the SP shards of the QKV and FC1
// inputs again; the row-parallel layers' gathered output gradients wait from B) and with a
// mixture of experts (W runs the routed experts' grouped wgrad GEMMs on the rows B kept, and
// the router's wgrad), on ZB-H1 and ZB-V.
TEST_F(TrainCli, ZeroBubbleSchedulesWithSequenceParallelismAndExperts) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string gbs16 = " --set training.global_batch_size=16";
  const std::string tp_sp = " --tensor-model-parallel-size 2 --sequence-parallel "
                            "--pipeline-model-parallel-size 2 --set cluster.num_gpus=4";
  const std::string zbv = " --virtual-pipeline-model-parallel-size 2 "
                          "--set parallelism.pipeline_schedule=zb-v";
  expect_same_losses(train(tp_sp + " --set parallelism.pipeline_schedule=zb-h1", 4));
  expect_same_losses(train(gbs16 + tp_sp + zbv, 4), gbs16);
  const std::string moe = std::string(kMoe) + gbs16;
  expect_same_losses(train(std::string(kMoe) + " --expert-model-parallel-size 2 "
                                               "--pipeline-model-parallel-size 2 "
                                               "--set parallelism.pipeline_schedule=zb-h1 "
                                               "--set cluster.num_gpus=4",
                           4),
                     kMoe);
  expect_same_losses(train(moe + tp_sp + " --expert-model-parallel-size 2 "
                                         "--expert-tensor-parallel-size 1" + zbv,
                           4),
                     moe);
}

// Pipelines under ZeRO-2/3 on PP 2 x DP 2: the interleaved schedule (2 model chunks, each with
// its own FSDP units and buckets) and ZB-H1, whose weight-gradient steps (W) trigger the
// reduce-scatters and whose input-gradient steps (B) gather the layers.
TEST_F(TrainCli, ShardedDataParallelWithInterleavedAndZeroBubblePipelines) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  for (const char* zero : {kZero2, kZero3}) {
    SCOPED_TRACE(zero);
    expect_same_losses(train(std::string("--pipeline-model-parallel-size 2 "
                                         "--virtual-pipeline-model-parallel-size 2 "
                                         "--set cluster.num_gpus=4") + zero, 4));
    expect_same_losses(train(std::string("--pipeline-model-parallel-size 2 "
                                         "--set parallelism.pipeline_schedule=zb-h1 "
                                         "--set cluster.num_gpus=4") + zero, 4));
    // ZB-V: the tied LM head on rank 0 adds into the word embedding's gradient, whose bucket
    // reduce-scatters after each micro-batch's W (the head's W of a micro-batch comes first).
    const std::string gbs16 = " --set training.global_batch_size=16";
    expect_same_losses(train(std::string("--pipeline-model-parallel-size 2 "
                                         "--virtual-pipeline-model-parallel-size 2 "
                                         "--set parallelism.pipeline_schedule=zb-v "
                                         "--set cluster.num_gpus=4") + gbs16 + zero, 4),
                       gbs16);
  }
}

// A mixture of experts under ZeRO-2/3: the routed experts' buckets reduce-scatter over
// expert-DP and their FSDP gathers run over expert-DP (EP 2 x expert-DP 2 on DP 4), the dense
// ones over DP.
TEST_F(TrainCli, MoeShardedDataParallelZero2AndZero3) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  for (const char* zero : {kZero2, kZero3}) {
    SCOPED_TRACE(zero);
    expect_same_losses(train(std::string(kMoe) + " --expert-model-parallel-size 2 "
                                                 "--set cluster.num_gpus=4" + zero,
                             4),
                       kMoe);
  }
}

// A checkpoint holds the whole state of the rank's TP/PP shard whatever the sharding (the
// pieces are all-gathered over DP before saving): 10 steps under ZeRO-3 resume under plain DP and
// 10 steps of plain DP resume under ZeRO-3, ZeRO-2 under ZeRO-1, HSDP's ZeRO-3 under plain DP,
// each printing the losses of 20 steps straight (relative 1e-5: the reductions sum in another
// order).
TEST_F(TrainCli, CheckpointsResumeAcrossShardingStrategies) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const Losses& base = baseline();
  int n = 0;
  // (ranks, save's sharding, load's sharding): HSDP's sharding groups of 2 on 4 ranks too.
  const std::string hsdp = std::string(" --set training.num_distributed_optimizer_instances=2") +
                           kZero3;
  for (const auto& [ranks, save, load] :
       {std::tuple<int, std::string, std::string>{2, kZero3, ""},
        std::tuple<int, std::string, std::string>{2, "", kZero3},
        std::tuple<int, std::string, std::string>{2, kZero2, " --use-distributed-optimizer"},
        std::tuple<int, std::string, std::string>{4, hsdp, ""}}) {
    SCOPED_TRACE("save with '" + save + "', load with '" + load + "' on " +
                 std::to_string(ranks) + " ranks");
    const fs::path ckpt = *dir_ / ("ckpt-zero-" + std::to_string(n++));
    const std::string layout = "--set cluster.num_gpus=" + std::to_string(ranks) + " ";
    const testing::CliResult first =
        train(layout + "--train-iters 10 --lr-decay-iters 20 --save " + ckpt.string() + save,
              ranks);
    const testing::CliResult rest = train(layout + "--load " + ckpt.string() + load, ranks);
    ASSERT_EQ(first.status, 0) << first.output;
    ASSERT_EQ(rest.status, 0) << rest.output;
    EXPECT_THAT(rest.output, HasSubstr("resumed from"));
    const Losses a = parse_losses(first.output), b = parse_losses(rest.output);
    ASSERT_EQ(a.train.size(), 10u);
    ASSERT_EQ(b.train.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_NEAR(a.train[i], base.train[i], 1e-5 * base.train[i]) << "step " << i + 1;
      EXPECT_NEAR(b.train[i], base.train[10 + i], 1e-5 * base.train[10 + i]) << "step " << i + 11;
    }
  }
}

// HSDP (Megatron-Core's num_distributed_optimizer_instances R: the DP x CP ranks split into R
// sharding groups, the state sharded inside each and replicated across them; each bucket's
// reduced pieces all-reduced over the R replicas after the last micro-batch's reduce-scatter,
// the gradient norm counting one replica) under ZeRO-1, ZeRO-2 and ZeRO-3 on DP 4 with 2
// micro-batches per rank, R = 2 (sharding groups of 2); ZeRO-3 with TP 2 on 8 ranks; the
// Llama's ZeRO-3 over DP 2 x CP 2 with R = 2. An MoE model with HSDP is refused by rule, naming
// the key and the allowed value.
TEST_F(TrainCli, HybridShardedDataParallelTrainsThePlainDataParallelModel) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string mb1 = "--set training.micro_batch_size=1";
  const std::string hsdp = " --set training.num_distributed_optimizer_instances=2";
  for (const char* zero : {" --use-distributed-optimizer", kZero2, kZero3}) {
    SCOPED_TRACE(zero);
    expect_same_losses(train(mb1 + " --set cluster.num_gpus=4" + hsdp + zero, 4), mb1);
  }
  expect_same_losses(train(std::string("--tensor-model-parallel-size 2 --sequence-parallel "
                                       "--set cluster.num_gpus=8") + hsdp + kZero3, 8));
  expect_same_losses(train(std::string(kLlama) + " --set parallelism.context_parallel_size=2 "
                                                 "--set cluster.num_gpus=4" + hsdp + kZero3, 4),
                     kLlama);
  const testing::CliResult moe =
      train(std::string(kMoe) + " --set cluster.num_gpus=4" + hsdp + kZero3, 4);
  EXPECT_NE(moe.status, 0);
  EXPECT_THAT(moe.output, HasSubstr("training.num_distributed_optimizer_instances"));
  EXPECT_THAT(moe.output, HasSubstr("allowed: 1"));
}

TEST_F(TrainCli, ContextParallelA2aIsRefused) {
  const testing::CliResult r =
      train(std::string(kLlama) + " --set parallelism.context_parallel_size=2 "
                                  "--set parallelism.cp_comm_type=a2a --set cluster.num_gpus=2", 2);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("parallelism.cp_comm_type is a2a"));
}

// Fused attention is one Backend call per pass without CP: ring attention is flash's.
TEST_F(TrainCli, FusedAttentionUnderContextParallelismIsRefused) {
  const testing::CliResult r =
      train(std::string(kLlama) + " --set parallelism.context_parallel_size=2 "
                                  "--set training.attention_backend=fused "
                                  "--set cluster.num_gpus=2", 2);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("training.attention_backend is fused"));
  EXPECT_THAT(r.output, HasSubstr("parallelism.context_parallel_size 1"));
}

TEST_F(TrainCli, WorldSizeMismatchIsRefusedWithTheFix) {
  const testing::CliResult r = train("--tensor-model-parallel-size 2 --set cluster.num_gpus=2");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("mpirun -np 2"));
}

TEST_F(TrainCli, LayoutThatDoesNotDivideTheModelIsRefused) {
  const testing::CliResult r = train("--tensor-model-parallel-size 3 --set cluster.num_gpus=3");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("tensor_model_parallel_size"));
}

TEST_F(TrainCli, MissingDatasetIsRefused) {
  const testing::CliResult r = train("--set data.data_path=" + (*dir_ / "nothing").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("nothing"));
}

TEST_F(TrainCli, VocabularyMismatchIsRefused) {
  const testing::CliResult r = train("--set model.vocab_size=500");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("vocabulary"));
}

TEST_F(TrainCli, WritesATimelineOfEveryOp) {
  const fs::path trace = *dir_ / "timeline.json";
  const testing::CliResult r = train("--set training.train_iters=2 --set training.lr_warmup_iters=1 --timeline " + trace.string());
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(fs::exists(trace));
  std::ifstream in(trace);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"it 1 fwd mb0 L0 layernorm\""));
  EXPECT_THAT(text, HasSubstr("\"it 2 optimizer grad norm\""));
}

}  // namespace
}  // namespace traintwin
