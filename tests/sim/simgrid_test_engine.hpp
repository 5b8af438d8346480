// The one SimGrid Engine of a test process (SimGrid allows one per process; ctest runs each TEST
// in its own), with SimGrid's logging below warnings silenced.
#pragma once

#include <xbt/log.h>

#include <simgrid/s4u/Engine.hpp>

namespace traintwin::testing {

/// Created on first use; the same Engine for every later call in this process.
inline simgrid::s4u::Engine& simgrid_test_engine() {
  static int argc = 1;
  static char* argv[] = {const_cast<char*>("test"), nullptr};
  xbt_log_control_set("root.thresh:warning");
  static simgrid::s4u::Engine e(&argc, argv);
  return e;
}

}  // namespace traintwin::testing
