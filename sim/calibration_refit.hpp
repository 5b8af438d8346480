// Leave-one-out errors of the roofline's fitted efficiencies (issue 24): the roofline's
// efficiencies (sim/cost_model.hpp, default_roofline_efficiency) were fitted on published runs,
// so its error on those runs is in-sample. `validate --leave-one-out` simulates every case of a
// calibration file at every point of a grid of (gemm, attention, memory) efficiencies
// (sim/validation.hpp, simulate_validation_case); the functions here then pick, for each case,
// the point that fits the *other* cases best and report the case's error there. The fit is the
// one the defaults were chosen by: the smallest mean absolute relative error over the grid.
// Next in the flow: cli/validate_command.cpp prints both errors.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/cost_model.hpp"

namespace traintwin {

/// The grid of roofline efficiencies a refit searches: every combination of the three lists.
/// Each value lies in (0, 1].
struct RefitGrid {
  std::vector<double> gemm;
  std::vector<double> attention;
  std::vector<double> memory;

  /// Every point, gemm slowest-varying then attention then memory; the other fields (vector,
  /// launch overhead) from `base`. Throws InvalidArgument for an empty list or a value outside
  /// (0, 1] (naming the list).
  std::vector<RooflineEfficiency> points(const RooflineEfficiency& base) const;
};

/// The grid default_roofline_efficiency() was chosen on (its comment): gemm 0.56-0.76 in steps of
/// 0.04, attention 0.45 and 0.55, memory 0.5-0.8 in steps of 0.1 (48 points; the defaults 0.68 /
/// 0.45 / 0.70 are one of them).
RefitGrid default_refit_grid();

/// The best grid point over a set of cases.
struct GridFit {
  size_t point = 0;  ///< index into the grid's points()
  double mape = 0;   ///< mean |predicted - measured| / measured over the cases fitted on
};

/// The grid point with the smallest mean absolute relative error over `cases` (indices into
/// `measured_s`); ties go to the lower index. `predicted_s[point][case]` is the iteration time
/// (s) the simulation gives for that case at that point. Throws InvalidArgument for an empty grid
/// or case set, a row whose length differs from `measured_s`, an index out of range, or a
/// non-positive or non-finite time.
GridFit fit_grid_point(const std::vector<std::vector<double>>& predicted_s,
                       const std::vector<double>& measured_s, const std::vector<size_t>& cases);

/// One case predicted by a fit that never saw it.
struct HeldOutPrediction {
  size_t point = 0;        ///< the grid point fitted on the other cases
  double predicted_s = 0;  ///< predicted_s[point][case]
  double error = 0;        ///< (predicted - measured) / measured
};

/// Leave-one-out: for each case i, fit_grid_point() on every other case, then case i's
/// prediction at that point. Needs at least two cases; throws as fit_grid_point().
std::vector<HeldOutPrediction> leave_one_out_refit(
    const std::vector<std::vector<double>>& predicted_s, const std::vector<double>& measured_s);

}  // namespace traintwin
