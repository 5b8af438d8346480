// sim/goodput.hpp: Young's and Daly's checkpoint intervals worked by hand and against Daly's
// published optima, the Monte Carlo against Daly's exact expected wall time, the Llama 3 failure
// rates against the paper's counts, the run's time accounting, seeding, and bad inputs.
#include "sim/goodput.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;

constexpr double kHour = 3600.0;
constexpr double kDay = 86400.0;

// Young 1974: sqrt(2 delta M); delta 5 min and M 24 h give sqrt(2 x 300 x 86400) = 7200 s.
TEST(GoodputClosedForms, YoungIsTheSquareRootOfTwoDeltaM) {
  EXPECT_NEAR(young_interval_s(300, 86400), 7200.0, 1e-9);
  EXPECT_NEAR(young_interval_s(2, 25), 10.0, 1e-12);
  EXPECT_THROW(young_interval_s(0, 50), InvalidArgument);
  EXPECT_THROW(young_interval_s(2, -1), InvalidArgument);
}

// Daly 2006, Figs. 3-5: a 500-hour job, 10-minute restart, 5-minute dump; the optimum interval
// is 117, 57 and 9.1 minutes for an MTBF of 24 h, 6 h and 15 min. By hand, x = delta / 2M:
//   24 h: x = 1/576, sqrt(x) = 1/24: 7200 (1 + 1/72 + 1/5184) - 300 = 7001.3888... s
//    6 h: x = 1/144, sqrt(x) = 1/12: 3600 (1 + 1/36 + 1/1296) - 300 = 3402.7777... s
//   15 min: x = 1/6: sqrt(540000) (1 + sqrt(1/6)/3 + 1/54) - 300 = 548.45... s
TEST(GoodputClosedForms, DalyHigherOrderOptimaOfFigures3To5) {
  EXPECT_NEAR(daly_interval_s(300, 24 * kHour), 7200.0 * (1 + 1.0 / 72 + 1.0 / 5184) - 300, 1e-9);
  EXPECT_NEAR(daly_interval_s(300, 6 * kHour), 3600.0 * (1 + 1.0 / 36 + 1.0 / 1296) - 300, 1e-9);
  EXPECT_NEAR(daly_interval_s(300, 900),
              std::sqrt(540000.0) * (1 + std::sqrt(1.0 / 6) / 3 + 1.0 / 54) - 300, 1e-9);
  EXPECT_NEAR(daly_interval_s(300, 24 * kHour) / 60, 117, 0.5);
  EXPECT_NEAR(daly_interval_s(300, 6 * kHour) / 60, 57, 0.5);
  EXPECT_NEAR(daly_interval_s(300, 900) / 60, 9.1, 0.05);
  // delta >= 2M: the optimum is M.
  EXPECT_DOUBLE_EQ(daly_interval_s(300, 100), 100);
}

// The higher-order estimate is the minimum of Daly's expected wall time to within 1 % (a scan
// of the complete model's T_w over the interval).
TEST(GoodputClosedForms, DalyEstimateMinimisesTheCompleteModel) {
  for (const double mtbf : {24 * kHour, 6 * kHour, 900.0}) {
    double best_tau = 0, best_wall = INFINITY;
    for (double tau = 10; tau < 4 * kHour; tau *= 1.0005) {
      const double wall = daly_expected_wall_s(500 * kHour, tau, 300, 600, mtbf);
      if (wall < best_wall) {
        best_wall = wall;
        best_tau = tau;
      }
    }
    EXPECT_NEAR(daly_interval_s(300, mtbf) / best_tau, 1.0, 0.01) << "MTBF " << mtbf;
  }
}

