#include "core/yaml_document.hpp"

#include <fmt/format.h>

#include <vector>

#include "core/error.hpp"

namespace traintwin {

YAML::Node load_single_yaml_document(const std::string& text, const std::string& origin,
                                     std::string_view what) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
    throw ConfigError(line > 0 ? fmt::format("{}:{}: YAML syntax error: {}", origin, line, e.msg)
                               : fmt::format("{}: YAML syntax error: {}", origin, e.msg));
  }
  if (docs.empty()) return YAML::Node();
  if (docs.size() > 1) {
    const int line = docs[1].Mark().line >= 0 ? docs[1].Mark().line + 1 : 0;
    throw ConfigError(fmt::format("{}:{}: a second YAML document (the file holds {}, separated "
                                  "by ---); a {} is one document",
                                  origin, line, docs.size(), what));
  }
  return docs.front();
}

}  // namespace traintwin
