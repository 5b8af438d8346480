// The message of the ConfigError a piece of code throws, for tests of bad input.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"

namespace traintwin::testing {

/// Runs `f` and returns the ConfigError message it throws ("" and a test failure if none).
template <typename F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

}  // namespace traintwin::testing
