// Quantities with explicit units: parsing and formatting. See core/units.hpp.
#include "core/units.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

/// What a quantity measures.
enum class Dimension { kBandwidth, kTime, kBytes, kFlopRate };

struct Unit {
  std::string_view symbol;
  double factor;  ///< multiplier to the SI base unit of its dimension
};

// Bandwidth: bytes/s and bits/s, SI prefixes only.
constexpr std::array kBandwidthUnits = {
    Unit{"Bps", 1.0},       Unit{"B/s", 1.0},       Unit{"kBps", 1e3},      Unit{"kB/s", 1e3},
    Unit{"MBps", 1e6},      Unit{"MB/s", 1e6},      Unit{"GBps", 1e9},      Unit{"GB/s", 1e9},
    Unit{"TBps", 1e12},     Unit{"TB/s", 1e12},     Unit{"PBps", 1e15},     Unit{"PB/s", 1e15},
    Unit{"bps", 1 / 8.0},   Unit{"b/s", 1 / 8.0},   Unit{"kbps", 1e3 / 8},  Unit{"kb/s", 1e3 / 8},
    Unit{"Mbps", 1e6 / 8},  Unit{"Mb/s", 1e6 / 8},  Unit{"Gbps", 1e9 / 8},  Unit{"Gb/s", 1e9 / 8},
    Unit{"Tbps", 1e12 / 8}, Unit{"Tb/s", 1e12 / 8}, Unit{"Pbps", 1e15 / 8}, Unit{"Pb/s", 1e15 / 8},
};

constexpr std::array kTimeUnits = {
    Unit{"s", 1.0}, Unit{"ms", 1e-3}, Unit{"us", 1e-6}, Unit{"\u00b5s", 1e-6}, Unit{"ns", 1e-9},
};

constexpr double kKi = 1024.0;
constexpr double kMi = kKi * kKi;
constexpr double kGi = kMi * kKi;
constexpr double kTi = kGi * kKi;
constexpr double kPi = kTi * kKi;
constexpr std::array kByteUnits = {
    Unit{"B", 1.0},   Unit{"kB", 1e3},  Unit{"MB", 1e6},  Unit{"GB", 1e9},
    Unit{"TB", 1e12}, Unit{"PB", 1e15}, Unit{"KiB", kKi}, Unit{"MiB", kMi},
    Unit{"GiB", kGi}, Unit{"TiB", kTi}, Unit{"PiB", kPi},
};

constexpr std::array kFlopRateUnits = {
    Unit{"FLOPs", 1.0},    Unit{"FLOP/s", 1.0},   Unit{"FLOPS", 1.0},   Unit{"kFLOPs", 1e3},
    Unit{"kFLOP/s", 1e3},  Unit{"kFLOPS", 1e3},   Unit{"MFLOPs", 1e6},  Unit{"MFLOP/s", 1e6},
    Unit{"MFLOPS", 1e6},   Unit{"GFLOPs", 1e9},   Unit{"GFLOP/s", 1e9}, Unit{"GFLOPS", 1e9},
    Unit{"TFLOPs", 1e12},  Unit{"TFLOP/s", 1e12}, Unit{"TFLOPS", 1e12}, Unit{"PFLOPs", 1e15},
    Unit{"PFLOP/s", 1e15}, Unit{"PFLOPS", 1e15},
};

struct DimensionInfo {
  Dimension dimension;
  const char* noun;     ///< "a bandwidth"
  const char* allowed;  ///< for messages
};

constexpr std::array kDimensions = {
    DimensionInfo{Dimension::kBandwidth, "a bandwidth",
                  "bytes/s: Bps, kBps, MBps, GBps, TBps, PBps or B/s, ..., PB/s; "
                  "bits/s: bps, kbps, Mbps, Gbps, Tbps, Pbps or b/s, ..., Pb/s"},
    DimensionInfo{Dimension::kTime, "a time", "s, ms, us (or \u00b5s), ns"},
    DimensionInfo{Dimension::kBytes, "a size in bytes",
                  "B, kB, MB, GB, TB, PB (10^3 steps); KiB, MiB, GiB, TiB, PiB (2^10 steps)"},
    DimensionInfo{Dimension::kFlopRate, "a FLOP rate",
                  "FLOPs, kFLOPs, MFLOPs, GFLOPs, TFLOPs, PFLOPs (or TFLOP/s, TFLOPS)"},
};

const DimensionInfo& info(Dimension d) {
  for (const auto& i : kDimensions) {
    if (i.dimension == d) return i;
  }
  return kDimensions[0];  // unreachable: every Dimension is in the table
}

template <typename Table>
const Unit* find_in(const Table& table, std::string_view symbol) {
  for (const Unit& u : table) {
    if (u.symbol == symbol) return &u;
  }
  return nullptr;
}

