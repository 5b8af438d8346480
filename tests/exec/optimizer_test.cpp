// Optimizer pieces of the executor: AdamW steps worked by hand (one and three steps, with and
// without weight decay), invariants of the update (scale invariance, decoupled decay), gradient
// clipping by global norm, and Megatron's learning-rate schedule on hand-worked values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/adamw.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/lr_schedule.hpp"

namespace traintwin::exec {
namespace {

using ::testing::HasSubstr;
using Vec = std::vector<double>;

// Runs fn and expects InvalidArgument whose message contains `needle`.
void expect_invalid(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

// ---------------------------------------------------------------------------------------------
// AdamW

constexpr cpu::AdamWParams kNoDecay{.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0};

// Step 1 from m = v = 0: m = (1 - b1) g, v = (1 - b2) g^2, so m_hat = g, v_hat = g^2 and the
// update is lr g / (|g| + eps).
TEST(AdamWTest, OneStepByHand) {
  //            g = 0.5            g = -2             g = 0 (no gradient: no move)
  Vec p = {1.0, -0.5, 2.0};
  const Vec g = {0.5, -2.0, 0.0};
  Vec m(3, 0.0), v(3, 0.0);
  cpu::adamw_step<double>(p, g, m, v, kNoDecay, 0.1, 1);
  EXPECT_NEAR(m[0], 0.05, 1e-16);
  EXPECT_NEAR(v[0], 0.00025, 1e-18);
  EXPECT_NEAR(m[1], -0.2, 1e-16);
  EXPECT_NEAR(v[1], 0.004, 1e-17);
  // p0 = 1 - 0.1 * 0.5 / (0.5 + 1e-8) = 1 - 0.1 * 0.99999998 = 0.900000002
  EXPECT_NEAR(p[0], 0.900000002, 1e-15);
  // p1 = -0.5 + 0.1 * 2 / (2 + 1e-8) = -0.5 + 0.0999999995 = -0.4000000005
  EXPECT_NEAR(p[1], -0.4000000005, 1e-15);
  EXPECT_EQ(p[2], 2.0);
  EXPECT_EQ(m[2], 0.0);
  EXPECT_EQ(v[2], 0.0);
}

TEST(AdamWTest, OneStepWithWeightDecayByHand) {
  // lr 0.1, weight decay 0.01: p = 1 (1 - 0.001) - 0.1 * 0.99999998 = 0.899000002;
  // for g = 0 the parameter only decays: 2 (1 - 0.001) = 1.998.
  Vec p = {1.0, 2.0};
  const Vec g = {0.5, 0.0};
  Vec m(2, 0.0), v(2, 0.0);
  cpu::AdamWParams hyper = kNoDecay;
  hyper.weight_decay = 0.01;
  cpu::adamw_step<double>(p, g, m, v, hyper, 0.1, 1);
  EXPECT_NEAR(p[0], 0.899000002, 1e-15);
  EXPECT_NEAR(p[1], 1.998, 1e-15);
}

// Three steps, lr 0.01, b1 0.9, b2 0.999, eps 1e-8, weight decay 0.1, p0 = 1, g = 0.5, -0.25, 1:
// step 1: m = 0.05, v = 0.00025, m_hat = 0.05/0.1 = 0.5, v_hat = 0.00025/0.001 = 0.25,
//         p = 1 * 0.999 - 0.01 * 0.5/(0.5 + 1e-8) = 0.9890000002
// step 2: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225,
//         m_hat = 0.02/0.19 = 0.105263157894737, v_hat = 0.00031225/0.001999 = 0.156203101550778,
//         p = 0.9890000002 * 0.999 - 0.01 * 0.105263157894737/(0.395225380... + 1e-8)
//           = 0.9880110001998 - 0.00266337032921536 = 0.985347629870585
// step 3: m = 0.018 + 0.1 = 0.118, v = 0.00031193775 + 0.001 = 0.00131193775,
//         m_hat = 0.118/0.271 = 0.435424354243543, v_hat = 0.00131193775/0.002997001
//         = 0.437750187604209, p = 0.985347629870585 * 0.999 - 0.01 * 0.658111590307565
//         = 0.977781166337638
TEST(AdamWTest, ThreeStepsByHand) {
  Vec p = {1.0};
  Vec m = {0.0}, v = {0.0};
  cpu::AdamWParams hyper = kNoDecay;
  hyper.weight_decay = 0.1;
  const double grads[] = {0.5, -0.25, 1.0};
  const double expected_p[] = {0.9890000002, 0.985347629870585, 0.977781166337638};
  const double expected_m[] = {0.05, 0.02, 0.118};
  const double expected_v[] = {0.00025, 0.00031225, 0.00131193775};
  for (int step = 1; step <= 3; ++step) {
    const Vec g = {grads[step - 1]};
    cpu::adamw_step<double>(p, g, m, v, hyper, 0.01, step);
    EXPECT_NEAR(m[0], expected_m[step - 1], 1e-15) << "step " << step;
    EXPECT_NEAR(v[0], expected_v[step - 1], 1e-17) << "step " << step;
    EXPECT_NEAR(p[0], expected_p[step - 1], 1e-14) << "step " << step;
  }
}

// Weight decay is decoupled: it does not enter m and v, and with the same gradients the decayed
// run differs from the undecayed one on step 1 by exactly lr * wd * p0.
TEST(AdamWTest, WeightDecayIsDecoupledFromTheMoments) {
  const Vec p0 = {0.7, -1.3, 2.5};
  const Vec g = {0.3, 0.1, -0.4};
  Vec p_plain = p0, m_plain(3, 0.0), v_plain(3, 0.0);
  Vec p_decay = p0, m_decay(3, 0.0), v_decay(3, 0.0);
  cpu::AdamWParams decay = kNoDecay;
  decay.weight_decay = 0.05;
  cpu::adamw_step<double>(p_plain, g, m_plain, v_plain, kNoDecay, 0.02, 1);
  cpu::adamw_step<double>(p_decay, g, m_decay, v_decay, decay, 0.02, 1);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(m_plain[i], m_decay[i]);
    EXPECT_EQ(v_plain[i], v_decay[i]);
    EXPECT_NEAR(p_plain[i] - p_decay[i], 0.02 * 0.05 * p0[i], 1e-15) << i;
  }
  // Zero gradients: Adam's term is 0 and the parameter shrinks by (1 - lr wd) per step.
  Vec p = p0, m(3, 0.0), v(3, 0.0);
  const Vec zero(3, 0.0);
  for (int step = 1; step <= 3; ++step) cpu::adamw_step<double>(p, zero, m, v, decay, 0.02, step);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(p[i], p0[i] * std::pow(1 - 0.02 * 0.05, 3), 1e-15);
}

// Adam's update is invariant to the scale of the gradients (up to eps): here eps = 0.
TEST(AdamWTest, UpdateIsInvariantToGradientScale) {
  const cpu::AdamWParams hyper{.beta1 = 0.8, .beta2 = 0.99, .eps = 0, .weight_decay = 0.01};
  Vec p1 = {0.1, 0.2}, m1(2, 0.0), v1(2, 0.0);
  Vec p2 = p1, m2(2, 0.0), v2(2, 0.0);
  const Vec grads[] = {{0.3, -0.1}, {-0.2, 0.4}};
  for (int step = 1; step <= 2; ++step) {
    const Vec& g = grads[step - 1];
    const Vec g_scaled = {g[0] * 1000, g[1] * 1000};
    cpu::adamw_step<double>(p1, g, m1, v1, hyper, 1e-3, step);
    cpu::adamw_step<double>(p2, g_scaled, m2, v2, hyper, 1e-3, step);
  }
  EXPECT_NEAR(p1[0], p2[0], 1e-15);
  EXPECT_NEAR(p1[1], p2[1], 1e-15);
}

TEST(AdamWTest, FloatMatchesDouble) {
  Vec p = {0.5, -0.25, 1.5}, m(3, 0.0), v(3, 0.0);
  std::vector<float> pf = {0.5f, -0.25f, 1.5f}, mf(3, 0.0f), vf(3, 0.0f);
  const cpu::AdamWParams hyper{};  // Megatron defaults
  for (int step = 1; step <= 5; ++step) {
    const Vec g = {0.1 * step, -0.3, 0.05 / step};
    const std::vector<float> gf(g.begin(), g.end());
    cpu::adamw_step<double>(p, g, m, v, hyper, 1e-2, step);
    cpu::adamw_step<float>(pf, gf, mf, vf, hyper, 1e-2, step);
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(pf[i], p[i], 1e-6) << i;
}

TEST(AdamWErrorTest, RejectsBadArguments) {
  Vec p(2), g(2), m(2), v(2);
  expect_invalid([&] { cpu::adamw_step<double>(p, g, m, v, kNoDecay, 0.1, 0); },
                 "step must be >= 1");
  expect_invalid([&] { cpu::adamw_step<double>(p, g, m, v, kNoDecay, -0.1, 1); }, "lr");
  cpu::AdamWParams bad = kNoDecay;
  bad.beta1 = 1.0;
  expect_invalid([&] { cpu::adamw_step<double>(p, g, m, v, bad, 0.1, 1); }, "beta1");
  bad = kNoDecay;
  bad.beta2 = -0.1;
  expect_invalid([&] { cpu::adamw_step<double>(p, g, m, v, bad, 0.1, 1); }, "beta2");
  bad = kNoDecay;
  bad.eps = -1e-8;
  expect_invalid([&] { cpu::adamw_step<double>(p, g, m, v, bad, 0.1, 1); }, "eps");
  bad = kNoDecay;
  bad.weight_decay = -0.01;
  expect_invalid([&] { cpu::adamw_step<double>(p, g, m, v, bad, 0.1, 1); }, "weight_decay");
  Vec short_v(1);
  expect_invalid([&] { cpu::adamw_step<double>(p, g, m, short_v, kNoDecay, 0.1, 1); },
                 "params and v lengths differ: 2 vs 1");
}

// ---------------------------------------------------------------------------------------------
// Gradient clipping

TEST(ClipTest, SumOfSquaresAccumulatesInDouble) {
  EXPECT_EQ(cpu::sum_of_squares(std::vector<float>{3.0f, -4.0f}), 25.0);
  EXPECT_EQ(cpu::sum_of_squares(Vec{1.5, 2.0}), 6.25);
  EXPECT_EQ(cpu::sum_of_squares(std::vector<float>{}), 0.0);
  // 2^48 + 4: a float accumulator would lose the four 1s (float spacing at 2^48 is 2^25).
  const std::vector<float> big = {16777216.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(cpu::sum_of_squares(big), 281474976710660.0);
}

// A backend's total over pieces (the optimizer's gradient tensors) is the sum of the pieces' sums.
TEST(ClipTest, TotalSumOfSquaresAddsThePieces) {
  cpu::CpuBackend be;
  const std::vector<float> values = {3.0f, -4.0f, 100.0f, 1.0f, 2.0f};
  const CFSpan all(values);
  const std::vector<CFSpan> pieces = {all.subspan(0, 2), all.subspan(3, 2), all.subspan(2, 0)};
  EXPECT_EQ(be.total_sum_of_squares(pieces), 25.0 + 5.0);
  EXPECT_EQ(be.total_sum_of_squares({}), 0.0);
}

TEST(ClipTest, ClipCoefficientIsMegatrons) {
  EXPECT_EQ(cpu::clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(cpu::clip_coefficient(0.0, 1.0), 1.0);
  EXPECT_EQ(cpu::clip_coefficient(10.0, 1.0), 1.0 / (10.0 + 1e-6));
  // total_norm + 1e-6 above max_norm clips (a factor just under 1); below it, no clipping.
  EXPECT_EQ(cpu::clip_coefficient(1.0, 1.0), 1.0 / (1.0 + 1e-6));
  EXPECT_EQ(cpu::clip_coefficient(1.0 - 2e-6, 1.0), 1.0);
  expect_invalid([] { cpu::clip_coefficient(1.0, 0.0); }, "max_norm");
  expect_invalid([] { cpu::clip_coefficient(-1.0, 1.0); }, "total_norm");
  expect_invalid([] { cpu::clip_coefficient(std::nan(""), 1.0); }, "total_norm");
  expect_invalid([] { cpu::clip_coefficient(INFINITY, 1.0); }, "total_norm");
}

TEST(ClipTest, ScaleInPlace) {
  Vec d = {1.0, 2.0, -3.0};
  cpu::scale_in_place(d, 0.5);
  EXPECT_EQ(d, (Vec{0.5, 1.0, -1.5}));
  std::vector<float> f = {1.0f, -2.0f};
  cpu::scale_in_place(f, 0.1);
  EXPECT_EQ(f[0], 0.1f);  // the factor is rounded to float first
  EXPECT_EQ(f[1], -2.0f * 0.1f);
}

// Clipping by the global norm over two parameter shards: norm sqrt(3^2 + 4^2 + 12^2) = 13, and
// after scaling the concatenation has norm max_norm (to the 1e-6 of Megatron's denominator).
TEST(ClipTest, GlobalNormClippingOverShards) {
  std::vector<float> a = {3.0f, 4.0f};
  std::vector<float> b = {12.0f};
  const double norm = std::sqrt(cpu::sum_of_squares(a) + cpu::sum_of_squares(b));
  EXPECT_EQ(norm, 13.0);
  const double coeff = cpu::clip_coefficient(norm, 1.0);
  cpu::scale_in_place(a, coeff);
  cpu::scale_in_place(b, coeff);
  const double clipped = std::sqrt(cpu::sum_of_squares(a) + cpu::sum_of_squares(b));
  EXPECT_NEAR(clipped, 13.0 / (13.0 + 1e-6), 1e-6);
  EXPECT_LT(clipped, 1.0);
}

// ---------------------------------------------------------------------------------------------
// Learning-rate schedule

LearningRateSchedule gpt_schedule(LearningRateSchedule::Style style) {
  return {.max_lr = 6e-4, .min_lr = 6e-5, .warmup_iters = 10, .decay_iters = 110, .style = style};
}

TEST(LrScheduleTest, LinearWarmupFromZero) {
  for (const auto style : {LearningRateSchedule::kConstant, LearningRateSchedule::kLinear,
                           LearningRateSchedule::kCosine}) {
    const LearningRateSchedule s = gpt_schedule(style);
    EXPECT_NEAR(learning_rate(s, 0), 0.0, 1e-18);
    EXPECT_NEAR(learning_rate(s, 1), 6e-5, 1e-18);
    EXPECT_NEAR(learning_rate(s, 5), 3e-4, 1e-18);
    EXPECT_NEAR(learning_rate(s, 10), 6e-4, 1e-18);
  }
}

TEST(LrScheduleTest, LinearDecay) {
  const LearningRateSchedule s = gpt_schedule(LearningRateSchedule::kLinear);
  // ratio = (step - 10) / 100; lr = 6e-5 + 5.4e-4 (1 - ratio)
  EXPECT_NEAR(learning_rate(s, 11), 6e-5 + 5.4e-4 * 0.99, 1e-18);
  EXPECT_NEAR(learning_rate(s, 35), 4.65e-4, 1e-18);  // ratio 0.25
  EXPECT_NEAR(learning_rate(s, 60), 3.3e-4, 1e-18);   // ratio 0.5
  EXPECT_NEAR(learning_rate(s, 110), 6e-5, 1e-18);    // ratio 1
  EXPECT_EQ(learning_rate(s, 111), 6e-5);
  EXPECT_EQ(learning_rate(s, 100000), 6e-5);
}

TEST(LrScheduleTest, CosineDecay) {
  const LearningRateSchedule s = gpt_schedule(LearningRateSchedule::kCosine);
  // lr = 6e-5 + 5.4e-4 * 0.5 (cos(pi ratio) + 1)
  EXPECT_NEAR(learning_rate(s, 35), 6e-5 + 5.4e-4 * (0.5 + std::numbers::sqrt2 / 4), 1e-18);
  EXPECT_NEAR(learning_rate(s, 60), 3.3e-4, 1e-18);  // cos(pi/2) = 0
  EXPECT_NEAR(learning_rate(s, 85), 6e-5 + 5.4e-4 * (0.5 - std::numbers::sqrt2 / 4), 1e-18);
  EXPECT_NEAR(learning_rate(s, 110), 6e-5, 1e-18);
  EXPECT_EQ(learning_rate(s, 500), 6e-5);
  // Non-increasing after warm-up, within [min_lr, max_lr].
  double previous = learning_rate(s, 10);
  for (int64_t step = 11; step <= 120; ++step) {
    const double lr = learning_rate(s, step);
    EXPECT_LE(lr, previous) << step;
    EXPECT_GE(lr, 6e-5) << step;
    previous = lr;
  }
}

TEST(LrScheduleTest, ConstantNeverDecays) {
  const LearningRateSchedule s = gpt_schedule(LearningRateSchedule::kConstant);
  EXPECT_EQ(learning_rate(s, 11), 6e-4);
  EXPECT_EQ(learning_rate(s, 110), 6e-4);
  EXPECT_EQ(learning_rate(s, 1000), 6e-4);  // past decay_iters too, as Megatron
}

TEST(LrScheduleTest, NoWarmup) {
  const LearningRateSchedule s{.max_lr = 1.0,
                               .min_lr = 0.0,
                               .warmup_iters = 0,
                               .decay_iters = 4,
                               .style = LearningRateSchedule::kLinear};
  EXPECT_EQ(learning_rate(s, 0), 1.0);
  EXPECT_EQ(learning_rate(s, 1), 0.75);
  EXPECT_EQ(learning_rate(s, 2), 0.5);
  EXPECT_EQ(learning_rate(s, 4), 0.0);
  // warmup == decay == 0: max_lr at step 0, min_lr after.
  const LearningRateSchedule flat{.max_lr = 1.0,
                                  .min_lr = 0.1,
                                  .warmup_iters = 0,
                                  .decay_iters = 0,
                                  .style = LearningRateSchedule::kCosine};
  EXPECT_EQ(learning_rate(flat, 0), 1.0);
  EXPECT_EQ(learning_rate(flat, 1), 0.1);
}

TEST(LrScheduleErrorTest, NamesTheBadField) {
  const LearningRateSchedule good = gpt_schedule(LearningRateSchedule::kCosine);
  LearningRateSchedule s = good;
  s.max_lr = 0;
  expect_invalid([&] { learning_rate(s, 1); }, "max_lr must be > 0");
  s = good;
  s.min_lr = 1e-3;
  expect_invalid([&] { learning_rate(s, 1); }, "min_lr must be in [0, max_lr");
  s.min_lr = -1e-5;
  expect_invalid([&] { learning_rate(s, 1); }, "min_lr");
  s = good;
  s.warmup_iters = -1;
  expect_invalid([&] { learning_rate(s, 1); }, "warmup_iters must be >= 0");
  s = good;
  s.decay_iters = 5;
  expect_invalid([&] { learning_rate(s, 1); }, "decay_iters must be >= warmup_iters = 10");
  expect_invalid([&] { learning_rate(good, -1); }, "step must be >= 0");
}

}  // namespace
}  // namespace traintwin::exec