/// Daly's setting as a job: one node, exponential failures of mean `mtbf_s`, a 300 s dump
/// (300 GB at 1 GB/s), a 600 s restart (all of it re-queue), an instant load, no detection,
/// no planned interruptions, a spare always ready; iterations of 60 s.
GoodputJob daly_job(double mtbf_s) {
  GoodputJob job;
  job.iteration_s = 60;
  job.tokens_per_iteration = 1;
  job.nodes = 1;
  job.gpus = 1;
  job.checkpoint_bytes = 300e9;
  ReliabilitySpec& r = job.reliability;
  r.failures = {{"gpu", {1000.0 * kDay / mtbf_s, 1.0}}};
  r.planned_interruptions_per_1000_node_days = 0;
  r.detection_s = 0;
  r.requeue_s = 600;
  r.process_start_s = 0;
  r.communicator_init_s = 0;
  r.communicator_init_s_per_1000_gpus = 0;
  r.storage_write_GBps_per_node = 1;
  r.storage_read_GBps_per_node = 1e12;
  r.filesystem_GBps = 1e12;
  r.spare_nodes = 1;
  r.node_repair_hours = 1e-9;
  return job;
}

// The Monte Carlo in Daly's setting reproduces his complete model, which is exact for that
// process (a segment of tau + delta completes without failure, a restart of R may fail too):
// E[T_w] = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau, here within 4 standard errors of the
// mean of 400 runs of the 500-hour job, at the intervals of Figs. 3 and 4 (whole numbers of
// iterations dividing the work).
TEST(GoodputMonteCarlo, ReproducesDalysExpectedWallTime) {
  struct Case {
    double mtbf_s, interval_s;
  };
  for (const Case k : {Case{24 * kHour, 120 * 60.0}, Case{6 * kHour, 60 * 60.0}}) {
    const GoodputJob job = daly_job(k.mtbf_s);
    const GoodputAtInterval at =
        goodput_at_interval(job, k.interval_s, GoodputHorizon{0, 500 * kHour}, 400, 7);
    double mean = 0, sq = 0;
    for (const GoodputRun& r : at.runs) {
      mean += r.wall_s / 400;
      sq += r.wall_s * r.wall_s / 400;
    }
    const double se = std::sqrt((sq - mean * mean) / 399.0);
    const double expected = daly_expected_wall_s(500 * kHour, k.interval_s, 300, 600, k.mtbf_s);
    EXPECT_NEAR(mean, expected, 4 * se)
        << "MTBF " << k.mtbf_s << ": " << mean / kHour << " h vs " << expected / kHour << " h";
    EXPECT_LT(se, 0.01 * expected);  // the check is tight: under 1 % of the expectation
    for (const GoodputRun& r : at.runs) EXPECT_NEAR(r.useful_s, 500 * kHour, 1e-6);
  }
}

/// A job of `nodes` 8-GPU nodes with the default (Llama 3) reliability.
GoodputJob default_job(int64_t nodes, double iteration_s, double tokens, double checkpoint_bytes) {
  GoodputJob job;
  job.iteration_s = iteration_s;
  job.tokens_per_iteration = tokens;
  job.nodes = nodes;
  job.gpus = 8 * nodes;
  job.checkpoint_bytes = checkpoint_bytes;
  job.reliability = default_reliability();
  return job;
}

// Dubey et al. 2024 (Llama 3), Table 5: 419 unexpected and 47 planned interruptions in 54 days
// on 2,048 nodes: the default rates give a job MTBF of 54 x 24 / 419 = 3.093 h and a planned
// interruption every 54 x 24 / 47 h; the simulated runs count 419 failures on average (the
// node clocks run whatever the job does: a Poisson process of that rate), within 4 standard
// errors (sqrt(419 / 100)).
TEST(GoodputMonteCarlo, LlamaThreeRatesGiveThePapersInterruptions) {
  const GoodputJob job = default_job(2048, 10, 16e6, 5.7e12);
  const GoodputCosts c = goodput_costs(job);
  EXPECT_NEAR(c.mtbf_s / kHour, 54.0 * 24 / 419, 1e-9);
  EXPECT_NEAR(c.planned_interval_s / kHour, 54.0 * 24 / 47, 1e-9);
  const GoodputAtInterval at = goodput_at_interval(job, 600, GoodputHorizon{54 * kDay, 0}, 100, 1);
  EXPECT_NEAR(at.mean_failures, 419, 4 * std::sqrt(419.0 / 100));
  // Planned interruptions falling while the job is down are absorbed: about ETTR x 47 remain.
  EXPECT_GT(at.mean_planned, 0.85 * 47 - 4 * std::sqrt(47.0 / 100));
  EXPECT_LT(at.mean_planned, 47 + 4 * std::sqrt(47.0 / 100));
  EXPECT_GT(at.mean_ettr, 0.5);
  EXPECT_LT(at.mean_ettr, 1.0);
}

