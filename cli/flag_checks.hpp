// Checks of numeric flag values with traintwin's messages ("--repeats: must be a number > 0, got
// 0"), in place of CLI11's PositiveNumber / NonNegativeNumber, whose range messages print the
// largest double in full (309 digits). The commands (cli/*_command.cpp) attach them with
// ->check(); CLI11 prefixes the flag's name.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>

#include "core/text.hpp"

namespace traintwin::cli {

/// A finite number in [min, max] (min excluded when `min_open`); the message names the range.
inline CLI::Validator number_in(double min, bool min_open, double max) {
  const std::string range = std::isinf(max)
                                ? fmt::format("{} {}", min_open ? ">" : ">=", min)
                                : fmt::format("in {}{}, {}]", min_open ? "(" : "[", min, max);
  return CLI::Validator(
      [min, min_open, max, range](std::string& text) -> std::string {
        const std::optional<double> v = parse_number_text(text);
        const bool ok = v && (min_open ? *v > min : *v >= min) && *v <= max;
        return ok ? std::string() : fmt::format("must be a number {}, got {}", range, text);
      },
      "NUMBER " + range);
}

/// > 0.
inline CLI::Validator positive_number() { return number_in(0, true, INFINITY); }
/// >= 0.
inline CLI::Validator non_negative_number() { return number_in(0, false, INFINITY); }

}  // namespace traintwin::cli
