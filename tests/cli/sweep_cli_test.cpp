// End-to-end tests of `traintwin sweep`: a small sweep over a shipped scenario, its files, and
// the errors a user sees for bad flag values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "run_cli.hpp"
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

using Result = traintwin::testing::CliResult;
Result run(const std::string& args) { return traintwin::testing::run_cli(args); }

const std::string kScenario = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-1.3b-h100-8.yaml";

TEST(SweepCli, SmallSweepPrintsARankedTableAndWritesJsonAndCsv) {
  const fs::path dir =
      fs::temp_directory_path() / ("traintwin-sweep-cli-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // 3 x 2 x 2 = 12 configurations; TP 3 is invalid (8 GPUs), SP on needs TP > 1.
  const Result r = run("sweep " + kScenario +
                       " --tensor-model-parallel-size 1,2,3 --micro-batch-size 1,2"
                       " --sequence-parallel off,on --jobs 2 --out " +
                       dir.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("traintwin sweep: gpt-1.3b-h100-8 on 8 x H100"),
                    HasSubstr("12 configurations: 6 ranked, 0 out of memory, 0 failed, 6 invalid"),
                    HasSubstr("rank"), HasSubstr("tok/s/GPU"), HasSubstr("MFU %"),
                    HasSubstr("fits"), HasSubstr("invalid (6), by rule:"),
                    HasSubstr("sequence_parallel"), HasSubstr("cluster.num_gpus"),
                    HasSubstr("configurations, "), HasSubstr("12 configurations")));
  // Progress bar on stderr: count and rate.
  EXPECT_THAT(r.output, HasSubstr("6/6 configurations"));
  // Ranks 1..6 in the table.
  for (int k = 1; k <= 6; ++k)
    EXPECT_THAT(r.output, HasSubstr("\n   " + std::to_string(k) + "   "));

  std::ifstream jf(dir / "sweep.json");
  ASSERT_TRUE(jf) << "no sweep.json";
  const auto file = nlohmann::json::parse(jf);
  EXPECT_EQ(file["schema_version"], 2);
  const auto& j = file["rows"];
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 12u);
  double previous = 1e300;
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(j[k]["rank"], k + 1);
    EXPECT_EQ(j[k]["status"], "ranked");
    const double tokens = j[k]["metrics"]["tokens_per_s"].get<double>();
    EXPECT_LE(tokens, previous);
    previous = tokens;
    for (const char* key : {"iteration_time_s", "mfu", "hfu", "tokens_per_s_per_gpu",
                            "peak_memory_bytes", "exposed_comm_s", "busiest_links", "per_stage"}) {
      EXPECT_TRUE(j[k]["metrics"].contains(key)) << key;
    }
  }
  for (int k = 6; k < 12; ++k) EXPECT_EQ(j[k]["status"], "invalid");

  std::ifstream cf(dir / "sweep.csv");
  ASSERT_TRUE(cf) << "no sweep.csv";
  std::string line, header;
  std::getline(cf, header);
  EXPECT_THAT(header, AllOf(HasSubstr("configuration.tensor_model_parallel_size"),
                            HasSubstr("metrics.tokens_per_s"), HasSubstr("memory.excess_bytes")));
  int lines = 0;
  while (std::getline(cf, line)) ++lines;
  EXPECT_EQ(lines, 12);
  fs::remove_all(dir);
}

// The CP and FP8 axes on the Llama 3.1 8B scenario: CP 1, 2, 4 x FP8 off/on, all valid on 8 H100;
// the table has CP and FP8 columns and FP8 on ranks above off at the same CP.
TEST(SweepCli, ContextParallelAndFp8Axes) {
  const std::string llama =
      std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/llama3.1-8b-h100-8.yaml";
  const Result r = run("sweep " + llama +
                       " --context-parallel-size 1,2,4 --fp8 off,on --mode analytical --jobs 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("6 configurations: "), HasSubstr(" CP "),
                              HasSubstr(" FP8 ")));
  // FP8 on A100 is refused before any simulation.
  const std::string a100 = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-22b-a100-8.yaml";
  const Result bad = run("sweep " + a100 + " --fp8 on --mode analytical");
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.output, HasSubstr("A100-SXM-80GB has no FP8 tensor cores"));
}

