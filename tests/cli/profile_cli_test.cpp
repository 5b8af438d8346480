// `traintwin profile`: every distinct KernelKey of a Program (all pipeline stages, MoE kernels
// included) once in the database, --kernels and --cases selecting kernels and scenarios, no
// kernel ever timed in another dtype than its key's, a second run merging into it, malformed and foreign-device databases refused naming
// the file, the collective rows under mpirun following nccl-tests' busbw factors, and the local
// topology loading as a topology whose device is the database's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "core/program.hpp"
#include "core/scenario.hpp"
#include "exec/cpu/host_device.hpp"
#include "sim/collectives.hpp"
#include "tests/cli/run_cli.hpp"
#include "tests/tiny_training.hpp"
#include "topologies/topology.hpp"
#include "traces/cost_db.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class ProfileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("traintwin-profile-cli-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    scenario_ = testing::write_tiny_scenario(dir_, (dir_ / "none").string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  testing::CliResult profile(const std::string& args) {
    return testing::run_cli("profile " + scenario_ + " --warmup 1 --repeats 3 --min-time 0 " + args);
  }

  /// The KernelKeys of every rank of the scenario with `overrides`.
  std::set<std::string> program_keys(const std::vector<Override>& overrides) {
    const Program prog = build_program(load_scenario(scenario_, overrides));
    std::set<std::string> keys;
    for (const Kernel& k : prog.kernels) keys.insert(k.key.to_string());
    return keys;
  }

  static std::set<std::string> db_keys(const CostDatabase& db) {
    std::set<std::string> keys;
    for (const KernelMeasurement& m : db.kernels()) keys.insert(m.key.to_string());
    return keys;
  }

  fs::path dir_;
  std::string scenario_;
};

TEST_F(ProfileCli, EveryKernelKeyOfEveryStageAppearsOnce) {
  const fs::path db_file = dir_ / "db.json";
  const std::string layout =
      "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel "
      "--set cluster.num_gpus=4 ";
  const testing::CliResult r = profile(layout + "--out " + db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("ETA"));
  const CostDatabase db = CostDatabase::load(db_file);
  const std::set<std::string> want = program_keys(
      {{"parallelism.tensor_model_parallel_size", "2"},
       {"parallelism.pipeline_model_parallel_size", "2"},
       {"parallelism.sequence_parallel", "true"},
       {"cluster.num_gpus", "4"}});
  EXPECT_EQ(db_keys(db), want);
  EXPECT_EQ(db.kernels().size(), want.size());  // once each
  // Both stages' kernels: the embedding (first) and the cross-entropy (last).
  EXPECT_THAT(db_keys(db), ::testing::Contains(HasSubstr("embedding_fwd")));
  EXPECT_THAT(db_keys(db), ::testing::Contains(HasSubstr("cross_entropy_bwd")));
  for (const KernelMeasurement& m : db.kernels()) {
    EXPECT_EQ(m.samples, 3) << m.key.to_string();
    EXPECT_GT(m.median_us, 0) << m.key.to_string();
    EXPECT_LE(m.p10_us, m.median_us);
    EXPECT_LE(m.median_us, m.p90_us);
  }
  // The device block is this CPU's.
  EXPECT_EQ(db.device().kind, std::optional<std::string>("cpu"));
  ASSERT_TRUE(db.device().threads.has_value());
  EXPECT_EQ(*db.device().threads, exec::cpu::gemm_threads_for(4));
  ASSERT_TRUE(db.versions().blas.has_value());
  EXPECT_THAT(*db.versions().blas, HasSubstr("OpenBLAS"));
}

