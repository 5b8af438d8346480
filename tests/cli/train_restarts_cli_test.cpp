// `traintwin train --fault-inject SPEC` and the elastic agent (`--max-restarts N --nproc R`,
// exec/elastic_agent.hpp): a rank of the tiny model's 2-rank job kills (or stops) itself in
// iteration 3; the agent relaunches the job from the checkpoint of iteration 2 (save_interval 2)
// and the resumed run ends with the same losses and the same checkpoint files, byte for byte, as
// a run that was never interrupted. Also: the spec's parsing, the per-launch spec, the seeded
// draws of random faults, the accounting of one launch from its log lines, and a stop signal
// forwarded to the launch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/elastic_agent.hpp"
#include "exec/fault_injection.hpp"
#include "tests/cli/run_cli.hpp"
#include "tests/mpi_child_run.hpp"
#include "tests/tiny_training.hpp"

namespace traintwin {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

/// The message of the ConfigError parse_fault_spec throws for `spec` ("" if none).
std::string spec_error(const std::string& spec) {
  try {
    exec::parse_fault_spec(spec);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(FaultSpec, ParsesChosenAndRandomFaultsAndReadsItsOwnTextBack) {
  const exec::FaultSpec a = exec::parse_fault_spec("rank=1,iteration=3,kind=kill");
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.iteration, 3);
  EXPECT_EQ(a.kind, exec::FaultKind::kKill);
  EXPECT_EQ(a.attempt, 0);
  EXPECT_FALSE(a.random());
  const exec::FaultSpec b = exec::parse_fault_spec("rate_per_hour=0.25,seed=7,kind=stop");
  EXPECT_TRUE(b.random());
  EXPECT_EQ(b.rate_per_hour, 0.25);
  EXPECT_EQ(b.seed, 7u);
  EXPECT_EQ(b.kind, exec::FaultKind::kStop);
  EXPECT_FALSE(b.rank);
  for (const exec::FaultSpec& s : {a, b}) {
    const exec::FaultSpec back = exec::parse_fault_spec(exec::to_string(s));
    EXPECT_EQ(exec::to_string(back), exec::to_string(s));
    EXPECT_EQ(back.rank, s.rank);
    EXPECT_EQ(back.iteration, s.iteration);
    EXPECT_EQ(back.rate_per_hour, s.rate_per_hour);
    EXPECT_EQ(back.seed, s.seed);
    EXPECT_EQ(back.kind, s.kind);
  }
}

TEST(FaultSpec, BadSpecsAreRefusedWithTheAllowedKeys) {
  const std::map<std::string, std::string> bad = {
      {"rank=1,iteration=3,kind=explode", "kind=explode: expected kill or stop"},
      {"rank=1,iteraton=3", "unknown key 'iteraton' (did you mean iteration?)"},
      {"rank=1", "give iteration or rate_per_hour"},
      {"iteration=3", "a chosen fault (iteration=I) needs rank=R"},
      {"rank=1,iteration=0", "iteration=0: expected a whole number >= 1"},
      {"rank=-1,iteration=2", "rank=-1: expected a whole number >= 0"},
      {"rank=1,iteration=2.5", "iteration=2.5: expected a whole number >= 1"},
      {"rate_per_hour=0", "rate_per_hour=0: expected a number > 0"},
      {"rate_per_hour=-3", "rate_per_hour=-3: expected a number > 0"},
      {"rank=1,iteration=3,rate_per_hour=2", "exclude each other"},
      {"rank=1,rank=2,iteration=3", "key rank given twice"},
      {"rank=1,iteration=3,seed=4", "seed goes with rate_per_hour only"},
      {"kill", "'kill' is not key=value"},
      {"", "'' is not key=value"},
  };
  for (const auto& [spec, why] : bad) {
    const std::string e = spec_error(spec);
    EXPECT_THAT(e, HasSubstr("--fault-inject '" + spec + "'")) << spec;
    EXPECT_THAT(e, HasSubstr(why)) << spec;
    EXPECT_THAT(e, HasSubstr(std::string("allowed keys: ") + exec::fault_spec_keys())) << spec;
  }
}

TEST(FaultSpec, TheInjectorRefusesARankOrIterationOutsideTheJob) {
  const exec::FaultSpec s = exec::parse_fault_spec("rank=2,iteration=3");
  EXPECT_THROW(exec::FaultInjector(s, 0, 2, 6), ConfigError);
  const exec::FaultSpec late = exec::parse_fault_spec("rank=1,iteration=7");
  EXPECT_THROW(exec::FaultInjector(late, 0, 2, 6), ConfigError);
}

TEST(FaultSpec, AChosenFaultFiresOnceOnItsRankAtItsIteration) {
  const exec::FaultSpec s = exec::parse_fault_spec("rank=1,iteration=3,kind=stop");
  exec::FaultInjector r0(s, 0, 2, 6), r1(s, 1, 2, 6);
  for (int64_t it = 1; it <= 6; ++it) {
    EXPECT_FALSE(r0.at_iteration_end(it, 1.0 * static_cast<double>(it)));
    const std::optional<exec::FaultKind> k = r1.at_iteration_end(it, 1.0 * static_cast<double>(it));
    EXPECT_EQ(k.has_value(), it == 3) << it;
    if (k) EXPECT_EQ(*k, exec::FaultKind::kStop);
  }
  EXPECT_FALSE(r1.at_iteration_end(3, 3.0)) << "fires at most once";
  EXPECT_EQ(r1.describe(3), "fault injection: rank 1 stop (SIGSTOP) at iteration 3 of attempt 0");
}

// Every rank draws the same failure (time and rank) from the seed and the launch, so exactly one
// rank acts; another launch draws anew; the mean of the drawn times is 1 / rate.
TEST(FaultSpec, RandomFaultsAreDrawnFromTheSeedAndTheLaunch) {
  exec::FaultSpec s = exec::parse_fault_spec("rate_per_hour=3600,seed=11");  // one per second
  const int64_t world = 4;
  double sum = 0;
  int differing = 0;
  std::optional<double> previous;
  for (int64_t attempt = 0; attempt < 200; ++attempt) {
    s.attempt = attempt;
    std::vector<exec::FaultInjector> ranks;
    for (int64_t r = 0; r < world; ++r) ranks.emplace_back(s, r, world, 100);
    const double t = *ranks[0].failure_time_s();
    for (const exec::FaultInjector& f : ranks) {
      EXPECT_EQ(f.failure_time_s(), t);
      EXPECT_EQ(f.failing_rank(), ranks[0].failing_rank());
    }
    int fired = 0;
    for (exec::FaultInjector& f : ranks) {
      EXPECT_FALSE(f.at_iteration_end(1, t * 0.999));
      fired += f.at_iteration_end(2, t) ? 1 : 0;
    }
    EXPECT_EQ(fired, 1);
    if (previous && *previous != t) ++differing;
    previous = t;
    sum += t;
  }
  EXPECT_EQ(differing, 199);
  // Exponential with mean 1 s: the mean of 200 draws is within 4 standard errors (1/sqrt(200)).
  EXPECT_NEAR(sum / 200.0, 1.0, 4.0 / std::sqrt(200.0));
}

TEST(ElasticAgent, AChosenFaultGoesOnlyToTheLaunchItNames) {
  exec::ElasticAgentOptions o;
  o.nproc = 2;
  o.program = "/bin/traintwin";
  o.train_args = {"train", "tiny.yaml", "--save", "ck"};
  o.save = "ck";
  o.fault = exec::parse_fault_spec("rank=1,iteration=3");
  const std::vector<std::string> first = exec::launch_command(o, 0);
  const std::vector<std::string> second = exec::launch_command(o, 1);
  EXPECT_EQ(first,
            (std::vector<std::string>{"mpirun", "-np", "2", "/bin/traintwin", "train", "tiny.yaml",
                                      "--save", "ck", "--load", "ck", "--fault-inject",
                                      "rank=1,iteration=3,kind=kill,attempt=0"}));
  EXPECT_EQ(second, (std::vector<std::string>{"mpirun", "-np", "2", "/bin/traintwin", "train",
                                              "tiny.yaml", "--save", "ck", "--load", "ck"}));
  o.fault = exec::parse_fault_spec("rate_per_hour=2,seed=5");
  o.first_load = "pretrained";
  const std::vector<std::string> random0 = exec::launch_command(o, 0);
  const std::vector<std::string> random1 = exec::launch_command(o, 1);
  EXPECT_EQ(random0[9], "pretrained");
  EXPECT_EQ(random1[9], "ck");
  EXPECT_EQ(random0.back(), "rate_per_hour=2,seed=5,kind=kill,attempt=0");
  EXPECT_EQ(random1.back(), "rate_per_hour=2,seed=5,kind=kill,attempt=1");
}

// A failed launch worked by hand: started at 10 s, ready at 12 s after loading the checkpoint of
// iteration 2 in 0.5 s, iterations 3 and 4 of 1 s each, a save at 4 (0.25 s), iteration 5, the
// fault at 16.5 s, mpirun gone at 20 s.
// SIGTERM to the agent (scancel, kill) reaches the launch, whose process group of its own a
// signal to the agent alone never reaches: the agent forwards it, the launch's trap sees it, and
// no restart follows although restarts remain. The previous handler is back afterwards.
TEST(ElasticAgent, AStopSignalIsForwardedToTheLaunchAndEndsTheRun) {
  const fs::path dir = fs::temp_directory_path() / ("elastic-stop-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path launcher = dir / "fake-mpirun";
  {
    std::ofstream f(launcher);
    f << "#!/bin/sh\n"
         "trap 'echo \"fake launch got TERM\"; exit 143' TERM\n"
         "echo \"fake launch up\"\n"
         "sleep 30 & wait $!\n";
  }
  fs::permissions(launcher, fs::perms::owner_all);
  exec::ElasticAgentOptions o;
  o.launcher = launcher.string();
  o.nproc = 1;
  o.max_restarts = 3;
  o.program = "traintwin";
  o.train_args = {"train", "scenario.yaml"};
  o.save = dir / "ckpt";
  std::vector<std::string> lines;
  exec::ElasticAgentCallbacks cb;
  cb.on_output = [&](const exec::TimedLine& l) {
    lines.push_back(l.text);
    if (l.text == "fake launch up") ::kill(::getpid(), SIGTERM);
  };
  struct sigaction before = {};
  ::sigaction(SIGTERM, nullptr, &before);
  const auto start = std::chrono::steady_clock::now();
  const exec::ElasticRunReport r = exec::run_elastic_job(o, cb);
  const double took_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.stopped_by_signal, SIGTERM);
  EXPECT_FALSE(r.completed);
  ASSERT_EQ(r.attempts.size(), 1u);  // no restart, although 3 remained
  EXPECT_EQ(r.attempts[0].exit_status, 143);
  EXPECT_THAT(r.attempts[0].how_ended, HasSubstr("forwarded it to the job; not restarted"));
  EXPECT_THAT(lines, ::testing::Contains("fake launch got TERM"));
  EXPECT_LT(took_s, 20.0);  // the launch's own exit, not its 30 s sleep nor the grace period
  // The agent's handler is gone: the one before it is back.
  struct sigaction now = {};
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, before.sa_handler);
  fs::remove_all(dir);
}

TEST(ElasticAgent, ALaunchIsAccountedFromItsLogLines) {
  const std::vector<exec::TimedLine> lines = {
      {11.9, "resumed from ck at iteration 2 (model built and checkpoint loaded in 500.0 ms)"},
      {12.0, "training tiny on 2 rank(s) (TP 1, PP 1, DP 2, 1 model chunk(s)), iterations 3..6, "},
      {13.0,
       " iteration        3/       6 | consumed samples: 24 | elapsed time per iteration "
       "(ms): 1000.0 | lm loss: 6.5E+00 |"},
      {14.0,
       " iteration        4/       6 | consumed samples: 32 | elapsed time per iteration "
       "(ms): 1000.0 | lm loss: 6.4E+00 |"},
      {14.25, "saved checkpoint at iteration 4 to ck (250.0 ms)"},
      {15.25,
       " iteration        5/       6 | consumed samples: 40 | elapsed time per iteration "
       "(ms): 1000.0 | lm loss: 6.3E+00 |"},
      {16.5, "fault injection: rank 1 kill (SIGKILL) at iteration 5 of attempt 1"},
      {19.0,
       "mpirun noticed that process rank 1 with PID 0 on node host exited on signal 9 "
       "(Killed)."},
  };
  const exec::AttemptReport r = exec::account_attempt(1, 10.0, 20.0, lines, 137);
  EXPECT_FALSE(r.completed);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_THAT(r.how_ended, HasSubstr("rank 1 exited on signal 9 (Killed)"));
  EXPECT_THAT(r.how_ended, HasSubstr("fault injection: rank 1 kill"));
  EXPECT_EQ(r.resumed_from, 2);
  EXPECT_EQ(r.last_iteration, 5);
  EXPECT_EQ(r.last_checkpoint, 4);
  EXPECT_DOUBLE_EQ(r.restore_s, 0.5);
  EXPECT_DOUBLE_EQ(r.restart_s, 12.0 - 10.0 - 0.5);
  EXPECT_DOUBLE_EQ(r.productive_s, 2.0);            // iterations 3 and 4
  EXPECT_DOUBLE_EQ(r.lost_progress_s, 1.0 + 1.25);  // iteration 5 and the partial sixth
  EXPECT_DOUBLE_EQ(r.checkpoint_save_s, 0.25);
  EXPECT_DOUBLE_EQ(r.detection_s, 20.0 - 16.5);
  EXPECT_NEAR(r.other_s, 0.0, 1e-12);
  // Completed, the same lines count every iteration as productive.
  const exec::AttemptReport ok =
      exec::account_attempt(1, 10.0, 20.0, {lines.begin(), lines.begin() + 6}, 0);
  EXPECT_TRUE(ok.completed);
  EXPECT_EQ(ok.how_ended, "completed");
  EXPECT_DOUBLE_EQ(ok.productive_s, 3.0);
  EXPECT_DOUBLE_EQ(ok.lost_progress_s, 0.0);
  EXPECT_DOUBLE_EQ(ok.detection_s, 0.0);
  EXPECT_NEAR(ok.other_s, 20.0 - 10.0 - 3.0 - 1.5 - 0.5 - 0.25, 1e-12);
}

class TrainRestartsCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("traintwin-train-restarts-" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    const std::string prefix = testing::write_synthetic_dataset(*dir_);
    scenario_ =
        new std::string(testing::write_tiny_scenario(*dir_, prefix, "  save_interval: 2\n"));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete scenario_;
  }

