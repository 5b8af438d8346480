// Grid refits of the roofline's efficiencies and their leave-one-out errors
// (sim/calibration_refit.hpp).
#include "sim/calibration_refit.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace traintwin {
namespace {

void check_list(const std::vector<double>& values, const char* name) {
  if (values.empty()) throw InvalidArgument(fmt::format("refit grid: {} has no values", name));
  for (double v : values) {
    if (!(v > 0 && v <= 1)) {
      throw InvalidArgument(fmt::format("refit grid: {} efficiency {} outside (0, 1]", name, v));
    }
  }
}

void check_time(double t, const char* what) {
  if (!std::isfinite(t) || !(t > 0)) {
    throw InvalidArgument(
        fmt::format("refit: {} time {} is not a positive number of seconds", what, t));
  }
}

}  // namespace

std::vector<RooflineEfficiency> RefitGrid::points(const RooflineEfficiency& base) const {
  check_list(gemm, "gemm");
  check_list(attention, "attention");
  check_list(memory, "memory");
  std::vector<RooflineEfficiency> out;
  out.reserve(gemm.size() * attention.size() * memory.size());
  for (double g : gemm) {
    for (double a : attention) {
      for (double m : memory) {
        RooflineEfficiency e = base;
        e.gemm = g;
        e.attention = a;
        e.memory = m;
        out.push_back(e);
      }
    }
  }
  return out;
}

RefitGrid default_refit_grid() {
  return RefitGrid{{0.56, 0.60, 0.64, 0.68, 0.72, 0.76}, {0.45, 0.55}, {0.5, 0.6, 0.7, 0.8}};
}

GridFit fit_grid_point(const std::vector<std::vector<double>>& predicted_s,
                       const std::vector<double>& measured_s, const std::vector<size_t>& cases) {
  if (predicted_s.empty()) throw InvalidArgument("refit: the grid has no points");
  if (cases.empty()) throw InvalidArgument("refit: no cases to fit on");
  for (size_t c : cases) {
    if (c >= measured_s.size()) {
      throw InvalidArgument(fmt::format("refit: case {} of {}", c, measured_s.size()));
    }
    check_time(measured_s[c], "measured");
  }
  GridFit best{0, std::numeric_limits<double>::infinity()};
  for (size_t p = 0; p < predicted_s.size(); ++p) {
    const std::vector<double>& row = predicted_s[p];
    if (row.size() != measured_s.size()) {
      throw InvalidArgument(fmt::format("refit: grid point {} has {} predictions for {} cases", p,
                                        row.size(), measured_s.size()));
    }
    double sum = 0;
    for (size_t c : cases) {
      check_time(row[c], "predicted");
      sum += std::abs(row[c] - measured_s[c]) / measured_s[c];
    }
    const double mape = sum / static_cast<double>(cases.size());
    if (mape < best.mape) best = GridFit{p, mape};
  }
  return best;
}

std::vector<HeldOutPrediction> leave_one_out_refit(
    const std::vector<std::vector<double>>& predicted_s, const std::vector<double>& measured_s) {
  const size_t n = measured_s.size();
  if (n < 2) throw InvalidArgument(fmt::format("refit: leave-one-out needs two cases (got {})", n));
  std::vector<HeldOutPrediction> out;
  out.reserve(n);
  for (size_t held = 0; held < n; ++held) {
    std::vector<size_t> others;
    for (size_t c = 0; c < n; ++c) {
      if (c != held) others.push_back(c);
    }
    const GridFit fit = fit_grid_point(predicted_s, measured_s, others);
    const double t = predicted_s[fit.point][held];
    check_time(t, "predicted");
    out.push_back(HeldOutPrediction{fit.point, t, (t - measured_s[held]) / measured_s[held]});
  }
  return out;
}

}  // namespace traintwin
