// Small text helpers shared by the config readers and the command line: edit distance and the
// "did you mean" of an unknown key, the parse of a number a user wrote, and the generated
// section of a README between two marker lines.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace traintwin {

/// Levenshtein distance between `a` and `b` (insertions, deletions, substitutions).
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `key` by edit distance when it is a plausible misspelling (distance
/// <= max(2, length / 4)), else an empty view: the "did you mean" of unknown-key errors.
std::string_view closest_match(std::string_view key, const std::vector<std::string_view>& candidates);

/// A finite decimal number ("2", "2.0", "0.5", "1e-1", "+2"); nullopt for anything else
/// (including YAML's .inf and .nan, surrounding spaces, hexadecimal). The one parse of a number
/// written by a user: scenario values and the command line's flags.
std::optional<double> parse_number_text(const std::string& text);

/// `text` safe inside a markdown table cell ('|' escaped as '\\|').
std::string markdown_cell(std::string_view text);
/// `text` as inline code in a markdown table cell, or "" for an empty text.
std::string markdown_code(std::string_view text);

/// `readme` with the text between the line `begin` and the line `end` replaced by `body` (the
/// generated key references of scenarios/README.md and topologies/README.md). Throws
/// InvalidArgument naming the marker when the begin line is missing or no end line follows it.
std::string with_generated_section(const std::string& readme, std::string_view begin,
                                   std::string_view end, const std::string& body);

}  // namespace traintwin