// Every second of a run is useful progress or one badput cause: wall = useful + badput, with
// synchronous and asynchronous saves, spares that run out, and Weibull failures.
TEST(GoodputMonteCarlo, WallTimeIsUsefulPlusBadput) {
  GoodputJob job = default_job(512, 7, 4e6, 2e12);
  job.reliability.storage_write_GBps_per_node = 0.05;  // a 78 s write
  // 72-hour repairs at about two failures a day keep about 6 nodes in repair: 7 spares, and
  // the job sometimes waits for one.
  job.reliability.spare_nodes = 7;
  job.reliability.node_repair_hours = 72;
  job.reliability.failures["gpu"].weibull_shape = 0.7;
  double spare_wait_s = 0;
  for (const bool async : {false, true}) {
    job.reliability.async_save = async;
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      const GoodputRun r = simulate_goodput_run(job, 1800, GoodputHorizon{20 * kDay, 0}, seed);
      EXPECT_NEAR(r.wall_s, 20 * kDay, 1e-6);
      EXPECT_NEAR(r.useful_s + r.badput.total(), r.wall_s, 1e-6 * r.wall_s)
          << "async " << async << " seed " << seed;
      EXPECT_GT(r.checkpoints, 0);
      EXPECT_GT(r.failures, 0);
      spare_wait_s += r.badput.spare_wait_s;
    }
  }
  EXPECT_GT(spare_wait_s, 0);
}

// An asynchronous save stalls for its copy only: with a 78 s write and a 5 s stall it wins on
// the same seeds.
TEST(GoodputMonteCarlo, AsynchronousSaveStallsLess) {
  GoodputJob job = default_job(512, 7, 4e6, 2e12);
  job.reliability.storage_write_GBps_per_node = 0.05;
  const GoodputAtInterval sync =
      goodput_at_interval(job, 1800, GoodputHorizon{10 * kDay, 0}, 20, 3);
  job.reliability.async_save = true;
  const GoodputAtInterval async =
      goodput_at_interval(job, 1800, GoodputHorizon{10 * kDay, 0}, 20, 3);
  EXPECT_GT(async.mean_ettr, sync.mean_ettr);
  EXPECT_LT(async.mean_badput_share.checkpoint_save_s, sync.mean_badput_share.checkpoint_save_s);
}

TEST(GoodputMonteCarlo, ASeedGivesOneRun) {
  GoodputJob job = daly_job(6 * kHour);
  const GoodputHorizon h{30 * kDay, 0};
  const GoodputRun a = simulate_goodput_run(job, 3600, h, 11);
  const GoodputRun b = simulate_goodput_run(job, 3600, h, 11);
  const GoodputRun c = simulate_goodput_run(job, 3600, h, 12);
  EXPECT_EQ(a.failures, b.failures);
  EXPECT_EQ(a.useful_s, b.useful_s);
  EXPECT_NE(a.useful_s, c.useful_s);
}