// A scaling study from the command line: the GPU counts in the header and the ranked table, the
// batch rule, and per count the best layout with the days and GPU-hours of a token budget,
// checked against its own tokens/s: days = tokens / (tokens/s) / 86400.
TEST(SweepCli, ScalingStudyOverGpuCounts) {
  const std::string llama = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/llama3.1-70b-h100-64.yaml";
  const Result r =
      run("sweep " + llama +
          " --num-gpus 64,128 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4,8"
          " --global-batch-size-per-dp 16 --train-tokens 1T --mode analytical --jobs 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("on 64,128 x H100"), HasSubstr("  GPUs  TP"),
                    HasSubstr("global batch: 16 per data-parallel replica (B = 16 x DP)"),
                    HasSubstr("scaling: the best ranked layout per GPU count, 1.00T tokens")));
  std::istringstream lines(r.output.substr(r.output.find("scaling:")));
  std::string line;
  std::getline(lines, line);  // title
  std::getline(lines, line);  // header
  for (const int64_t gpus : {64, 128}) {
    ASSERT_TRUE(std::getline(lines, line));
    std::istringstream row(line);
    int64_t n = 0, batch = 0;
    double iter = 0, per_gpu = 0, mfu = 0, days = 0;
    std::string tokens_per_s, gpu_hours;
    row >> n >> batch >> iter >> tokens_per_s >> per_gpu >> mfu >> days >> gpu_hours;
    EXPECT_EQ(n, gpus);
    EXPECT_EQ(batch % 16, 0);
    EXPECT_NEAR(days, 1e12 / (per_gpu * static_cast<double>(gpus)) / 86400.0, 0.1 + 0.002 * days);
  }
  const Result bad = run("sweep " + llama + " --num-gpus 64 --train-tokens lots --mode analytical");
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.output, HasSubstr("--train-tokens: expected a token count > 0"));
}

TEST(SweepCli, ExpertParallelAxesShowInTheTable) {
  const std::string mixtral =
      std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/mixtral-8x7b-h100-64.yaml";
  const Result r = run("sweep " + mixtral +
                       " --expert-model-parallel-size 4,8 --expert-tensor-parallel-size 1 "
                       "--mode analytical --jobs 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("2 configurations: 2 ranked"), HasSubstr(" EP ETP ")));
  // The two rows differ in EP (column after DP 16): "  16   4   1 " and "  16   8   1 ".
  EXPECT_THAT(r.output, AllOf(HasSubstr("  16   4   1 "), HasSubstr("  16   8   1 ")));
}

// A sweep in which no configuration ranks because every one failed to simulate has no answer:
// the report lists the failures, then the command exits 2 naming the first. The analytical
// estimator refuses a topology with link or switch overrides, so every point of this sweep fails.
TEST(SweepCli, NoConfigurationRankedBecauseAllFailedExitsTwo) {
  const std::string spine_down =
      std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/dgx-h100-superpod-spine-down.yaml";
  const Result r = run("sweep " + kScenario + " --micro-batch-size 1,2 --mode analytical --jobs 1" +
                       " --set cluster.topology=" + spine_down);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("2 configurations: 0 ranked, 0 out of memory, 2 failed"),
                              HasSubstr("failed (2):"),
                              HasSubstr("sweep: no configuration ranked: 2 of 2 failed to "
                                        "simulate (listed above), e.g. "),
                              HasSubstr("link_overrides")));
  // The same sweep replayed ranks both points and exits 0.
  const Result replayed = run("sweep " + kScenario + " --micro-batch-size 1,2 --mode simulate" +
                              " --jobs 1 --set cluster.topology=" + spine_down);
  EXPECT_EQ(replayed.status, 0) << replayed.output;
  EXPECT_THAT(replayed.output, HasSubstr("2 configurations: 2 ranked"));
}

TEST(SweepCli, PipelineScheduleAxisRanksTheSchedules) {
  // GPT-1.3B on PP 2 with 4 micro-batches: the zero-bubble schedules fill 1F1B's bubble with
  // W's, so both rank above it; the table gets a schedule column.
  const std::string pp2 = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-1.3b-h200-8.yaml";
  const Result r =
      run("sweep " + pp2 + " --pipeline-schedule 1f1b,zb-h1,zb-h2 --mode analytical --jobs 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("3 configurations: 3 ranked"), HasSubstr(" schedule ")));
  const auto row_of = [&](const std::string& schedule) {
    return r.output.find(" " + schedule + " ");
  };
  ASSERT_NE(row_of("1f1b"), std::string::npos);
  EXPECT_LT(row_of("zb-h1"), row_of("1f1b"));
  EXPECT_LT(row_of("zb-h2"), row_of("1f1b"));
  const Result bad = run("sweep " + pp2 + " --pipeline-schedule 1f1b,zb-x");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--pipeline-schedule: 'zb-x' is not allowed (allowed: gpipe, "
                                    "1f1b, zb-h1, zb-h2"));
}

