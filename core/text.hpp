// Small text helpers shared by the config readers.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace traintwin {

/// Levenshtein distance between `a` and `b` (insertions, deletions, substitutions).
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `key` by edit distance when it is a plausible misspelling (distance
/// <= max(2, length / 4)), else an empty view: the "did you mean" of unknown-key errors.
std::string_view closest_match(std::string_view key, const std::vector<std::string_view>& candidates);

}  // namespace traintwin