// Without gradient accumulation fusion the Program's grad_accumulate (main_grad += param.grad,
// once per layer and micro-batch) is profiled as train runs it, with every other kernel.
TEST_F(ProfileCli, UnfusedGradientAccumulationIsProfiled) {
  const fs::path db_file = dir_ / "unfused.json";
  const testing::CliResult r =
      profile("--set training.gradient_accumulation_fusion=false --out " + db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::set<std::string> got = db_keys(CostDatabase::load(db_file));
  EXPECT_EQ(got, program_keys({{"training.gradient_accumulation_fusion", "false"}}));
  EXPECT_THAT(got, ::testing::Contains(HasSubstr("grad_accumulate[")));
}

// --backend cuda: on a GPU, every kernel timed by CUDA events into a database whose device block
// is the GPU's (kind gpu, a compute capability, the CUDA versions); without one, a clear refusal
// that never measures on the CPU instead. --topology-out describes a CPU host: refused for cuda.
TEST_F(ProfileCli, CudaBackendMeasuresTheGpuOrSaysWhyNot) {
  const fs::path db_file = dir_ / "cuda.json";
  const testing::CliResult r = profile("--backend cuda --out " + db_file.string());
  if (r.status != 0) {
    EXPECT_THAT(r.output, ::testing::AnyOf(HasSubstr("no usable CUDA device"),
                                           HasSubstr("built without CUDA")));
    EXPECT_FALSE(fs::exists(db_file));
  } else {
    const CostDatabase db = CostDatabase::load(db_file);
    EXPECT_EQ(db.device().kind, std::optional<std::string>("gpu"));
    EXPECT_TRUE(db.device().compute_capability.has_value());
    EXPECT_NE(db.versions().cuda, "n/a");
    EXPECT_EQ(db_keys(db), program_keys({}));
  }
  const testing::CliResult t =
      profile("--backend cuda --out " + db_file.string() + " --topology-out " +
              (dir_ / "t.yaml").string());
  EXPECT_NE(t.status, 0);
  EXPECT_THAT(t.output, HasSubstr("not falling back to cpu"));
}

// A mixture of experts (the tiny MoE of the README, its 4 experts on one rank, grouped GEMM,
// aux loss): every kernel the executor runs for it is profiled, the router, aux loss,
// (un)permute, the sort of the rows by local expert (moe_chunk_cat) and grouped GEMMs included (profile stopped at moe_router_topk_fwd before).
TEST_F(ProfileCli, MoeKernelsAreProfiled) {
  const fs::path db_file = dir_ / "moe.json";
  const std::string moe = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/moe-tiny-brown.yaml";
  const testing::CliResult r = testing::run_cli(
      "profile " + moe + " --expert-model-parallel-size 1 --set cluster.num_gpus=1 --warmup 1 "
      "--repeats 2 --min-time 0 --out " + db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const Program prog = build_program(load_scenario(
      moe, {{"parallelism.expert_model_parallel_size", "1"}, {"cluster.num_gpus", "1"}}));
  std::set<std::string> want;
  for (const Kernel& k : prog.kernels) want.insert(k.key.to_string());
  const std::set<std::string> got = db_keys(CostDatabase::load(db_file));
  EXPECT_EQ(got, want);
  for (const char* k : {"moe_router_topk_fwd", "moe_router_topk_bwd", "moe_aux_loss_fwd",
                        "moe_aux_loss_bwd", "moe_permute_fwd", "moe_permute_bwd",
                        "moe_unpermute_fwd", "moe_unpermute_bwd", "moe_chunk_cat", "grouped_gemm_fwd",
                        "grouped_gemm_dgrad", "grouped_gemm_wgrad"}) {
    EXPECT_THAT(got, ::testing::Contains(HasSubstr(k)));
  }
}

// --kernels keeps the kernels whose key matches its regular expression, and nothing else; a
// regex that matches none, or is not one, is refused naming a few keys and writes nothing.
TEST_F(ProfileCli, KernelsSelectsByKey) {
  const fs::path db_file = dir_ / "gemm.json";
  const testing::CliResult r =
      profile("--kernels '^gemm_(fwd|dgrad)\\[' --out " + db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  std::set<std::string> want;
  for (const std::string& k : program_keys({})) {
    if (k.rfind("gemm_fwd[", 0) == 0 || k.rfind("gemm_dgrad[", 0) == 0) want.insert(k);
  }
  EXPECT_GE(want.size(), 4u);
  EXPECT_EQ(db_keys(CostDatabase::load(db_file)), want);

  const fs::path none = dir_ / "none.json";
  const testing::CliResult n = profile("--kernels 'no_such_kernel' --out " + none.string());
  EXPECT_NE(n.status, 0);
  EXPECT_THAT(n.output, HasSubstr("matches none of the"));
  EXPECT_THAT(n.output, HasSubstr("gemm_fwd["));
  const testing::CliResult bad = profile("--kernels '(' --out " + none.string());
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.output, HasSubstr("not a regular expression"));
  EXPECT_FALSE(fs::exists(none));
}

// A bf16 scenario on the cpu backend, which has no bf16 arithmetic: no kernel is ever timed in
// another arithmetic under its name. Every kernel but the GEMMs is refused naming its dtype (a
// backend with bf16 arithmetic times them as train runs them: tests/exec/profile_bindings_test);
// the GEMMs are refused too (the cpu backend emulates bf16); nothing is written.
TEST_F(ProfileCli, Bf16KernelsAreNeverTimedInFp32) {
  const fs::path db_file = dir_ / "bf16.json";
  const testing::CliResult all =
      profile("--set training.precision=bf16 --out " + db_file.string());
  EXPECT_NE(all.status, 0);
  EXPECT_THAT(all.output, HasSubstr("bf16 tp"));
  EXPECT_THAT(all.output, HasSubstr("kernels only as GEMMs so far"));
  const testing::CliResult gemm = profile("--set training.precision=bf16 --kernels '^gemm_' --out " +
                                          db_file.string());
  EXPECT_NE(gemm.status, 0);
  EXPECT_THAT(gemm.output, HasSubstr("the cpu backend emulates bf16"));
  EXPECT_FALSE(fs::exists(db_file));
}

// --cases profiles a calibration file's cases on one GPU; the GPU is required and must have
// cases, and --gpu / --case need --cases.
TEST_F(ProfileCli, CasesNeedAGpuWithCases) {
  const fs::path file = dir_ / "cal.yaml";
  std::ofstream(file) << "cases:\n"
                         "  - id: tiny-a100\n"
                         "    source: test\n"
                         "    model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, "
                         "seq_length: 128, vocab_size: 512}\n"
                         "    parallelism: {tensor_model_parallel_size: 1, "
                         "pipeline_model_parallel_size: 1}\n"
                         "    training: {micro_batch_size: 1, global_batch_size: 8, precision: "
                         "fp32}\n"
                         "    cluster: {gpu: A100-SXM-80GB, num_gpus: 8}\n"
                         "    measured: {iteration_time_s: 1.0}\n";
  const std::string topologies = " --topologies " TRAINTWIN_SOURCE_DIR "/topologies";
  const std::string common = " --warmup 0 --repeats 1 --min-time 0 --kernels '^gemm_fwd' --out " +
                             (dir_ / "c.json").string() + topologies;
  const testing::CliResult no_gpu = testing::run_cli("profile --cases " + file.string() + common);
  EXPECT_NE(no_gpu.status, 0);
  EXPECT_THAT(no_gpu.output, HasSubstr("give --gpu"));
  const testing::CliResult wrong =
      testing::run_cli("profile --cases " + file.string() + " --gpu H100-SXM-80GB" + common);
  EXPECT_NE(wrong.status, 0);
  EXPECT_THAT(wrong.output, HasSubstr("no case on --gpu H100-SXM-80GB (its GPUs: A100-SXM-80GB)"));
  const testing::CliResult ok =
      testing::run_cli("profile --cases " + file.string() + " --gpu A100-SXM-80GB" + common);
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("1 case(s) of"));
  const CostDatabase db = CostDatabase::load(dir_ / "c.json");
  ASSERT_FALSE(db.kernels().empty());
  for (const KernelMeasurement& m : db.kernels()) EXPECT_EQ(m.key.name, "gemm_fwd");
  const testing::CliResult stray = profile("--gpu A100-SXM-80GB");
  EXPECT_NE(stray.status, 0);
  EXPECT_THAT(stray.output, HasSubstr("--gpu and --case select cases of --cases FILE"));
}

// A Llama (RMSNorm, SwiGLU, RoPE, GQA with 2 groups for 4 heads) under TP 2: every kernel the
// executor runs for it is profiled, once.
TEST_F(ProfileCli, LlamaKernelsAreProfiled) {
  const fs::path db_file = dir_ / "db.json";
  const testing::CliResult r = profile(
      "--set model.architecture=llama --set model.num_query_groups=2 "
      "--set training.attention_dropout=0 --tensor-model-parallel-size 2 "
      "--set cluster.num_gpus=2 --out " + db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const CostDatabase db = CostDatabase::load(db_file);
  const std::set<std::string> want = program_keys({{"model.architecture", "llama"},
                                                   {"model.num_query_groups", "2"},
                                                   {"training.attention_dropout", "0"},
                                                   {"parallelism.tensor_model_parallel_size", "2"},
                                                   {"cluster.num_gpus", "2"}});
  EXPECT_EQ(db_keys(db), want);
  for (const char* k : {"rmsnorm_bwd", "swiglu_fwd", "rope_bwd", "attention_bwd"}) {
    EXPECT_THAT(db_keys(db), ::testing::Contains(HasSubstr(k)));
  }
}

// Context parallelism (ring attention) with GQA attention dropout: the blockwise attention
// kernels and the ring's log-sum-exp merge are timed as train runs them.
TEST_F(ProfileCli, ContextParallelKernelsAreProfiled) {
  const fs::path db_file = dir_ / "db.json";
  const testing::CliResult r = profile(
      "--set model.architecture=llama --set model.num_query_groups=2 "
      "--set parallelism.context_parallel_size=2 --set cluster.num_gpus=2 --out " +
      db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const CostDatabase db = CostDatabase::load(db_file);
  const std::set<std::string> want = program_keys({{"model.architecture", "llama"},
                                                   {"model.num_query_groups", "2"},
                                                   {"parallelism.context_parallel_size", "2"},
                                                   {"cluster.num_gpus", "2"}});
  EXPECT_EQ(db_keys(db), want);
  for (const char* k : {"cp_attention_merge", "flash_attention_fwd", "flash_attention_bwd"}) {
    EXPECT_THAT(db_keys(db), ::testing::Contains(HasSubstr(k)));
  }
}

TEST_F(ProfileCli, ASecondRunMergesIntoTheDatabase) {
  const fs::path db_file = dir_ / "db.json";
  ASSERT_EQ(profile("--threads 1 --out " + db_file.string()).status, 0);
  const std::set<std::string> first = db_keys(CostDatabase::load(db_file));
  const testing::CliResult r = profile("--threads 1 --micro-batch-size 4 --out " + db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::set<std::string> second = program_keys({{"training.micro_batch_size", "4"}});
  std::set<std::string> both = first;
  both.insert(second.begin(), second.end());
  EXPECT_GT(both.size(), first.size());
  EXPECT_EQ(db_keys(CostDatabase::load(db_file)), both);
}

TEST_F(ProfileCli, AMalformedDatabaseIsRefusedNamingTheFile) {
  const fs::path db_file = dir_ / "broken.json";
  std::ofstream(db_file) << "{\"format\": \"traintwin-costdb\", ";
  const testing::CliResult r = profile("--out " + db_file.string());
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr(db_file.string()));
  EXPECT_THAT(r.output, HasSubstr("not valid JSON"));
}

TEST_F(ProfileCli, AForeignDeviceDatabaseIsRefusedNamingTheFile) {
  const fs::path db_file = dir_ / "h100.json";
  CostDatabase h100(CostDbDevice{"NVIDIA H100 80GB HBM3", 132, 1980, 85520809984, "9.0"},
                    CostDbVersions{"550.54.15", "12.4", "12.4.5", "2.21.5", "0.1.0"});
  h100.save(db_file);
  const std::string before = CostDatabase::load(db_file).to_json();
  const testing::CliResult r = profile("--out " + db_file.string());
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr(db_file.string()));
  EXPECT_THAT(r.output, HasSubstr("NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(r.output, HasSubstr("refusing to merge"));
  EXPECT_EQ(CostDatabase::load(db_file).to_json(), before);  // untouched
}

TEST_F(ProfileCli, CollectiveRowsFollowNcclTestsBusbwFactors) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun";
  const fs::path db_file = dir_ / "coll.json";
  const testing::CliResult r = testing::run_mpi_cli(
      2, "profile --collectives -b 8 -e 64K --warmup 1 --repeats 3 --out " + db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("algbw"));
  EXPECT_THAT(r.output, HasSubstr("busbw"));
  const CostDatabase db = CostDatabase::load(db_file);
  std::set<std::string> ops;
  for (const CollectiveMeasurement& c : db.collectives()) {
    ops.insert(c.op);
    EXPECT_EQ(c.ranks, 2);
    EXPECT_EQ(c.bytes % 8, 0) << "one fp32 per rank at least";
    EXPECT_NEAR(c.algbw_GBps, static_cast<double>(c.bytes) / (c.time_us * 1e3), 1e-9 * c.algbw_GBps);
    double factor = 1.0;
    if (c.op == "all_reduce") factor = busbw_factor(CollectiveKind::kAllReduce, 2);  // 2(n-1)/n = 1
    if (c.op == "all_gather") factor = busbw_factor(CollectiveKind::kAllGather, 2);  // (n-1)/n = 0.5
    if (c.op == "reduce_scatter") factor = busbw_factor(CollectiveKind::kReduceScatter, 2);
    EXPECT_DOUBLE_EQ(c.busbw_GBps, c.algbw_GBps * factor) << c.op << " " << c.bytes;
  }
  EXPECT_EQ(ops, (std::set<std::string>{"all_gather", "all_reduce", "reduce_scatter", "send_recv"}));
  // 8 B .. 64 KiB doubling (8 B is one fp32 per rank).
  EXPECT_EQ(db.collectives().size(), 4u * 14u);
}

// OPENBLAS_NUM_THREADS, which train honours, sets the threads the kernels are timed with, and the
// database records them (its device id ends in -1t), so the profile matches the live run.
TEST_F(ProfileCli, TimesWithTheThreadsOpenBlasIsToldToUse) {
  const fs::path db_file = dir_ / "one-thread.json";
  const testing::CliResult r = testing::run_cli_command(
      "OPENBLAS_NUM_THREADS=1 " + std::string(TRAINTWIN_BINARY) + " profile " + scenario_ +
      " --warmup 0 --repeats 1 --min-time 0 --out " + db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(1 GEMM thread(s) per rank)"));
  const CostDatabase db = CostDatabase::load(db_file);
  ASSERT_TRUE(db.device().threads.has_value());
  EXPECT_EQ(*db.device().threads, 1);
  EXPECT_THAT(exec::cpu::device_id(db.device()), ::testing::EndsWith("-1t"));
  const testing::CliResult bad = testing::run_cli_command(
      "OPENBLAS_NUM_THREADS=lots " + std::string(TRAINTWIN_BINARY) + " profile " + scenario_ +
      " --out " + db_file.string());
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.output, HasSubstr("OPENBLAS_NUM_THREADS=lots: expected a positive integer"));
}

TEST_F(ProfileCli, UnderMpirunEveryRankTimesTheKernelsTogether) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun";
  const fs::path db_file = dir_ / "two.json";
  const testing::CliResult r = testing::run_mpi_cli(
      2, "profile " + scenario_ + " --set cluster.num_gpus=2 --warmup 1 --repeats 3 --min-time 0 --out " +
             db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("on 2 ranks at once"));
  const CostDatabase db = CostDatabase::load(db_file);
  EXPECT_EQ(db_keys(db), program_keys({{"cluster.num_gpus", "2"}}));
  EXPECT_EQ(*db.device().threads, exec::cpu::gemm_threads_for(2));
}

// PP 2 under mpirun: a kernel of one stage only (the loss on the last, the embedding on the
// first) is timed by that stage's rank, and rank 0 still writes its row from the figures it
// receives.
TEST_F(ProfileCli, UnderMpirunEachStageTimesItsOwnKernels) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun";
  const fs::path db_file = dir_ / "pp.json";
  const testing::CliResult r = testing::run_mpi_cli(
      2, "profile " + scenario_ + " --num-gpus 2 --pipeline-model-parallel-size 2 --warmup 1 "
         "--repeats 3 --min-time 0 --out " + db_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("each kernel on the ranks of the pipeline stages that run it"));
  const CostDatabase db = CostDatabase::load(db_file);
  EXPECT_EQ(db_keys(db), program_keys({{"cluster.num_gpus", "2"},
                                       {"parallelism.pipeline_model_parallel_size", "2"}}));
  for (const KernelMeasurement& m : db.kernels()) {
    EXPECT_EQ(m.samples, 3) << m.key.to_string();
    EXPECT_GT(m.median_us, 0) << m.key.to_string();
    ASSERT_TRUE(m.mean_us.has_value()) << m.key.to_string();
    EXPECT_GT(*m.mean_us, 0) << m.key.to_string();
    EXPECT_LE(m.p10_us, m.median_us);
    EXPECT_LE(m.median_us, m.p90_us);
  }
  EXPECT_THAT(db_keys(db), ::testing::Contains(HasSubstr("cross_entropy_bwd")));
  // The table's last column: the ranks that timed the row (the loss: the last stage's only; a
  // layer GEMM: both).
  const std::regex loss(R"(\ncross_entropy_bwd\[[^\n]* 1\n)"), gemm(R"(\ngemm_fwd\[[^\n]* 2\n)");
  EXPECT_TRUE(std::regex_search(r.output, loss)) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, gemm)) << r.output;
}

