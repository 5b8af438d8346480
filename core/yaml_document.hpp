// Parsing one YAML document (scenario and topology files) with errors that name the file.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>

namespace traintwin {

/// The one YAML document of `text` (a Null node when it is empty). Throws ConfigError
/// "<origin>:<line>: YAML syntax error: ..." for malformed YAML, and "<origin>:<line>: a second
/// YAML document (after ---); a <what> is one document" when the text holds several (yaml-cpp's
/// Load would silently keep the first).
YAML::Node load_single_yaml_document(const std::string& text, const std::string& origin,
                                     std::string_view what);

}  // namespace traintwin
