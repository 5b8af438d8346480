#include "viz/report_format.hpp"

#include <fmt/format.h>

namespace traintwin {

std::string escape_html(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string format_seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.3f} us", s * 1e6);
}

std::string format_gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / kGiB); }

std::string format_percent(double fraction) { return fmt::format("{:.1f} %", fraction * 100); }

std::string on_off(bool on) { return on ? "on" : "off"; }

std::string key_value_table(const std::vector<std::pair<std::string, std::string>>& rows,
                            const std::string& css_class) {
  std::string html = fmt::format("<table class=\"{}\">\n", css_class);
  for (const auto& [k, v] : rows) {
    html += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", escape_html(k), escape_html(v));
  }
  return html + "</table>\n";
}

nlohmann::json base_spec(const std::string& description) {
  return {{"$schema", "https://vega.github.io/schema/vega-lite/v5.json"},
          {"description", description},
          {"config", {{"view", {{"stroke", nullptr}}}, {"font", "sans-serif"}}}};
}

}  // namespace traintwin
