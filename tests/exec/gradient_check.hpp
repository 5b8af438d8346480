// Helpers of the CPU-layer tests: seeded random inputs and the float64 finite-difference check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace traintwin::exec {

using Vec = std::vector<double>;

/// n values uniform in [-scale, scale), from mt19937(seed).
inline Vec random_vec(int64_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  Vec v(static_cast<size_t>(n));
  for (double& x : v) x = dist(gen);
  return v;
}

/// n token ids uniform in [0, vocab), from mt19937(seed).
inline std::vector<int32_t> random_tokens(int64_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = dist(gen);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

/// Checks every element of `analytic` against the central difference (L(x+h) - L(x-h)) / 2h of
/// `loss` with respect to x[i] (h 1e-6, tolerance 1e-6 relative + 1e-9); x is restored.
inline void expect_gradient(Vec& x, const Vec& analytic, const std::function<double()>& loss,
                            const std::string& name) {
  ASSERT_EQ(x.size(), analytic.size()) << name;
  constexpr double kH = 1e-6;
  constexpr double kRtol = 1e-6;
  constexpr double kAtol = 1e-9;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kH;
    const double plus = loss();
    x[i] = saved - kH;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * kH);
    const double tol = kRtol * std::max(std::abs(numeric), std::abs(analytic[i])) + kAtol;
    EXPECT_NEAR(analytic[i], numeric, tol) << name << "[" << i << "]";
  }
}

}  // namespace traintwin::exec
