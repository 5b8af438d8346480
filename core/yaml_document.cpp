#include "core/yaml_document.hpp"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>

#include <sstream>
#include <vector>

#include "core/error.hpp"

namespace traintwin {

namespace {

/// Records where each document starts and ignores the rest of yaml-cpp's events.
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;

  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

[[noreturn]] void throw_syntax_error(const YAML::Exception& e, const std::string& origin) {
  const int line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
  throw ConfigError(line > 0 ? fmt::format("{}:{}: YAML syntax error: {}", origin, line, e.msg)
                             : fmt::format("{}: YAML syntax error: {}", origin, e.msg));
}

/// Where every document of `text` starts, read with yaml-cpp's event parser. A document that
/// consumes no token leaves the parser where it was, and the next document starts at the same
/// place: yaml-cpp 0.7 then returns such empty documents for ever (the loop of its LoadAll). That
/// is refused here, naming the character at that place.
std::vector<YAML::Mark> document_starts(const std::string& text, const std::string& origin) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (parser.HandleNextDocument(starts)) {
    const auto& m = starts.marks;
    if (m.size() >= 2 && m[m.size() - 1].pos == m[m.size() - 2].pos) {
      const YAML::Mark& at = m.back();
      const char c = at.pos >= 0 && static_cast<size_t>(at.pos) < text.size() ? text[at.pos] : '?';
      throw ConfigError(fmt::format(
          "{}:{}:{}: '{}' cannot start a YAML node here ({}); the YAML parser (yaml-cpp 0.7) "
          "would loop forever on it",
          origin, at.line + 1, at.column + 1, c,
          c == ',' ? "',' separates the items of a flow collection [a, b] or {a: 1, b: 2}: quote "
                     "a scalar that holds it"
                   : "no value, key or list item starts with it"));
    }
  }
  return starts.marks;
}

}  // namespace

YAML::Node load_single_yaml_document(const std::string& text, const std::string& origin,
                                     std::string_view what) {
  std::vector<YAML::Mark> starts;
  YAML::Node root;
  try {
    starts = document_starts(text, origin);
    // One document: Load parses only the first one, which always ends (the loop above is
    // LoadAll's, across documents).
    if (starts.size() == 1) root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw_syntax_error(e, origin);
  }
  if (starts.size() > 1) {
    const int line = starts[1].line >= 0 ? starts[1].line + 1 : 0;
    throw ConfigError(fmt::format("{}:{}: a second YAML document (the file holds {}, separated "
                                  "by ---); a {} is one document",
                                  origin, line, starts.size(), what));
  }
  return root;
}

}  // namespace traintwin
