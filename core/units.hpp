// Quantities with explicit units, as written in config files ("450GBps", "1us", "80GiB",
// "989TFLOPs"), and their inverse formatters for printing.
//
// Grammar: <number>[spaces]<unit>. The number is a non-negative decimal (digits, optional
// fraction, optional exponent: "1.5", "2e3"). The unit is case-sensitive, because "GBps" (bytes)
// and "Gbps" (bits) differ only in case. A value without a unit, an unknown unit or a unit of
// another dimension is a ConfigError that names the place (`where`), the value and the allowed
// units. Decimal prefixes are SI (k = 10^3, M, G, T, P; lowercase k only), binary prefixes IEC
// (Ki = 2^10, Mi, Gi, Ti, Pi; for sizes only). "KB" is rejected as ambiguous (use kB or KiB).
//
// Every parse_* function returns SI base units and says which in its name:
//   parse_bandwidth_Bps  -> bytes/s     (bandwidths and line rates)
//   parse_time_s         -> seconds     (latencies)
//   parse_bytes          -> bytes       (memory sizes)
//   parse_flop_rate_FLOPs -> FLOP/s     (peak math throughput)
#pragma once

#include <string>

namespace traintwin {

/// Parses a bandwidth or line rate into bytes per second.
/// Bytes: Bps, kBps, MBps, GBps, TBps, PBps (also written B/s, kB/s, ..., PB/s), 10^3 steps.
/// Bits:  bps, kbps, Mbps, Gbps, Tbps, Pbps (also b/s, ..., Pb/s), divided by 8.
/// "450GBps" -> 4.5e11; "400Gbps" -> 5e10. Zero and negative values are errors.
/// `where` prefixes the message, e.g. "topo.yaml:7: nic.line_rate". Throws ConfigError.
double parse_bandwidth_Bps(const std::string& text, const std::string& where);

/// Parses a duration into seconds: s, ms, us (also µs), ns. "1us" -> 1e-6. Zero is allowed,
/// negative values are errors. Throws ConfigError.
double parse_time_s(const std::string& text, const std::string& where);

/// Parses a size into bytes: B, kB, MB, GB, TB, PB (10^3 steps) and KiB, MiB, GiB, TiB, PiB
/// (2^10 steps). "80GiB" -> 85899345920; "141GB" -> 1.41e11. Zero is allowed, negative values
/// are errors. Throws ConfigError.
double parse_bytes(const std::string& text, const std::string& where);

/// Parses a math throughput into FLOP/s: FLOPs, kFLOPs, MFLOPs, GFLOPs, TFLOPs, PFLOPs
/// (also written TFLOP/s or TFLOPS). "989TFLOPs" -> 9.89e14. Zero and negative values are
/// errors. Throws ConfigError.
double parse_flop_rate_FLOPs(const std::string& text, const std::string& where);

/// "450 GB/s", "3.35 TB/s", "50 GB/s": 4 significant digits, decimal prefix chosen so the
/// mantissa is in [1, 1000). Parses back with parse_bandwidth_Bps().
std::string format_bandwidth_Bps(double bytes_per_s);

/// Line rates as vendors print them, in bits: "400 Gb/s", "200 Gb/s".
std::string format_line_rate_bps(double bytes_per_s);

/// "1 us", "130 ns", "2.5 ms", "3 s": 4 significant digits. Parses back with parse_time_s().
std::string format_time_s(double seconds);

/// "80.0 GiB", "79.6 GiB", "512 B": binary prefixes, one decimal. Parses back with parse_bytes().
std::string format_bytes(double bytes);

/// "989 TFLOP/s", "19.5 TFLOP/s": 4 significant digits. Parses back with
/// parse_flop_rate_FLOPs().
std::string format_flop_rate_FLOPs(double flop_per_s);

}  // namespace traintwin