// The sharding axis: DDP-free plain layout (the scenario's distributed optimizer, ZeRO-1) and
// Megatron-FSDP's ZeRO-1, ZeRO-2 and ZeRO-3 ranked in one table with a ZeRO column; the FSDP rows
// say they turned use_megatron_fsdp on; sweep.csv has the strategy column.
TEST(SweepCli, DataParallelShardingStrategyAxisRanksZeroStages) {
  const fs::path dir = fs::temp_directory_path() / "traintwin-sweep-sharding";
  fs::remove_all(dir);
  const Result r = run("sweep " + kScenario +
                       " --data-parallel-sharding-strategy no_shard,optim,optim_grads,"
                       "optim_grads_params --mode analytical --jobs 1 --out " + dir.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("4 configurations: 4 ranked, 0 out of memory, 0 failed"),
                    HasSubstr(" ZeRO "), HasSubstr(" ZeRO-2 "), HasSubstr(" ZeRO-1 "),
                    HasSubstr(" ZeRO-3 "),
                    HasSubstr("3 x training.use_megatron_fsdp: false -> true")));
  std::ifstream csv(dir / "sweep.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_THAT(header, HasSubstr("configuration.data_parallel_sharding_strategy"));
  // --mode auto replays the top K of the estimates, ZeRO-3 among them: with K = 4 all three are
  // ranked, ZeRO-3 no faster than ZeRO-2.
  const fs::path auto_dir = fs::temp_directory_path() / "traintwin-sweep-sharding-auto";
  fs::remove_all(auto_dir);
  const Result a = run("sweep " + kScenario +
                       " --data-parallel-sharding-strategy optim,optim_grads,optim_grads_params"
                       " --mode auto --top 4 --jobs 1 --out " + auto_dir.string());
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_THAT(a.output, AllOf(HasSubstr("3 configurations: 3 ranked"), HasSubstr(" ZeRO-3 ")));
  std::ifstream in(auto_dir / "sweep.json");
  const auto rows = nlohmann::json::parse(in)["rows"];
  double zero2 = 0, zero3 = 0;
  for (const auto& row : rows) {
    const int stage = row["configuration"]["zero_stage"];
    EXPECT_FALSE(row["metrics"].contains("mode")) << "analytical, not replayed: stage " << stage;
    if (stage == 2) zero2 = row["metrics"]["tokens_per_s"];
    if (stage == 3) zero3 = row["metrics"]["tokens_per_s"];
  }
  EXPECT_GT(zero3, 0);
  EXPECT_LE(zero3, zero2);
  // The HSDP axis: DP 8 in 1 or 2 instances ranks both (ZeRO-1/2 = 2 replicas); 3 does not
  // divide DP x CP = 8 and is invalid by the rule.
  const Result h = run("sweep " + kScenario +
                       " --num-distributed-optimizer-instances 1,2,3 --mode analytical --jobs 1");
  ASSERT_EQ(h.status, 0) << h.output;
  EXPECT_THAT(h.output, AllOf(HasSubstr("3 configurations: 2 ranked"), HasSubstr("1 invalid"),
                              HasSubstr(" ZeRO-1/2 "),
                              HasSubstr("training.num_distributed_optimizer_instances: 3 does "
                                        "not divide")));
  const Result bad = run("sweep " + kScenario + " --data-parallel-sharding-strategy zero2");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--data-parallel-sharding-strategy: 'zero2' is not allowed "
                                    "(allowed: no_shard, optim, optim_grads, optim_grads_params"));
}