const Unit* find_unit(Dimension d, std::string_view symbol) {
  switch (d) {
    case Dimension::kBandwidth:
      return find_in(kBandwidthUnits, symbol);
    case Dimension::kTime:
      return find_in(kTimeUnits, symbol);
    case Dimension::kBytes:
      return find_in(kByteUnits, symbol);
    case Dimension::kFlopRate:
      return find_in(kFlopRateUnits, symbol);
  }
  return nullptr;
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

[[noreturn]] void fail(const std::string& where, std::string_view text, const std::string& problem,
                       Dimension d) {
  const std::string prefix = where.empty() ? std::string() : where + ": ";
  throw ConfigError(
      fmt::format("{}\"{}\" {} (allowed: {})", prefix, text, problem, info(d).allowed));
}

/// Splits "<number>[spaces]<unit>", checks the unit's dimension and returns the value in base
/// units. Rejects negative values; `positive` also rejects zero.
double parse_quantity(const std::string& text, const std::string& where, Dimension d,
                      bool positive) {
  const std::string_view s = trim(text);
  if (s.empty()) fail(where, text, "is empty, expected " + std::string(info(d).noun), d);

  // std::from_chars also reads "inf" and "nan": only hand it strings that start like a number.
  const char first = s.front();
  const bool starts_numeric =
      (first >= '0' && first <= '9') || first == '.' ||
      (first == '-' && s.size() > 1 && ((s[1] >= '0' && s[1] <= '9') || s[1] == '.'));
  double value = 0.0;
  const char* end = s.data();
  if (starts_numeric) {
    const auto result = std::from_chars(s.data(), s.data() + s.size(), value);
    if (result.ec == std::errc::result_out_of_range) fail(where, text, "is out of range", d);
    if (result.ec == std::errc()) end = result.ptr;
  }
  if (end == s.data()) {
    fail(where, text, "does not start with a number, expected " + std::string(info(d).noun), d);
  }
  const std::string_view unit = trim(std::string_view(end, s.data() + s.size() - end));
  if (unit.empty()) fail(where, text, "has no unit", d);

  const Unit* u = find_unit(d, unit);
  if (u == nullptr) {
    for (const auto& other : kDimensions) {
      if (other.dimension != d && find_unit(other.dimension, unit) != nullptr) {
        fail(where, text, fmt::format("is {}, not {}", other.noun, info(d).noun), d);
      }
    }
    fail(where, text, fmt::format("has an unknown unit \"{}\"", unit), d);
  }
  if (!std::isfinite(value)) fail(where, text, "is not a finite number", d);
  if (value < 0) fail(where, text, "is negative", d);
  if (positive && value == 0) fail(where, text, "must be greater than zero", d);
  const double base = value * u->factor;
  if (!std::isfinite(base)) fail(where, text, "is out of range", d);
  return base;
}

/// Picks the largest prefix with value/scale >= 1 (the smallest one for tiny values).
struct Prefix {
  double scale;
  const char* symbol;
};

template <std::size_t N>
std::string format_scaled(double value, const std::array<Prefix, N>& prefixes, const char* spec) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  const Prefix* chosen = &prefixes.front();
  for (const Prefix& p : prefixes) {
    if (std::fabs(value) >= p.scale) chosen = &p;
  }
  return fmt::format(fmt::runtime(spec), value / chosen->scale, chosen->symbol);
}

}  // namespace

double parse_bandwidth_Bps(const std::string& text, const std::string& where) {
  return parse_quantity(text, where, Dimension::kBandwidth, /*positive=*/true);
}

double parse_time_s(const std::string& text, const std::string& where) {
  return parse_quantity(text, where, Dimension::kTime, /*positive=*/false);
}

double parse_bytes(const std::string& text, const std::string& where) {
  return parse_quantity(text, where, Dimension::kBytes, /*positive=*/false);
}

double parse_flop_rate_FLOPs(const std::string& text, const std::string& where) {
  return parse_quantity(text, where, Dimension::kFlopRate, /*positive=*/true);
}

std::string format_bandwidth_Bps(double bytes_per_s) {
  static constexpr std::array<Prefix, 6> kPrefixes = {
      {{1.0, "B/s"}, {1e3, "kB/s"}, {1e6, "MB/s"}, {1e9, "GB/s"}, {1e12, "TB/s"}, {1e15, "PB/s"}}};
  return format_scaled(bytes_per_s, kPrefixes, "{:.4g} {}");
}

std::string format_line_rate_bps(double bytes_per_s) {
  static constexpr std::array<Prefix, 6> kPrefixes = {
      {{1.0, "b/s"}, {1e3, "kb/s"}, {1e6, "Mb/s"}, {1e9, "Gb/s"}, {1e12, "Tb/s"}, {1e15, "Pb/s"}}};
  return format_scaled(bytes_per_s * 8.0, kPrefixes, "{:.4g} {}");
}

std::string format_time_s(double seconds) {
  if (seconds == 0.0) return "0 s";
  static constexpr std::array<Prefix, 4> kPrefixes = {
      {{1e-9, "ns"}, {1e-6, "us"}, {1e-3, "ms"}, {1.0, "s"}}};
  return format_scaled(seconds, kPrefixes, "{:.4g} {}");
}

std::string format_bytes(double bytes) {
  if (std::isfinite(bytes) && std::fabs(bytes) < kKi) return fmt::format("{:.0f} B", bytes);
  static constexpr std::array<Prefix, 6> kPrefixes = {
      {{1.0, "B"}, {kKi, "KiB"}, {kMi, "MiB"}, {kGi, "GiB"}, {kTi, "TiB"}, {kPi, "PiB"}}};
  return format_scaled(bytes, kPrefixes, "{:.1f} {}");
}

std::string format_flop_rate_FLOPs(double flop_per_s) {
  static constexpr std::array<Prefix, 6> kPrefixes = {{{1.0, "FLOP/s"},
                                                       {1e3, "kFLOP/s"},
                                                       {1e6, "MFLOP/s"},
                                                       {1e9, "GFLOP/s"},
                                                       {1e12, "TFLOP/s"},
                                                       {1e15, "PFLOP/s"}}};
  return format_scaled(flop_per_s, kPrefixes, "{:.4g} {}");
}

}  // namespace traintwin