  /// `traintwin train` of the tiny scenario for 6 iterations, without mpirun (the elastic agent
  /// runs mpirun itself: Open MPI's variables allow it as root and oversubscribed, as the
  /// other tests' flags do).
  static testing::CliResult agent(const std::string& args) {
    return testing::run_cli_command(testing::kMpirunEnvironment +
                                    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                    "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 300 " +
                                    std::string(TRAINTWIN_BINARY) + " train " + *scenario_ +
                                    " --train-iters 6 " + args);
  }

  /// The uninterrupted 2-rank run (once), saving to dir/straight.
  static const testing::CliResult& straight() {
    static const testing::CliResult r = testing::run_mpi_cli(
        2, "train " + *scenario_ + " --train-iters 6 --save " + (*dir_ / "straight").string());
    return r;
  }

  static fs::path* dir_;
  static std::string* scenario_;
};

fs::path* TrainRestartsCli::dir_ = nullptr;
std::string* TrainRestartsCli::scenario_ = nullptr;

/// (iteration, lm loss) of every iteration line in `out`, in order.
std::vector<std::pair<int64_t, std::string>> losses(const std::string& out) {
  static const std::regex line(R"(iteration +(\d+)/ +\d+ \|.*\| lm loss: ([-+0-9.Ee]+) \|)");
  std::vector<std::pair<int64_t, std::string>> l;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    l.push_back({std::stoll((*it)[1]), (*it)[2]});
  }
  return l;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f) << p;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// The lines of `out` that start with `prefix`, for the test log.
