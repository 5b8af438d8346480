// The closed loop on a tiny model, end to end: profile (kernels, and the collectives under
// mpirun) into a database, this host's topology, validate --live in one process and on two
// ranks (DP 2 under mpirun), and simulate --costs-from-timeline replaying the recorded live run.
// The prediction must use measured costs (share >= 0.99) and land within a loose bound: this is a
// shared 2-core machine (load averages of 8 were seen while other builds ran, which slows the
// live run and not the short profiled kernels: -30 % to -90 % errors), so the bound is a factor
// of 3 of the fastest live iteration in one process (two ranks: printed only): it catches a lost
// op class, a unit slip (x1000) or double counting, while
// bench/twin_accuracy.sh carries the real target (5 %) on a quiet machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "exec/cpu/host_device.hpp"
#include "tests/cli/run_cli.hpp"
#include "tests/tiny_training.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class ValidateLiveCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("traintwin-validate-live-" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_ / "topologies");
    fs::create_directories(*dir_ / "traces" / "db");
    scenario_ = new std::string(testing::write_tiny_scenario(*dir_, (*dir_ / "none").string()));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete scenario_;
  }

  /// Profiles the tiny scenario for `ranks` ranks on this host into traces/db/<device>.json and
  /// writes topologies/local-<ranks>.yaml; returns the topology path. One GEMM thread per rank
  /// (kThreads): two OpenBLAS threads on two loaded cores stall each other for whole scheduler
  /// slices, which made a profiled GEMM median 50x too long once.
  static std::string profile(int ranks) {
    const int threads = kThreads;
    const fs::path db = *dir_ / "traces" / "db" /
                        (exec::cpu::device_id(exec::cpu::host_device(threads)) + ".json");
    const fs::path topo = *dir_ / "topologies" / ("local-" + std::to_string(ranks) + ".yaml");
    if (ranks > 1) {
      const testing::CliResult c = testing::run_mpi_cli(
          ranks, "profile --collectives -e 1M --warmup 2 --repeats 5 --threads 1 --out " + db.string());
      EXPECT_EQ(c.status, 0) << c.output;
    }
    const testing::CliResult r = testing::run_cli(
        "profile " + *scenario_ + " --set cluster.num_gpus=" + std::to_string(ranks) +
        " --threads 1 --warmup 2 --repeats 20 --out " + db.string() + " --topology-out " +
        topo.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return topo.string();
  }

  static nlohmann::json summary(const std::string& output) {
    const auto pos = output.rfind("json ");
    if (pos == std::string::npos) return {};
    return nlohmann::json::parse(output.substr(pos + 5, output.find('\n', pos) - pos - 5));
  }

  /// `factor`: the loose bound on predicted / fastest live iteration (see the file comment); 0:
  /// printed, not checked.
  static void expect_close_with_measured_costs(const testing::CliResult& r, double factor) {
    ASSERT_EQ(r.status, 0) << r.output;
    const nlohmann::json j = summary(r.output);
    ASSERT_TRUE(j.contains("predicted_iteration_s")) << r.output;
    EXPECT_GE(j["measured_share"].get<double>(), 0.99) << r.output;
    const double ratio =
        j["predicted_iteration_s"].get<double>() / j["live_fastest_iteration_s"].get<double>();
    if (factor > 0) EXPECT_LT(std::abs(std::log(ratio)), std::log(factor)) << r.output;
    std::printf("predicted / fastest live iteration: %.3f (error vs median %+.1f %%)\n", ratio,
                100 * j["error"].get<double>());
    for (const char* cls : {"GEMM", "attention", "elementwise", "optimizer", "compute",
                            "pipeline bubble and waits"}) {
      EXPECT_THAT(r.output, HasSubstr(cls));
    }
    // The per-kernel table (--kernels, 10 rows by default): the tiny model's 20-odd kernels, so
    // ten rows, GEMMs among them, each with its calls per iteration.
    EXPECT_THAT(r.output, HasSubstr("the 10 kernels with the largest difference"));
    const std::regex gemm_row(R"(\ngemm_(fwd|dgrad|wgrad)\[[^\n]*fp32 tp1 +[0-9]+ +[0-9.]+ +[0-9.]+ )");
    EXPECT_TRUE(std::regex_search(r.output, gemm_row)) << r.output;
  }

  static constexpr int kThreads = 1;
  static fs::path* dir_;
  static std::string* scenario_;
};

