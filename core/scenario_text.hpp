// Small text helpers of the scenario reader (core/scenario_reader.cpp), its schema
// (core/scenario_schema.hpp) and its cross-key rules (core/scenario_rules.cpp): join, contains,
// the "did you mean" of an unknown key, a saturating product, split and trim.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/text.hpp"

namespace traintwin::scenario_schema {

template <typename Range>
inline std::string join(const Range& items, std::string_view sep = ", ") {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

template <typename Range>
inline bool contains(const Range& items, std::string_view value) {
  return std::find(std::begin(items), std::end(items), value) != std::end(items);
}

/// "unknown key; did you mean X? (allowed: ...)".
template <typename Range>
inline std::string unknown_key_problem(std::string_view key, const Range& allowed) {
  const std::string_view best =
      closest_match(key, std::vector<std::string_view>(std::begin(allowed), std::end(allowed)));
  std::string hint;
  if (!best.empty()) hint = fmt::format("; did you mean {}?", best);
  return fmt::format("unknown key{} (allowed: {})", hint, join(allowed));
}

/// a x b, saturating at INT64_MAX (all operands are >= 1 when this is used).
inline int64_t mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::numeric_limits<int64_t>::max();
  return out;
}

/// Splits "a.b" into {"a", "b"}.
inline std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

inline std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

}  // namespace traintwin::scenario_schema