TEST(GoodputInputs, OutOfRangeValuesNameTheirKey) {
  GoodputJob job = daly_job(6 * kHour);
  auto error = [&](auto edit) {
    GoodputJob j = job;
    edit(j);
    try {
      goodput_costs(j);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error([](GoodputJob& j) { j.reliability.spare_nodes = 2; }),
              HasSubstr("cluster.reliability.spare_nodes: must be in [0, 1]"));
  EXPECT_THAT(error([](GoodputJob& j) { j.reliability.failures["gpu"].weibull_shape = 0; }),
              HasSubstr("cluster.reliability.weibull_shapes.gpu: must be a finite number > 0"));
  EXPECT_THAT(
      error([](GoodputJob& j) { j.reliability.storage_write_GBps_per_node = 0; }),
      HasSubstr("cluster.reliability.storage_write_GBps_per_node: must be a finite number > 0"));
  EXPECT_THAT(error([](GoodputJob& j) { j.reliability.detection_s = -1; }),
              HasSubstr("cluster.reliability.detection_s: must be a finite number >= 0"));
  EXPECT_THROW(simulate_goodput_run(job, 0, GoodputHorizon{kDay, 0}, 1), InvalidArgument);
  EXPECT_THROW(simulate_goodput_run(job, 60, GoodputHorizon{kDay, kDay}, 1), InvalidArgument);
}

std::string scenario_error(const std::vector<Override>& overrides) {
  try {
    load_scenario(std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt3-175b-h100-1024.yaml",
                  overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(GoodputInputs, TheScenarioKeysAreReadAndChecked) {
  const std::string file =
      std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt3-175b-h100-1024.yaml";
  EXPECT_FALSE(load_scenario(file).cluster.reliability.has_value());
  const Scenario s = load_scenario(file, {{"cluster.reliability.failure_rates.gpu", "2.5"},
                                          {"cluster.reliability.failure_rates.other", "0"},
                                          {"cluster.reliability.weibull_shapes.hbm", "0.8"},
                                          {"cluster.reliability.async_save", "true"},
                                          {"cluster.reliability.spare_nodes", "4"}});
  ASSERT_TRUE(s.cluster.reliability.has_value());
  const ReliabilitySpec& r = *s.cluster.reliability;
  EXPECT_EQ(r.failures.at("gpu").rate_per_1000_node_days, 2.5);
  EXPECT_EQ(r.failures.count("other"), 0u);  // rate 0 removes a class
  EXPECT_EQ(r.failures.at("hbm").weibull_shape, 0.8);
  EXPECT_EQ(r.failures.at("hbm").rate_per_1000_node_days,
            default_reliability().failures.at("hbm").rate_per_1000_node_days);
  EXPECT_TRUE(r.async_save);
  EXPECT_EQ(r.spare_nodes, 4);

  EXPECT_THAT(scenario_error({{"cluster.reliability.failure_rates.gpus", "1"}}),
              HasSubstr("cluster.reliability.failure_rates.gpus: unknown key; did you mean gpu?"));
  EXPECT_THAT(scenario_error({{"cluster.reliability.failure_rates.gpu", "-1"}}),
              HasSubstr("cluster.reliability.failure_rates.gpu: must be >= 0 (got -1)"));
  EXPECT_THAT(scenario_error({{"cluster.reliability.weibull_shapes.gpu", "0"}}),
              HasSubstr("cluster.reliability.weibull_shapes.gpu: must be > 0 (got 0)"));
  EXPECT_THAT(scenario_error({{"cluster.reliability.filesystem_GBps", "0"}}),
              HasSubstr("cluster.reliability.filesystem_GBps: must be > 0 (got 0)"));
  EXPECT_THAT(scenario_error({{"cluster.reliability.detecton_s", "5"}}),
              HasSubstr("did you mean detection_s?"));
  EXPECT_THAT(scenario_error({{"cluster.reliability.failure_rates.gpu", "0"},
                              {"cluster.reliability.failure_rates.hbm", "0"},
                              {"cluster.reliability.failure_rates.network", "0"},
                              {"cluster.reliability.failure_rates.cpu", "0"},
                              {"cluster.reliability.failure_rates.other", "0"}}),
              HasSubstr("every failure rate is 0"));
}

// The checkpoint holds every parameter once at 14 bytes in mixed precision (2 weights + 4
// master + 8 Adam moments), 12 in fp32.
TEST(GoodputInputs, CheckpointBytesPerParameter) {
  const std::string file =
      std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt3-175b-h100-1024.yaml";
  const Scenario bf16 = load_scenario(file);
  const Scenario fp32 = load_scenario(file, {{"training.precision", "fp32"}});
  EXPECT_NEAR(checkpoint_bytes(bf16) / checkpoint_bytes(fp32), 14.0 / 12.0, 1e-12);
  EXPECT_GT(checkpoint_bytes(bf16), 14.0 * 170e9);
  EXPECT_LT(checkpoint_bytes(bf16), 14.0 * 180e9);
}

}  // namespace
}  // namespace traintwin
