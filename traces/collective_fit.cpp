// The alpha-beta fit of collective rows; see collective_fit.hpp.
#include "traces/collective_fit.hpp"

namespace traintwin {

AlphaBeta fit_alpha_beta(std::span<const CollectiveMeasurement> rows) {
  double sw = 0, swx = 0, swxx = 0, swt = 0, swxt = 0;
  for (const CollectiveMeasurement& c : rows) {
    const double x = static_cast<double>(c.bytes), t = c.time_us * 1e-6, w = 1.0 / (t * t);
    sw += w;
    swx += w * x;
    swxx += w * x * x;
    swt += w * t;
    swxt += w * x * t;
  }
  if (rows.size() < 2) return {};
  const double det = sw * swxx - swx * swx;
  if (!(det > 1e-12 * sw * swxx)) return {};  // one size only
  double c = (sw * swxt - swx * swt) / det;  // seconds per byte
  double a = (swt - c * swx) / sw;
  if (a < 0) {
    a = 0;
    c = swxt / swxx;
  }
  if (!(c > 0)) return {};
  return {a, 1.0 / c};
}

}  // namespace traintwin
