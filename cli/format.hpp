// Small text formatters shared by the subcommands (the CLI prints; libraries do not).
#pragma once

#include <fmt/format.h>

#include <string>

namespace traintwin::cli {

/// 2^30-based bytes: "12.34 GiB".
inline std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

/// Count with an SI suffix: 174.6e9 -> "174.60 B" style as "174.60e9".
inline std::string si(double x) {
  const char* suffix[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  while (x >= 1000.0 && i < 6) {
    x /= 1000.0;
    ++i;
  }
  return fmt::format("{:.2f}{}", x, suffix[i]);
}

}  // namespace traintwin::cli