void print_lines(const std::string& out, const std::string& prefix) {
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind(prefix, 0) == 0) std::printf("%s\n", l.c_str());
  }
}

// (a) Rank 1 dies (SIGKILL) at the end of iteration 3; the agent relaunches from the checkpoint
// of iteration 2: iterations 3..6 print the same losses as the run that was never interrupted,
// and the final checkpoint files are the same bytes.
TEST_F(TrainRestartsCli, AKilledRankIsRestartedFromTheCheckpointAndResumesBitExact) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun";
  const testing::CliResult& base = straight();
  ASSERT_EQ(base.status, 0) << base.output;
  const fs::path ck = *dir_ / "restarted";
  const testing::CliResult r = agent("--save " + ck.string() +
                                     " --max-restarts 1 --nproc 2 --fault-inject "
                                     "rank=1,iteration=3,kind=kill");
  ASSERT_EQ(r.status, 0) << r.output;
  print_lines(r.output, "elastic agent:");
  print_lines(r.output, "  ");
  EXPECT_THAT(r.output,
              HasSubstr("fault injection: rank 1 kill (SIGKILL) at iteration 3 of attempt 0"));
  EXPECT_THAT(r.output, HasSubstr("elastic agent: attempt 0 failed"));
  EXPECT_THAT(r.output, HasSubstr("elastic agent: attempt 1 of 2: resuming from the checkpoint "
                                  "at iteration 2"));
  EXPECT_THAT(r.output, HasSubstr("elastic agent: attempt 1 completed"));
  EXPECT_THAT(r.output, HasSubstr("resumed from " + ck.string() + " at iteration 2"));
  EXPECT_THAT(r.output, ContainsRegex("\n  restarts +1\n"));

  const auto want = losses(base.output);
  ASSERT_EQ(want.size(), 6u) << base.output;
  const size_t split = r.output.find("elastic agent: attempt 1 of 2");
  ASSERT_NE(split, std::string::npos);
  const auto first = losses(r.output.substr(0, split)), second = losses(r.output.substr(split));
  ASSERT_GE(first.size(), 2u) << r.output;
  for (const auto& [it, loss] : first)
    EXPECT_EQ(loss, want[static_cast<size_t>(it - 1)].second) << it;
  ASSERT_EQ(second.size(), 4u) << r.output;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(second[i].first, static_cast<int64_t>(3 + i));
    EXPECT_EQ(second[i].second, want[2 + i].second) << "iteration " << 3 + i;
  }
  for (int rank = 0; rank < 2; ++rank) {
    const std::string name = "iter_0000006/rank_0000" + std::to_string(rank) + ".ttckpt";
    const std::string a = file_bytes(*dir_ / "straight" / name), b = file_bytes(ck / name);
    EXPECT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b) << name << " differs from the uninterrupted run's";
  }
}

