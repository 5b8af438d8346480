// traces/timeline_costs.hpp: kernel rows from a live timeline's args.kernels: the cuda
// backend's TF32 keys are read (a GPU timeline replays like a CPU one), the statistics of the
// samples, and a negative duration is refused naming the event and kernel (issue 31).
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
    EXPECT_THAT(e.what(), HasSubstr("us must be a duration >= 0, got -5"));
  }
  try {
    kernel_rows_from_timeline(timeline_with("[" + kernel("int8", 5) + "]"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("unknown dtype \"int8\" (allowed: fp32, fp16, bf16, fp8, tf32, fp32-bf16)"));
  }
}

}  // namespace
}  // namespace traintwin
