// Small text formatters shared by the subcommands (the CLI prints; libraries do not).
#pragma once

#include <fmt/format.h>

#include <charconv>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "core/scenario.hpp"

namespace traintwin::cli {

/// The activation recomputation a run uses: "none", "selective", "full", or "selective (op)"
/// for torchtitan's op-level selective checkpointing (training.selective_ac_option op).
inline std::string recompute_text(const TrainingConfig& t) {
  if (t.recompute_granularity == RecomputeGranularity::kSelective &&
      t.selective_ac_option == SelectiveAcOption::kOp) {
    return "selective (op)";
  }
  return to_string(t.recompute_granularity);
}

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

/// A size as nccl-tests' -b/-e take it: a positive integer with an optional K, M or G (2^10
/// steps), at most 1 TiB: "8", "64K", "128M", "8G". Throws ConfigError naming `flag` and the
/// value otherwise (zero, negative, NaN, a fraction, "1e21" or an unknown unit).
inline int64_t parse_nccl_size(const std::string& text, const std::string& flag = "size") {
  constexpr int64_t kMaxBytes = int64_t{1} << 40;
  const auto invalid = [&](const std::string& why) {
    return ConfigError(flag + " '" + text + "': " + why +
                       " (allowed: an integer number of bytes from 1 to 1T, with an optional "
                       "unit K, M or G as nccl-tests -b/-e, e.g. 8, 64K, 8G)");
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) throw invalid("not a size");
  const std::string unit = text.substr(digits);
  int shift = 0;
  if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (!unit.empty()) throw invalid("unknown unit '" + unit + "'");
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (ec != std::errc() || end != text.data() + digits || value > (kMaxBytes >> shift)) {
    throw invalid("larger than 1 TiB");
  }
  if (value == 0) throw invalid("zero bytes");
  return value << shift;
}

/// -b and -e of an nccl-tests style command as a size range; ConfigError unless min <= max.
inline std::pair<int64_t, int64_t> parse_nccl_size_range(const std::string& min_text,
                                                         const std::string& max_text) {
  const int64_t lo = parse_nccl_size(min_text, "-b/--minbytes");
  const int64_t hi = parse_nccl_size(max_text, "-e/--maxbytes");
  if (lo > hi) {
    throw ConfigError(fmt::format("-b/--minbytes {} ({} bytes) is larger than -e/--maxbytes {} "
                                  "({} bytes) (rule: minbytes <= maxbytes)",
                                  min_text, lo, max_text, hi));
  }
  return {lo, hi};
}

/// The two header lines of an nccl-tests table (size count type redop time algbw busbw), the
/// columns our real and simulated collective benchmarks share, plus an optional last column.
inline std::string nccl_tests_header(const std::string& last = "") {
  return fmt::format("# {:>12} {:>12} {:>8} {:>6} {:>10} {:>9} {:>9}  {}\n", "size", "count", "type",
                     "redop", "time", "algbw", "busbw", last) +
         fmt::format("# {:>12} {:>12} {:>8} {:>6} {:>10} {:>9} {:>9}\n", "(B)", "(elements)", "", "",
                     "(us)", "(GB/s)", "(GB/s)");
}

/// nccl-tests' full header (its src/common.cu): size, count, type, redop, root, then time, algbw,
/// busbw and #wrong out of place and in place, then `last` (extra columns of ours).
inline std::string nccl_tests_inplace_header(const std::string& last = "") {
  return fmt::format("# {:>71}{:>35}\n", "out-of-place", "in-place") +
         fmt::format("# {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>6} {:>10} {:>8} "
                     "{:>8} {:>6}  {}\n",
                     "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                     "time", "algbw", "busbw", "#wrong", last) +
         fmt::format("# {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>6} {:>10} {:>8} "
                     "{:>8} {:>6}\n",
                     "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                     "(GB/s)", "(GB/s)", "");
}

/// One row of that table: a simulated collective, whose in-place run takes the out-of-place
/// time (NCCL runs the same kernels; only the buffers alias), #wrong "N/A" as nccl-tests prints
/// without data checks (-c 0), root -1 for the collectives without one.
inline std::string nccl_tests_inplace_row(int64_t bytes, int64_t count, const std::string& redop,
                                          double time_us, double algbw_GBps, double busbw_GBps,
                                          const std::string& last = "") {
  return fmt::format("  {:>12} {:>12} {:>8} {:>6} {:>6} {:>10.2f} {:>8.2f} {:>8.2f} {:>6} "
                     "{:>10.2f} {:>8.2f} {:>8.2f} {:>6}  {}\n",
                     bytes, count, "float", redop, -1, time_us, algbw_GBps, busbw_GBps, "N/A",
                     time_us, algbw_GBps, busbw_GBps, "N/A", last);
}

/// One row of nccl_tests_header()'s table.
inline std::string nccl_tests_row(int64_t bytes, int64_t count, const std::string& redop,
                                  double time_us, double algbw_GBps, double busbw_GBps,
                                  const std::string& last = "") {
  return fmt::format("  {:>12} {:>12} {:>8} {:>6} {:>10.2f} {:>9.2f} {:>9.2f}  {}\n", bytes, count,
                     "float", redop, time_us, algbw_GBps, busbw_GBps, last);
}

}  // namespace traintwin::cli