// The optimizer offload axis: GPT-1.3B on 8 H100 (the DGX's PCIe Gen5 host link) with its
// optimizer state offloaded or not, ranked in one table with a ZeRO column ("ZeRO-1+off"); the
// offload costs host-link copies and the host CPU's step, so the row without it ranks first and
// the offloaded row reports exposed offload time. sweep.csv has the offload column. A topology
// without gpu.host_link (DGX A100 here) refuses the axis by its flag before any simulation.
TEST(SweepCli, OptimizerCpuOffloadAxisRanksOffloadedLayouts) {
  const fs::path dir = fs::temp_directory_path() / "traintwin-sweep-offload";
  fs::remove_all(dir);
  const Result r = run("sweep " + kScenario +
                       " --optimizer-cpu-offload off,on --mode analytical --jobs 1 --out " +
                       dir.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("2 configurations: 2 ranked"), HasSubstr(" ZeRO "),
                              HasSubstr(" ZeRO-1+off ")));
  std::ifstream csv(dir / "sweep.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_THAT(header, AllOf(HasSubstr("configuration.optimizer_cpu_offload"),
                            HasSubstr("metrics.exposed_offload_s")));
  std::ifstream in(dir / "sweep.json");
  const auto rows = nlohmann::json::parse(in)["rows"];
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    const bool offloaded = row["configuration"]["optimizer_cpu_offload"];
    EXPECT_EQ(row["rank"], offloaded ? 2 : 1);
    if (offloaded) {
      EXPECT_GT(row["metrics"]["exposed_offload_s"].get<double>(), 0);
    } else {
      EXPECT_EQ(row["metrics"]["exposed_offload_s"].get<double>(), 0);
    }
  }
  const std::string a100 =
      " --set cluster.topology=" + std::string(TRAINTWIN_SOURCE_DIR) +
      "/topologies/dgx-a100-superpod.yaml";
  const Result bad = run("sweep " + kScenario + a100 + " --optimizer-cpu-offload off,on --jobs 1");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_THAT(bad.output, AllOf(HasSubstr("--optimizer-cpu-offload on: "),
                                HasSubstr("training.optimizer_cpu_offload"),
                                HasSubstr("gives no gpu.host_link")));
  // Without the offload value the A100 sweep runs.
  const Result off = run("sweep " + kScenario + a100 +
                         " --optimizer-cpu-offload off --mode analytical --jobs 1");
  EXPECT_EQ(off.status, 0) << off.output;
}

TEST(SweepCli, OutOfMemoryConfigurationsAreListedWithTheirExcess) {
  // A 1.3B model with a global batch that allows large micro-batches: mbs 32 without
  // recomputation does not fit 80 GB.
  const Result r = run("sweep " + kScenario + " --micro-batch-size 1,32 --jobs 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("1 ranked, 1 out of memory"), HasSubstr("out of memory (1"),
                              HasSubstr("OOM by "), HasSubstr("mbs 32")));
}

TEST(SweepCli, BadFlagValuesNameTheFlagAndTheAllowedValues) {
  Result r = run("sweep " + kScenario + " --sequence-parallel yes");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--sequence-parallel: 'yes' is not allowed (allowed: on, off"));
  r = run("sweep " + kScenario + " --tensor-model-parallel-size 1,0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("--tensor-model-parallel-size: '0'"), HasSubstr("integers >= 1")));
  r = run("sweep " + kScenario + " --recompute-granularity none,partial");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("allowed: none, selective, full"));
  r = run("sweep " + kScenario + " --jobs 0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--jobs"));
}

}  // namespace

