// sim/calibration_refit.hpp: the grid fit and its leave-one-out errors on a matrix worked by hand,
// the default grid holding the calibrated efficiencies, and bad inputs.
#include "sim/calibration_refit.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

// Three cases measured at 1, 2 and 4 s; three grid points:
//   p0 = {1.1, 2.0, 4.0}: errors .10, 0,   0    (mean .0333)
//   p1 = {1.0, 2.2, 4.2}: errors 0,   .10, .05  (mean .05)
//   p2 = {1.0, 2.0, 3.0}: errors 0,   0,   .25  (mean .0833)
const std::vector<double> kMeasured = {1.0, 2.0, 4.0};
const std::vector<std::vector<double>> kPredicted = {
    {1.1, 2.0, 4.0}, {1.0, 2.2, 4.2}, {1.0, 2.0, 3.0}};

TEST(CalibrationRefit, FitsThePointWithTheSmallestMeanAbsoluteError) {
  const GridFit all = fit_grid_point(kPredicted, kMeasured, {0, 1, 2});
  EXPECT_EQ(all.point, 0u);
  EXPECT_NEAR(all.mape, 0.1 / 3, 1e-12);
  // Cases 0 and 2 only: p0 .05, p1 .025, p2 .125.
  const GridFit some = fit_grid_point(kPredicted, kMeasured, {0, 2});
  EXPECT_EQ(some.point, 1u);
  EXPECT_NEAR(some.mape, 0.025, 1e-12);
}

// Holding out case 0: fit on {1, 2} -> p0 (0), predicts 1.1 (+10 %). Case 1: fit on {0, 2} -> p1
// (.025), predicts 2.2 (+10 %). Case 2: fit on {0, 1} -> p2 (0), predicts 3.0 (-25 %). The
// leave-one-out MAPE is 15 % where the in-sample one is 3.3 %: a fit that looks good on the cases
// it saw.
TEST(CalibrationRefit, LeaveOneOutFitsWithoutTheCaseItPredicts) {
  const std::vector<HeldOutPrediction> held = leave_one_out_refit(kPredicted, kMeasured);
  ASSERT_EQ(held.size(), 3u);
  EXPECT_EQ(held[0].point, 0u);
  EXPECT_DOUBLE_EQ(held[0].predicted_s, 1.1);
  EXPECT_NEAR(held[0].error, 0.1, 1e-12);
  EXPECT_EQ(held[1].point, 1u);
  EXPECT_NEAR(held[1].error, 0.1, 1e-12);
  EXPECT_EQ(held[2].point, 2u);
  EXPECT_NEAR(held[2].error, -0.25, 1e-12);
}

TEST(CalibrationRefit, TiesGoToTheLowerPoint) {
  const std::vector<std::vector<double>> same = {{2.0, 2.0}, {2.0, 2.0}};
  EXPECT_EQ(fit_grid_point(same, {1.0, 4.0}, {0, 1}).point, 0u);
}

TEST(CalibrationRefit, DefaultGridHoldsTheCalibratedEfficiencies) {
  const RooflineEfficiency calibrated = default_roofline_efficiency(GpuSpec{});
  const std::vector<RooflineEfficiency> points = default_refit_grid().points(calibrated);
  EXPECT_EQ(points.size(), 6u * 2u * 4u);
  EXPECT_TRUE(std::any_of(points.begin(), points.end(), [&](const RooflineEfficiency& p) {
    return p.gemm == calibrated.gemm && p.attention == calibrated.attention &&
           p.memory == calibrated.memory;
  }));
  // The fields the grid does not search come from the base.
  for (const RooflineEfficiency& p : points) {
    EXPECT_EQ(p.launch_overhead_s, calibrated.launch_overhead_s);
    EXPECT_EQ(p.vector, calibrated.vector);
  }
  // gemm varies slowest, memory fastest.
  EXPECT_EQ(points[0].gemm, 0.56);
  EXPECT_EQ(points[1].memory, 0.6);
  EXPECT_EQ(points[4].attention, 0.55);
}

TEST(CalibrationRefit, BadInputsAreRefused) {
  using ::testing::HasSubstr;
  EXPECT_THROW(fit_grid_point({}, kMeasured, {0}), InvalidArgument);
  EXPECT_THROW(fit_grid_point(kPredicted, kMeasured, {}), InvalidArgument);
  EXPECT_THROW(fit_grid_point(kPredicted, kMeasured, {3}), InvalidArgument);
  EXPECT_THROW(fit_grid_point({{1.0, 2.0}}, kMeasured, {0}), InvalidArgument);
  EXPECT_THROW(fit_grid_point({{0.0, 2.0, 4.0}}, kMeasured, {0}), InvalidArgument);
  EXPECT_THROW(leave_one_out_refit({{1.0}}, {1.0}), InvalidArgument);
  try {
    RefitGrid{{0.7}, {1.5}, {0.5}}.points(RooflineEfficiency{});
    FAIL() << "an efficiency above 1 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("attention efficiency 1.5"));
  }
  EXPECT_THROW(RefitGrid({{}, {0.5}, {0.5}}).points(RooflineEfficiency{}), InvalidArgument);
}

}  // namespace
}  // namespace traintwin
