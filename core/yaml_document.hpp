// Parsing one YAML document (scenario, topology and calibration files) with errors that name the
// file, and without the input on which yaml-cpp 0.7's LoadAll never returns.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>

namespace traintwin {

/// The one YAML document of `text` (a Null node when it is empty). `origin` (the file) starts
/// every message, `what` ("scenario file") names what the text is. Throws ConfigError
///  - "<origin>:<line>: YAML syntax error: ..." for malformed YAML;
///  - "<origin>:<line>:<column>: '<c>' cannot start a YAML node (...)" when a document starts at
///    a token that no node consumes, e.g. a ',' outside [...] or {...}: yaml-cpp 0.7's LoadAll
///    (Debian 12) loops forever on such a document with growing memory (yaml-cpp issue #1040,
///    fixed upstream by pull request #1319), so it is refused before LoadAll could see it;
///  - "<origin>:<line>: a second YAML document (after ---); a <what> is one document" when the
///    text holds several (yaml-cpp's Load would silently keep the first).
YAML::Node load_single_yaml_document(const std::string& text, const std::string& origin,
                                     std::string_view what);

}  // namespace traintwin
