// Small text formatters shared by the subcommands (the CLI prints; libraries do not).
#pragma once

#include <fmt/format.h>

#include <string>

#include "core/error.hpp"

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

/// A size as nccl-tests' -b/-e take it: "8", "64K", "128M", "8G" (2^10 multiples). Throws
/// ConfigError naming the value otherwise.
inline int64_t parse_nccl_size(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw ConfigError("size '" + text + "': expected a number with an optional K, M or G (as nccl-tests -b/-e)");
  }
  const std::string unit = text.substr(used);
  double mult = 1;
  if (unit == "K") mult = 1024.0;
  else if (unit == "M") mult = 1024.0 * 1024;
  else if (unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) throw ConfigError("size '" + text + "': unit must be K, M or G (as nccl-tests -b/-e)");
  return static_cast<int64_t>(v * mult);
}

/// The two header lines of an nccl-tests table (size count type redop time algbw busbw), the
/// columns our real and simulated collective benchmarks share, plus an optional last column.
inline std::string nccl_tests_header(const std::string& last = "") {
  return fmt::format("# {:>12} {:>12} {:>8} {:>6} {:>10} {:>9} {:>9}  {}\n", "size", "count", "type",
                     "redop", "time", "algbw", "busbw", last) +
         fmt::format("# {:>12} {:>12} {:>8} {:>6} {:>10} {:>9} {:>9}\n", "(B)", "(elements)", "", "",
                     "(us)", "(GB/s)", "(GB/s)");
}

/// One row of that table.
inline std::string nccl_tests_row(int64_t bytes, int64_t count, const std::string& redop,
                                  double time_us, double algbw_GBps, double busbw_GBps,
                                  const std::string& last = "") {
  return fmt::format("  {:>12} {:>12} {:>8} {:>6} {:>10.2f} {:>9.2f} {:>9.2f}  {}\n", bytes, count,
                     "float", redop, time_us, algbw_GBps, busbw_GBps, last);
}

}  // namespace traintwin::cli
