// The live twin's translation (exec/live_goodput.hpp): a run's launches, as the elastic agent
// accounts them, give the measured means worked by hand below, and the goodput job built from
// them gives back exactly those costs through the model's own goodput_costs (save stall, load,
// restart, detection) and a job MTBF of 1 / rate.
#include "exec/live_goodput.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace traintwin::exec {
namespace {

/// Three launches: the first fails after saving at iterations 5 and 10 (4 s of kept work over
/// 10 iterations, 1.5 s lost, 2 s to detect), the second resumes from 10 and fails at once after
/// one save, the third resumes from 15 and completes 5 iterations.
ElasticRunReport three_launches() {
  ElasticRunReport r;
  AttemptReport a;
  a.attempt = 0;
  a.restart_s = 3.0;  // the first start
  a.saves = 2;
  a.checkpoint_save_s = 0.4;
  a.kept_iterations = 10;
  a.productive_s = 4.0;
  a.lost_progress_s = 1.5;
  a.detection_s = 2.0;
  a.other_s = 0.1;
  r.attempts.push_back(a);
  AttemptReport b;
  b.attempt = 1;
  b.resumed_from = 10;
  b.restore_s = 0.5;
  b.restart_s = 2.0;
  b.saves = 1;
  b.checkpoint_save_s = 0.2;
  b.kept_iterations = 5;
  b.productive_s = 2.0;
  b.detection_s = 1.0;
  r.attempts.push_back(b);
  AttemptReport c;
  c.attempt = 2;
  c.completed = true;
  c.resumed_from = 15;
  c.restore_s = 0.7;
  c.restart_s = 4.0;
  c.kept_iterations = 5;
  c.productive_s = 2.0;
  c.other_s = 0.2;
  r.attempts.push_back(c);
  r.completed = true;
  r.wall_s = 30;
  return r;
}

TEST(LiveGoodput, MeasuredMeansOfTheLaunches) {
  const LiveCosts c = measure_live_run(three_launches());
  EXPECT_EQ(c.iterations, 20);
  EXPECT_DOUBLE_EQ(c.iteration_s, 8.0 / 20);       // productive time / iterations kept
  EXPECT_DOUBLE_EQ(c.save_s, 0.6 / 3);             // three saves
  EXPECT_DOUBLE_EQ(c.restore_s, (0.5 + 0.7) / 2);  // two launches resumed
  EXPECT_DOUBLE_EQ(c.restart_s, (2.0 + 4.0) / 2);  // the relaunches
  EXPECT_DOUBLE_EQ(c.first_start_s, 3.0);
  EXPECT_DOUBLE_EQ(c.detection_s, (2.0 + 1.0) / 2);  // two failures
  EXPECT_EQ(c.failures, 2);
  EXPECT_DOUBLE_EQ(c.other_s, 0.3);
}

TEST(LiveGoodput, TheJobGivesBackTheMeasuredCosts) {
  const LiveCosts c = measure_live_run(three_launches());
  const GoodputJob job = live_goodput_job(c, 60.0, 2, 4096);
  const GoodputCosts g = goodput_costs(job);
  EXPECT_NEAR(g.save_stall_s, c.save_s, 1e-12);
  EXPECT_NEAR(g.restore_s, c.restore_s, 1e-12);
  EXPECT_NEAR(g.restart_s, c.restart_s, 1e-12);
  EXPECT_NEAR(g.detection_s, c.detection_s, 1e-12);
  EXPECT_NEAR(g.mtbf_s, 3600.0 / 60.0, 1e-9);  // 60 failures per hour
  EXPECT_EQ(job.nodes, 1);
  EXPECT_EQ(job.gpus, 2);
  EXPECT_DOUBLE_EQ(job.iteration_s, c.iteration_s);
  EXPECT_DOUBLE_EQ(job.tokens_per_iteration, 4096);
}

TEST(LiveGoodput, NothingToTimeOrABadRateIsAnError) {
  ElasticRunReport none;
  none.attempts.push_back(AttemptReport{});  // failed before any checkpoint
  EXPECT_THROW(measure_live_run(none), InvalidArgument);
  const LiveCosts c = measure_live_run(three_launches());
  EXPECT_THROW(live_goodput_job(c, 0.0, 2, 1), InvalidArgument);
  EXPECT_THROW(live_goodput_job(c, 1.0, 0, 1), InvalidArgument);
}

}  // namespace
}  // namespace traintwin::exec
