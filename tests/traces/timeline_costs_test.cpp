// traces/timeline_costs.hpp: kernel rows from a live timeline's args.kernels: the cuda
// backend's TF32 keys are read (a GPU timeline replays like a CPU one), the statistics of the
// samples, and a negative or zero duration is refused naming the file, the event and the kernel
// (issue 31).
#include "traces/timeline_costs.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;

/// A one-event timeline whose args.kernels holds `kernels` (a JSON array).
Timeline timeline_with(const std::string& kernels) {
  Timeline t;
  t.name = "live.json";
  TimelineEvent e;
  e.name = "fwd mb0 L0";
  e.args["kernels"] = kernels;
  t.events.push_back(e);
  return t;
}

std::string kernel(const std::string& dtype, double us) {
  return R"({"name":"gemm_fwd","shape":[2048,2048,2048],"dtype":")" + dtype +
         R"(","tp":1,"flops":17179869184,"bytes":50331648,"us":)" + std::to_string(us) + "}";
}

TEST(TimelineCosts, Tf32KernelsAreRowsWithTheirStatistics) {
  const auto rows = kernel_rows_from_timeline(timeline_with(
      "[" + kernel("tf32", 70) + "," + kernel("tf32", 80) + "," + kernel("tf32", 90) + "]"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].key.dtype, Precision::kTf32);
  EXPECT_EQ(rows[0].samples, 3);
  EXPECT_DOUBLE_EQ(rows[0].median_us, 80);
  EXPECT_DOUBLE_EQ(*rows[0].mean_us, 80);
}

TEST(TimelineCosts, NegativeDurationsAndUnknownDtypesAreRefused) {
  try {
    kernel_rows_from_timeline(timeline_with("[" + kernel("fp32", -5) + "]"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("live.json: event 0 (fwd mb0 L0): args.kernels: "));
    EXPECT_THAT(e.what(), HasSubstr("us must be a duration > 0 (microseconds), got -5"));
  }
  // A kernel that ran took time: 0 is no measurement (traintwin writes a reading below the
  // clock's resolution as 1 ns).
  try {
    kernel_rows_from_timeline(timeline_with("[" + kernel("fp32", 70) + "," + kernel("fp32", 0) + "]"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("gemm_fwd[2048,2048,2048] fp32 tp1: us must be a duration > 0 "
                                    "(microseconds), got 0"));
  }
  try {
    kernel_rows_from_timeline(timeline_with("[" + kernel("int8", 5) + "]"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("unknown dtype \"int8\" (allowed: fp32, fp16, bf16, fp8, tf32, fp32-bf16)"));
  }
}

// The messages name the file the timeline was read from, not the run's name inside it
// (otherData.name, e.g. "gpt-tiny (live)"), which told the user nothing about where to look.
TEST(TimelineCosts, MessagesNameTheFileTheTimelineCameFrom) {
  Timeline t = timeline_with("[" + kernel("fp32", -5) + "]");
  t.name = "tiny (live)";
  try {
    kernel_rows_from_timeline(t, "/runs/live.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/runs/live.json: event 0 (fwd mb0 L0): args.kernels: "));
  }
  Timeline none;
  none.name = "tiny (live)";
  try {
    kernel_rows_from_timeline(none, "/runs/sim.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/runs/sim.json: no event has kernel durations"));
  }
}

}  // namespace
}  // namespace traintwin