// (b) Without restarts the same fault ends the run: the error names the attempt and the rank.
TEST_F(TrainRestartsCli, WithoutRestartsTheFaultFailsTheRunNamingTheRank) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun";
  const testing::CliResult r = agent("--save " + (*dir_ / "no-restart").string() +
                                     " --max-restarts 0 --nproc 2 --fault-inject "
                                     "rank=1,iteration=3,kind=kill");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("traintwin: error: the job failed on attempt 0 (the last of 1 + "
                                  "--max-restarts 0), rank 1: rank 1 exited on signal 9"));
  EXPECT_THAT(r.output, Not(HasSubstr("attempt 1 of")));
  EXPECT_THAT(r.output, ContainsRegex("\n  restarts +0\n"));
}

// A stopped rank (SIGSTOP) is found by the others' watchdog (a 3 s distributed timeout), the
// job aborts and the agent restarts it.
TEST_F(TrainRestartsCli, AStoppedRankTripsTheWatchdogAndIsRestarted) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun";
  const testing::CliResult r = agent("--save " + (*dir_ / "stopped").string() +
                                     " --max-restarts 1 --nproc 2 --distributed-timeout-minutes "
                                     "0.05 --fault-inject rank=1,iteration=3,kind=stop");
  ASSERT_EQ(r.status, 0) << r.output;
  print_lines(r.output, "elastic agent:");
  print_lines(r.output, "  ");
  EXPECT_THAT(r.output, HasSubstr("fault injection: rank 1 stop (SIGSTOP) at iteration 3"));
  EXPECT_THAT(r.output, HasSubstr("more than the distributed timeout of 0.05 minutes"));
  EXPECT_THAT(r.output, HasSubstr("elastic agent: attempt 1 completed"));
}