namespace traintwin {
namespace {

// The analytical mode ranks in-process; auto replays the top K with the simulator, whose
// iteration time then appears in sweep.json with "mode" absent (replayed) for those rows.
// Megatron's uneven-split flags apply to every swept layout: 22 layers + embedding + loss = 24
// split over PP 2, 4 and 8 (without the flags only PP 2 divides 22).
TEST(SweepCli, PipelineSplitFlagsApplyToEveryLayout) {
  const std::string sweep = "sweep " + kScenario +
                            " --set model.num_layers=22 --pipeline-model-parallel-size 2,4,8"
                            " --mode analytical";
  const Result even = run(sweep);
  ASSERT_EQ(even.status, 0) << even.output;
  EXPECT_THAT(even.output, AllOf(HasSubstr("3 configurations: 1 ranked"),
                                 HasSubstr("2 invalid"), HasSubstr("model.num_layers")));
  const Result uneven = run(sweep +
                            " --account-for-embedding-in-pipeline-split"
                            " --account-for-loss-in-pipeline-split");
  ASSERT_EQ(uneven.status, 0) << uneven.output;
  EXPECT_THAT(uneven.output, HasSubstr("3 configurations: 3 ranked"));
  const Result twice = run(sweep +
                           " --decoder-first-pipeline-num-layers 2"
                           " --set parallelism.decoder_first_pipeline_num_layers=4");
  EXPECT_EQ(twice.status, 2);
  EXPECT_THAT(twice.output,
              HasSubstr("parallelism.decoder_first_pipeline_num_layers is given twice"));
}

TEST(SweepCli, AnalyticalAndAutoModes) {
  const std::string scenario = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-1.3b-h100-8.yaml";
  const Result a = run("sweep " + scenario + " --micro-batch-size 1,2,4 --mode analytical");
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_THAT(a.output, HasSubstr("3 ranked"));
  const auto dir = std::filesystem::temp_directory_path() / "traintwin-sweep-auto";
  std::filesystem::remove_all(dir);
  const Result b = run("sweep " + scenario + " --micro-batch-size 1,2,4 --mode auto --top 1 --out " + dir.string());
  ASSERT_EQ(b.status, 0) << b.output;
  std::ifstream in(dir / "sweep.json");
  const auto rows = nlohmann::json::parse(in)["rows"];
  ASSERT_EQ(rows.size(), 3u);
  int analytical = 0;
  for (const auto& row : rows) analytical += row["metrics"].contains("mode");
  EXPECT_EQ(analytical, 2);  // the top one was replayed
  EXPECT_THAT(run("sweep " + scenario + " --mode guess").output, HasSubstr("--mode"));
}

}  // namespace
}  // namespace traintwin

namespace traintwin {
namespace {

// `mpirun -np 2 traintwin sweep ...` splits the configurations over the ranks and rank 0 prints
// the same ranked table as a single process.
TEST(SweepCli, SplitsOverMpiRanksWithTheSameResult) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  const std::string scenario = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-1.3b-h100-8.yaml";
  const std::string args = " sweep " + scenario + " --micro-batch-size 1,2,4 --tensor-model-parallel-size 1,2 --jobs 1";
  const testing::CliResult single = testing::run_cli(args);
  ASSERT_EQ(single.status, 0) << single.output;
  std::string table;  // stdout: the output without the progress lines (stderr)
  for (size_t pos = 0; pos < single.output.size();) {
    const size_t end = single.output.find('\n', pos);
    const std::string line = single.output.substr(pos, end - pos + 1);
    if (line.rfind("sweep [", 0) != 0) table += line;
    pos = end == std::string::npos ? single.output.size() : end + 1;
  }
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(
      popen((testing::kMpirunEnvironment + "mpirun --allow-run-as-root --oversubscribe -np 2 " +
             std::string(TRAINTWIN_BINARY) + args +
             " 2>/dev/null").c_str(), "r"),
      pclose);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
  EXPECT_EQ(WEXITSTATUS(pclose(pipe.release())), 0) << out;
  EXPECT_EQ(out, table);
  EXPECT_THAT(out, HasSubstr("6 ranked"));
}

// A TP group larger than the GPUs a job uses per NVLink domain (8 on a DGX H100 node) is listed
// as invalid with the rule, as simulate refuses it; on a GB200 NVL72 rack (64 used) TP 8 ranks.
TEST(SweepCli, TpLargerThanTheNvlinkDomainIsInvalid) {
  const Result h100 = run("sweep " + std::string(TRAINTWIN_SOURCE_DIR) +
                          "/scenarios/gpt3-175b-h100-128.yaml --tensor-model-parallel-size 8,16 "
                          "--pipeline-model-parallel-size 8 --mode analytical");
  ASSERT_EQ(h100.status, 0) << h100.output;
  EXPECT_THAT(h100.output,
              AllOf(HasSubstr("2 configurations: 1 ranked, 0 out of memory, 0 failed, 1 invalid"),
                    HasSubstr("parallelism.tensor_model_parallel_size: 16 exceeds the NVLink "
                              "domain: the job uses 8 GPUs per domain")));
  const Result gb200 = run("sweep " + std::string(TRAINTWIN_SOURCE_DIR) +
                           "/scenarios/llama3.1-405b-gb200-256.yaml --tensor-model-parallel-size "
                           "4,8 --pipeline-model-parallel-size 8 --mode analytical");
  ASSERT_EQ(gb200.status, 0) << gb200.output;
  EXPECT_THAT(gb200.output,
              HasSubstr("2 configurations: 2 ranked, 0 out of memory, 0 failed, 0 invalid"));
}

}  // namespace
}  // namespace traintwin
