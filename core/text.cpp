#include "core/text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace traintwin {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string_view closest_match(std::string_view key, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (std::string_view c : candidates) {
    const size_t d = edit_distance(key, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  if (best.empty() || best_distance > std::max<size_t>(2, best.size() / 4)) return {};
  return best;
}

std::optional<double> parse_number_text(const std::string& text) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  if (digits.empty()) return std::nullopt;
  double value = 0;
  const char* last = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), last, value);
  if (ec != std::errc() || ptr != last || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string with_generated_section(const std::string& readme, std::string_view begin,
                                   std::string_view end, const std::string& body) {
  const std::string begin_line = std::string(begin) + "\n";
  const size_t b = readme.find(begin_line);
  if (b == std::string::npos) {
    throw InvalidArgument("no line '" + std::string(begin) + "' to put the generated text after");
  }
  const size_t from = b + begin_line.size();
  const size_t e = readme.find(end, from);
  if (e == std::string::npos) {
    throw InvalidArgument("no line '" + std::string(end) + "' after '" + std::string(begin) +
                          "' to end the generated text");
  }
  return readme.substr(0, from) + body + readme.substr(e);
}

std::string markdown_cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string markdown_code(std::string_view text) {
  if (text.empty()) return {};
  std::string out(1, '`');
  out += markdown_cell(text);
  out += '`';
  return out;
}

}  // namespace traintwin