// (c) Bad input, refused before anything runs.
TEST_F(TrainRestartsCli, BadFlagsAreRefusedNamingTheFlag) {
  auto run = [](const std::string& args) {
    return testing::run_cli("train " + *scenario_ + " " + args);
  };
  const testing::CliResult bad_spec = run("--fault-inject rank=1,iteration=3,kind=explode");
  EXPECT_EQ(bad_spec.status, 2);
  EXPECT_THAT(bad_spec.output, HasSubstr("--fault-inject 'rank=1,iteration=3,kind=explode': "
                                         "kind=explode: expected kill or stop (allowed keys:"));
  const testing::CliResult no_save = run("--max-restarts 1 --nproc 2");
  EXPECT_EQ(no_save.status, 2);
  EXPECT_THAT(no_save.output, HasSubstr("--max-restarts needs --save DIR"));
  const testing::CliResult no_nproc = run("--max-restarts 1 --save " + (*dir_ / "x").string());
  EXPECT_EQ(no_nproc.status, 2);
  EXPECT_THAT(no_nproc.output, HasSubstr("--max-restarts needs --nproc R"));
  const testing::CliResult nproc_alone = run("--nproc 2");
  EXPECT_EQ(nproc_alone.status, 2);
  EXPECT_THAT(nproc_alone.output, HasSubstr("--nproc goes with --max-restarts"));
  const testing::CliResult negative = run("--max-restarts -1 --nproc 2 --save x");
  EXPECT_NE(negative.status, 0);
  EXPECT_THAT(negative.output, HasSubstr("--max-restarts"));
  // One process: a fault on a rank the job does not have.
  const testing::CliResult rank = run("--train-iters 3 --fault-inject rank=1,iteration=1");
  EXPECT_EQ(rank.status, 2);
  EXPECT_THAT(rank.output, HasSubstr("rank=1 but the job has 1 rank(s) (allowed: 0..0)"));
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun for the --max-restarts under mpirun case";
  const testing::CliResult under_mpirun = testing::run_mpi_cli(
      1, "train " + *scenario_ + " --max-restarts 1 --nproc 2 --save " + (*dir_ / "y").string());
  EXPECT_NE(under_mpirun.status, 0);
  EXPECT_THAT(under_mpirun.output, HasSubstr("--max-restarts: the elastic agent launches mpirun "
                                             "itself"));
}

