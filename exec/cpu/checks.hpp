// Argument checks shared by the CPU layers: array lengths against their shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace traintwin::exec::cpu {

/// Throws InvalidArgument "<layer>: <name> has N elements, expected M" when they differ.
inline void require_size(const char* layer, size_t actual, int64_t expected, const char* name) {
  if (static_cast<int64_t>(actual) != expected) {
    throw InvalidArgument(std::string(layer) + ": " + name + " has " + std::to_string(actual) +
                          " elements, expected " + std::to_string(expected));
  }
}

/// Throws InvalidArgument "<layer>: <name> must be >= 1, got N" when value < 1.
inline void require_positive(const char* layer, int64_t value, const char* name) {
  if (value < 1) {
    throw InvalidArgument(std::string(layer) + ": " + name + " must be >= 1, got " +
                          std::to_string(value));
  }
}

/// Throws InvalidArgument "<layer>: <what> lengths differ: a vs b" when a != b.
inline void require_same(const char* layer, size_t a, size_t b, const char* what) {
  if (a != b) {
    throw InvalidArgument(std::string(layer) + ": " + what + " lengths differ: " +
                          std::to_string(a) + " vs " + std::to_string(b));
  }
}

}  // namespace traintwin::exec::cpu
