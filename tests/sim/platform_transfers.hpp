// Timed transfers on a SimGrid platform for the platform tests (platform_test.cpp,
// platform_overrides_test.cpp, nvlink_domain_test.cpp): start a transfer between two GPUs' NIC hosts, run the one Engine
// of the test process until all are done, and compare durations against closed forms.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <simgrid/s4u.hpp>
#include <vector>

#include "sim/platform.hpp"
#include "simgrid_test_engine.hpp"

namespace traintwin::testing {

/// Starts a transfer of `bytes` from GPU `src` to GPU `dst` of `p` now (Platform::endpoints).
inline simgrid::s4u::CommPtr transfer(const Platform& p, int64_t src, int64_t dst, double bytes) {
  const auto [from, to] = p.endpoints(src, dst);
  simgrid::s4u::CommPtr c = simgrid::s4u::Comm::sendto_init(from, to);
  c->set_payload_size(bytes);
  c->start();
  return c;
}

/// Runs the test process's Engine until every started transfer is done; the durations of
/// `comms` in seconds, in order.
inline std::vector<double> run(const std::vector<simgrid::s4u::CommPtr>& comms) {
  simgrid_test_engine().run();
  std::vector<double> out;
  for (const simgrid::s4u::CommPtr& c : comms)
    out.push_back(c->get_finish_time() - c->get_start_time());
  return out;
}

/// Expects `actual` within `relative` of `expected` (a fraction), printing the relative error.
inline void expect_close(double actual, double expected, double relative) {
  EXPECT_NEAR(actual, expected, relative * expected)
      << "relative error " << (actual - expected) / expected;
}

}  // namespace traintwin::testing