// `goodput --live` (cli/goodput_live.hpp): the tiny job under the agent with failures injected
// at a rate too low to fire in its few seconds: one launch completes, and the live ETTR and
// badput are printed beside the model's at the injected rate (no "as drawn" line without a
// failure); every iteration is logged for the accounting. The run's folder then holds a
// checkpoint, which a second live run refuses (it starts from scratch).
TEST_F(TrainRestartsCli, GoodputLivePrintsTheMeasuredRunBesideTheModel) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string save = (*dir_ / "live").string();
  const std::string cmd = testing::kMpirunEnvironment +
                          "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                          "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 300 " +
                          std::string(TRAINTWIN_BINARY) + " goodput --live " + *scenario_ +
                          " --set training.train_iters=4 --nproc 1 --rate-per-hour 0.001 "
                          "--runs 20 --save " +
                          save;
  const testing::CliResult r = testing::run_cli_command(cmd);
  ASSERT_EQ(r.status, 0) << r.output;
  print_lines(r.output, "ETTR");
  EXPECT_THAT(r.output, HasSubstr("live       launch 0 completed"));
  EXPECT_THAT(r.output, ContainsRegex("1 launches \\(0 failures\\), 4 iterations kept"));
  EXPECT_THAT(r.output, ContainsRegex("  live +[0-9. ]+ %   \\(0 failures in"));
  EXPECT_THAT(r.output, HasSubstr("model at 0.001/h (injected)"));
  EXPECT_THAT(r.output, Not(HasSubstr("(as drawn)")));
  for (const char* row : {"lost_progress", "detection", "restart", "restore", "checkpoint_save",
                          "other"}) {
    EXPECT_THAT(r.output, ContainsRegex(std::string("\n  ") + row + " +[0-9.]+ %"));
  }
  const testing::CliResult again = testing::run_cli_command(cmd);
  EXPECT_EQ(again.status, 2);
  EXPECT_THAT(again.output, HasSubstr("already holds a checkpoint (iteration 4)"));
}

// The live twin's flags before anything runs: each missing one named, the model's own flags
// and a sparser log refused with --live, the live ones refused without it.
TEST_F(TrainRestartsCli, GoodputLiveFlagsAreCheckedFirst) {
  auto run = [](const std::string& args) {
    return testing::run_cli("goodput " + *scenario_ + " " + args);
  };
  const std::string save = " --save " + (*dir_ / "live-flags").string();
  EXPECT_THAT(run("--live --nproc 1" + save).output,
              HasSubstr("--live needs --rate-per-hour X"));
  EXPECT_THAT(run("--live --rate-per-hour 1" + save).output, HasSubstr("--live needs --nproc R"));
  EXPECT_THAT(run("--live --rate-per-hour 1 --nproc 1").output,
              HasSubstr("--live needs --save DIR"));
  EXPECT_THAT(run("--live --rate-per-hour 1 --nproc 1 --days 2" + save).output,
              HasSubstr("--days does not go with --live"));
  EXPECT_THAT(run("--nproc 2").output, HasSubstr("--nproc needs --live"));
  EXPECT_THAT(run("--live --rate-per-hour 1 --nproc 1 --set training.log_interval=5" + save).output,
              HasSubstr("training.log_interval=5: --live accounts each launch's work"));
  EXPECT_THAT(
      run("--live --rate-per-hour 1 --nproc 1 --set training.save_interval=null" + save).output,
      HasSubstr("training.save_interval: the live twin needs checkpoints"));
  EXPECT_FALSE(fs::exists(*dir_ / "live-flags" / "latest_checkpointed_iteration.txt"));
}

}  // namespace
}  // namespace traintwin
