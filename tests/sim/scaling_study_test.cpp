// Tests of sim/scaling_study: the best ranked record per GPU count (lowest rank; unranked rows
// and counts without a ranked row left out), what makes a scaling study, the layout label (the
// same at every GPU count), and the time to train a budget worked by hand.
#include "sim/scaling_study.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace traintwin {
namespace {

SweepRecord record(SweepStatus status, int64_t rank, int64_t gpus, int64_t tp, int64_t pp) {
  SweepRecord r;
  r.status = status;
  r.rank = rank;
  r.configuration.num_gpus = gpus;
  r.configuration.tensor_model_parallel_size = tp;
  r.configuration.expert_tensor_parallel_size = tp;
  r.configuration.pipeline_model_parallel_size = pp;
  r.configuration.data_parallel_size = gpus / tp / pp;
  return r;
}

TEST(ScalingStudy, BestRankedRecordPerGpuCountInIncreasingCount) {
  const std::vector<SweepRecord> rows = {
      record(SweepStatus::kRanked, 3, 16, 2, 1),      record(SweepStatus::kRanked, 2, 8, 2, 1),
      record(SweepStatus::kRanked, 1, 8, 1, 2),       record(SweepStatus::kRanked, 4, 16, 1, 4),
      record(SweepStatus::kOutOfMemory, 0, 32, 1, 1), record(SweepStatus::kInvalid, 0, 64, 1, 1)};
  const auto best = best_per_gpu_count(rows);
  ASSERT_EQ(best.size(), 2u);  // 32 and 64 GPUs: nothing ranked
  EXPECT_EQ(best[0].num_gpus, 8);
  EXPECT_EQ(best[0].record, 2u);  // rank 1
  EXPECT_EQ(best[1].num_gpus, 16);
  EXPECT_EQ(best[1].record, 0u);  // rank 3 beats rank 4
  EXPECT_TRUE(is_scaling_study(rows));
  EXPECT_FALSE(is_scaling_study({rows[1], rows[2], rows[4]}));  // one GPU count ranks
  EXPECT_TRUE(best_per_gpu_count({rows[4]}).empty());
}

TEST(ScalingStudy, LayoutLabelLeavesOutWhatFollowsTheGpuCount) {
  SweepRecord a = record(SweepStatus::kRanked, 1, 128, 4, 4);
  SweepRecord b = record(SweepStatus::kRanked, 2, 4096, 4, 4);
  a.configuration.virtual_pipeline_model_parallel_size = 5;
  b.configuration.virtual_pipeline_model_parallel_size = 5;
  a.configuration.global_batch_size = 64;
  b.configuration.global_batch_size = 2048;
  EXPECT_EQ(scaling_layout_label(a.configuration), scaling_layout_label(b.configuration));
  EXPECT_EQ(scaling_layout_label(a.configuration),
            "TP 4 CP 1 PP 4 VPP 5 mbs 1 recompute none SP off dist-opt off fp8 off");
  a.configuration.expert_model_parallel_size = 8;
  a.configuration.expert_tensor_parallel_size = 1;
  a.configuration.pipeline_schedule = PipelineScheduleKind::kZbH1;
  a.configuration.fp8_format = "hybrid";
  EXPECT_EQ(scaling_layout_label(a.configuration),
            "TP 4 CP 1 PP 4 VPP 5 EP 8 ETP 1 mbs 1 recompute none SP off dist-opt off fp8 hybrid "
            "schedule zb-h1");
}

// 15T tokens at 4.33 M tokens/s on 4,096 GPUs: 15e12 / 4.33e6 / 86,400 = 40.094 days, x 24 x
// 4,096 = 3.9414 M GPU-hours.
TEST(ScalingStudy, TrainingTimeOfABudget) {
  const TrainingTime t = training_time(15e12, 4.33e6, 4096);
  EXPECT_NEAR(t.days, 15e12 / 4.33e6 / 86400.0, 1e-12);
  EXPECT_NEAR(t.days, 40.094, 1e-3);
  EXPECT_NEAR(t.gpu_hours, t.days * 24 * 4096, 1e-6);
  EXPECT_NEAR(t.gpu_hours / 1e6, 3.9414, 1e-4);
  EXPECT_THROW(training_time(0, 1, 1), InvalidArgument);
  EXPECT_THROW(training_time(1, 0, 1), InvalidArgument);
  EXPECT_THROW(training_time(1, 1, 0), InvalidArgument);
}

}  // namespace
}  // namespace traintwin
