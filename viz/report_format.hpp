// The small text helpers every part of the report shares: HTML escaping, how seconds, bytes and
// fractions are printed, a two-column table, and the skeleton of a Vega-Lite spec. The chart
// files (viz/simulation_charts.hpp, viz/gantt_chart.hpp, viz/sweep_charts.hpp) and the page
// (viz/report_page.hpp) use them; nothing here reads a file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace traintwin {

/// Bytes in a GiB (2^30).
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// `s` with &, <, >, " and ' replaced by their HTML entities.
std::string escape_html(const std::string& s);

/// Seconds in s, ms or us with three decimals ("1.250 s", "12.000 ms", "3.500 us").
std::string format_seconds(double s);
/// Bytes in GiB with two decimals ("40.00 GiB").
std::string format_gib(double bytes);
/// A fraction as a percentage with one decimal (0.4213 -> "42.1 %").
std::string format_percent(double fraction);
/// A switch as the report prints it: "on" or "off".
std::string on_off(bool on);

/// A two-column HTML table of (name, value) rows with class `css_class`; both escaped here.
std::string key_value_table(const std::vector<std::pair<std::string, std::string>>& rows,
                            const std::string& css_class);

/// A Vega-Lite v5 spec with `description`, no view stroke and a sans-serif font; the caller
/// adds data, marks and encodings.
nlohmann::json base_spec(const std::string& description);

}  // namespace traintwin
