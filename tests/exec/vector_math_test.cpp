// The fp32 approximations of exec/cpu/vector_math.hpp and the fp32 kernels built on them (GELU,
// vocab-parallel cross-entropy) against float64 references: the maximum errors their headers
// state, measured on dense grids, and the edge cases (under/overflow, NaN, -inf logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "exec/cpu/gelu.hpp"
#include "exec/cpu/vector_math.hpp"
#include "exec/cpu/vocab_parallel_cross_entropy.hpp"

namespace traintwin::exec::cpu {
namespace {

// n points evenly spaced over [lo, hi], and every float of [-2^-10, 2^-10] at a coarser step.
std::vector<float> grid(double lo, double hi, int n) {
  std::vector<float> xs;
  xs.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) xs.push_back(static_cast<float>(lo + (hi - lo) * i / (n - 1)));
  for (float x = -1.0f / 1024; x <= 1.0f / 1024; x += 1.0f / (1 << 20)) xs.push_back(x);
  xs.push_back(0.0f);
  xs.push_back(-0.0f);
  return xs;
}

double gelu_ref(double x) {  // GPT-2's tanh form in float64
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double u = k * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

TEST(VectorMathTest, ExpRelativeErrorBelowStatedBound) {
  double worst = 0;
  float worst_x = 0;
  for (float x : grid(-87.0, 88.0, 2'000'001)) {
    const double ref = std::exp(static_cast<double>(x));
    const double err = std::abs(exp_approx(x) - ref) / ref;
    if (err > worst) worst = err, worst_x = x;
  }
  std::printf("exp_approx: max relative error %.3g at x = %.9g (2e6 points on [-87, 88])\n", worst,
              static_cast<double>(worst_x));
  EXPECT_LE(worst, 3e-7);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
}

TEST(VectorMathTest, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_approx(-inf), 0.0f);
  EXPECT_EQ(exp_approx(-100.0f), 0.0f);
  EXPECT_EQ(exp_approx(inf), inf);
  EXPECT_EQ(exp_approx(100.0f), inf);
  EXPECT_TRUE(std::isnan(exp_approx(std::numeric_limits<float>::quiet_NaN())));
  // The last normal results on each side are still accurate.
  EXPECT_NEAR(exp_approx(-87.0f) / std::exp(-87.0), 1.0, 3e-7);
  EXPECT_NEAR(exp_approx(88.0f) / std::exp(88.0), 1.0, 3e-7);
}

TEST(VectorMathTest, SigmoidRelativeErrorBelowStatedBound) {
  double worst = 0;
  for (float x : grid(-87.0, 87.0, 1'000'001)) {
    const double ref = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    worst = std::max(worst, std::abs(sigmoid_approx(x) - ref) / ref);
  }
  std::printf("sigmoid_approx: max relative error %.3g\n", worst);
  EXPECT_LE(worst, 6e-7);
  EXPECT_EQ(sigmoid_approx(-100.0f), 0.0f);
  EXPECT_EQ(sigmoid_approx(100.0f), 1.0f);
}

// GELU in fp32 (the executor's path) against GPT-2's tanh formula in float64: output and local
// gradient within 1.5e-7 and 4e-7 times (1 + |x|), the bounds gelu.hpp states.
TEST(VectorMathTest, GeluFloatMatchesFloat64Formula) {
  const std::vector<float> xs = grid(-20.0, 20.0, 400'001);
  std::vector<float> out(xs.size()), grad(xs.size(), 0.0f);
  const std::vector<float> ones(xs.size(), 1.0f);
  gelu_forward<float>(out, xs);
  gelu_backward<float>(grad, xs, ones);  // dinp starts at 0, dout = 1: the local gradient
  double worst_out = 0, worst_grad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    worst_out = std::max(worst_out, std::abs(out[i] - gelu_ref(x)) / (1 + std::abs(x)));
    worst_grad = std::max(worst_grad, std::abs(grad[i] - gelu_grad_ref(x)) / (1 + std::abs(x)));
  }
  std::printf("gelu fp32: max |error| / (1 + |x|): output %.3g, gradient %.3g\n", worst_out,
              worst_grad);
  EXPECT_LE(worst_out, 1.5e-7);
  EXPECT_LE(worst_grad, 4e-7);
  // Backward accumulates.
  std::vector<float> acc = {1.0f};
  const std::vector<float> one_x = {0.5f}, two = {2.0f};
  gelu_backward<float>(acc, one_x, two);
  EXPECT_NEAR(acc[0], 1.0 + 2.0 * gelu_grad_ref(0.5), 1e-6);
}

// The fp32 vocab-parallel cross-entropy (vectorized max, sum of exp, softmax gradient) against
// the float64 instantiation on logits of a GPT-sized spread, over two shards of a vocabulary
// whose size is not a multiple of the 16 lanes; a -inf logit (a masked entry) contributes 0.
TEST(VectorMathTest, VocabParallelCrossEntropyFloatMatchesDouble) {
  constexpr int64_t kRows = 6, kVocab = 1003, kHalf = 501;
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 4.0);
  std::vector<double> logits(kRows * kVocab);
  for (double& l : logits) l = normal(rng);
  logits[3] = -std::numeric_limits<double>::infinity();
  const std::vector<int32_t> targets = {0, 500, 501, 1002, 17, 900};
  std::vector<double> losses_ref;
  std::vector<float> losses_f;
  std::vector<double> grad_ref(kRows * kVocab, 0.0);
  std::vector<float> grad_f(kRows * kVocab, 0.0f);
  auto run = [&](auto scalar, auto& losses, auto& grad) {
    using S = decltype(scalar);
    const std::vector<S> all(logits.begin(), logits.end());
    const int64_t starts[2] = {0, kHalf}, sizes[2] = {kHalf, kVocab - kHalf};
    std::vector<std::vector<S>> shard(2);
    std::vector<S> max(kRows), sum(kRows, S{0}), target(kRows, S{0});
    for (int s = 0; s < 2; ++s) {
      for (int64_t r = 0; r < kRows; ++r) {
        shard[s].insert(shard[s].end(), all.begin() + r * kVocab + starts[s],
                        all.begin() + r * kVocab + starts[s] + sizes[s]);
      }
      std::vector<S> m(kRows);
      vocab_parallel_logits_max<S>(m, shard[s], kRows, 1, sizes[s]);
      for (int64_t r = 0; r < kRows; ++r) max[r] = s == 0 ? m[r] : std::max(max[r], m[r]);
    }
    for (int s = 0; s < 2; ++s) {
      std::vector<S> se(kRows), tl(kRows);
      vocab_parallel_sum_exp<S>(se, tl, shard[s], max, targets, kRows, 1, starts[s], sizes[s],
                                kVocab);
      for (int64_t r = 0; r < kRows; ++r) sum[r] += se[r], target[r] += tl[r];
    }
    losses.assign(kRows, S{0});
    vocab_parallel_cross_entropy_loss<S>(losses, sum, max, target, kRows, 1);
    const std::vector<S> dloss(kRows, S{0.5});
    for (int s = 0; s < 2; ++s) {
      std::vector<S> g(kRows * sizes[s], S{0});
      vocab_parallel_cross_entropy_backward<S>(g, dloss, shard[s], max, sum, targets, kRows, 1,
                                               starts[s], sizes[s], kVocab);
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t v = 0; v < sizes[s]; ++v) grad[r * kVocab + starts[s] + v] = g[r * sizes[s] + v];
      }
    }
  };
  run(double{}, losses_ref, grad_ref);
  run(float{}, losses_f, grad_f);
  for (int64_t r = 0; r < kRows; ++r) {
    EXPECT_NEAR(losses_f[r], losses_ref[r], 2e-6 * std::abs(losses_ref[r])) << "row " << r;
    for (int64_t v = 0; v < kVocab; ++v) {
      ASSERT_NEAR(grad_f[r * kVocab + v], grad_ref[r * kVocab + v], 1e-6) << r << "," << v;
    }
  }
  EXPECT_EQ(grad_f[3], 0.0f);  // exp(-inf) = 0: the masked logit's probability
}

}  // namespace
}  // namespace traintwin::exec::cpu