TEST_F(ProfileCli, TopologyOutDescribesThisHostWithTheDatabaseDevice) {
  const fs::path db_file = dir_ / "cpu.json", topo_file = dir_ / "local.yaml";
  const testing::CliResult r =
      profile("--threads 1 --out " + db_file.string() + " --topology-out " + topo_file.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const TopologySpec topo = load_topology(topo_file);
  const CostDatabase db = CostDatabase::load(db_file);
  EXPECT_EQ(topo.gpu.name, exec::cpu::device_id(db.device()));
  EXPECT_EQ(topo.node.gpus_per_node, exec::cpu::host_cores());  // one rank per core at 1 thread
  double best_gemm = 0;
  for (const KernelMeasurement& m : db.kernels()) {
    if (m.key.name.rfind("gemm_", 0) == 0) best_gemm = std::max(best_gemm, m.flops / (m.median_us * 1e-6));
  }
  // The topology file writes TFLOP/s with 6 decimals: half a unit of that (5e5 FLOP/s) is 2.6e-5
  // of a one-thread GEMM at 19 GFLOP/s, more than the relative 1e-5.
  EXPECT_NEAR(topo.gpu.peak.fp32_FLOPs, best_gemm, 1e-5 * best_gemm + 0.5e-6 * 1e12);
  EXPECT_GT(topo.gpu.hbm_bandwidth_Bps, 0);
}

}  // namespace
}  // namespace traintwin
