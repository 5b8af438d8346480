// The latency-bandwidth (alpha-beta, Hockney) model of measured collective rows: time = alpha +
// bytes / beta, fitted to nccl-tests style rows of one op and group size. Used for this host's
// link in the topology `traintwin profile --topology-out` writes (send_recv rows) and by the
// simulator's measured collectives (sim/measured_collectives.hpp).
#pragma once

#include <span>

#include "traces/cost_db.hpp"

namespace traintwin {

/// alpha_s: the fixed cost of one call in seconds; beta_Bps: bytes (nccl-tests "size") per
/// second. Both 0 when the rows cannot determine them.
struct AlphaBeta {
  double alpha_s = 0;
  double beta_Bps = 0;
};

/// Weighted least squares of t = alpha + bytes / beta over `rows` with weights 1 / t^2 (each
/// row's relative error counts the same, so the 8-byte rows fix alpha and the large ones beta).
/// When the fit gives alpha < 0 it is redone through the origin (alpha = 0). Fewer than two
/// rows, or rows of one size only, give {0, 0}. Rows are not filtered: pass one op and group
/// size.
AlphaBeta fit_alpha_beta(std::span<const CollectiveMeasurement> rows);

}  // namespace traintwin