fs::path* ValidateLiveCli::dir_ = nullptr;
std::string* ValidateLiveCli::scenario_ = nullptr;

TEST_F(ValidateLiveCli, OneProcessPredictionUsesMeasuredCostsAndReplaysItsTimeline) {
  const std::string topo = profile(1);
  const fs::path live = *dir_ / "live.json";
  const testing::CliResult r = testing::run_cli(
      "validate --live " + *scenario_ + " --threads 1 --topology " + topo +
      " --iterations 10 --timeline " +
      live.string());
  expect_close_with_measured_costs(r, 3.0);
  // The recorded run replayed at another scale (DP 2: both ranks of this host's node): every
  // kernel cost from the live timeline.
  const testing::CliResult s = testing::run_cli(
      "simulate " + *scenario_ + " --set cluster.num_gpus=2 --set cluster.topology=" + topo +
      " --costs-from-timeline " + live.string());
  ASSERT_EQ(s.status, 0) << s.output;
  EXPECT_THAT(s.output, HasSubstr("compute costs      measured 100.0 %"));
  // And on another topology and scale: scaled from the recorded device.
  const testing::CliResult h = testing::run_cli(
      "simulate " + *scenario_ + " --set cluster.num_gpus=8 --global-batch-size 16 --cost-db-topology " +
      topo + " --costs-from-timeline " + live.string());
  ASSERT_EQ(h.status, 0) << h.output;
  EXPECT_THAT(h.output, HasSubstr("compute costs      scaled 100.0 %"));
}

TEST_F(ValidateLiveCli, DataParallelOnTwoRanksUnderMpirun) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string topo = profile(2);
  const testing::CliResult r = testing::run_mpi_cli(
      2, "validate --live " + *scenario_ + " --num-gpus 2 --threads 1 --topology " + topo +
             " --iterations 10");
  // Two ranks busy-polling MPI on two shared cores suffer any other load most: 0.28 to 0.32 at
  // load 6-8, 0.12 beside another test under ctest -j2. Only the measured share and the op
  // classes are checked here; the one-process test carries the loose bound.
  expect_close_with_measured_costs(r, 0.0);
  EXPECT_THAT(r.output, HasSubstr("dp-cp all_reduce"));
}

// The Megatron-LM flags reach the --live scenario (TP 2 makes it a 2-rank job, which one process
// refuses naming mpirun), and are refused without --live (a calibration file's cases carry their
// own layouts).
TEST_F(ValidateLiveCli, TakesTheParallelismFlagsOfTheOtherCommands) {
  const testing::CliResult tp = testing::run_cli("validate --live " + *scenario_ +
                                                 " --tensor-model-parallel-size 2 --num-gpus 2");
  EXPECT_NE(tp.status, 0);
  EXPECT_THAT(tp.output, HasSubstr("2 ranks: run validate --live under mpirun -np 2"));
  const fs::path calibration = *dir_ / "calibration.yaml";
  std::ofstream(calibration) << "cases: []\n";
  const testing::CliResult cal = testing::run_cli("validate " + calibration.string() +
                                                  " --pipeline-model-parallel-size 2");
  EXPECT_NE(cal.status, 0);
  EXPECT_THAT(cal.output, HasSubstr("apply to a --live SCENARIO"));
}

TEST_F(ValidateLiveCli, ATopologyOfAnotherDeviceIsRefusedWithTheFix) {
  const testing::CliResult r = testing::run_cli(
      "validate --live " + *scenario_ + " --topology " + TRAINTWIN_SOURCE_DIR +
      "/topologies/dgx-h100-superpod.yaml");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("gpu.name is H100-SXM-80GB"));
  EXPECT_THAT(r.output, HasSubstr("--topology-out"));
}

TEST_F(ValidateLiveCli, ATimelineWithoutKernelDurationsIsRefused) {
  const fs::path sim_dir = *dir_ / "sim";
  const std::string cluster = " --set cluster.num_gpus=8 --global-batch-size 16 ";
  const testing::CliResult sim =
      testing::run_cli("simulate " + *scenario_ + cluster + "--out " + sim_dir.string());
  ASSERT_EQ(sim.status, 0) << sim.output;
  const testing::CliResult r = testing::run_cli("simulate " + *scenario_ + cluster +
                                                "--costs-from-timeline " +
                                                (sim_dir / "timeline.json").string());
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("not a live timeline"));
}

}  // namespace
}  // namespace traintwin
