// The scenario key reference as markdown; see core/scenario_reference.hpp.
#include "core/scenario_reference.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/scenario_schema.hpp"
#include "core/text.hpp"

namespace traintwin {

namespace {

using scenario_schema::KeySpec;
using scenario_schema::ValueType;


std::string heading(std::string_view section) {
  if (section.empty()) return "Top level";
  return fmt::format("`{}`", section);
}

std::string row(const KeySpec& k) {
  std::string type(scenario_schema::to_string(k.type));
  if (!k.unit.empty()) type += fmt::format(" ({})", k.unit);
  const std::string default_value =
      k.required ? "**required**" : markdown_cell(scenario_schema::default_of(k));
  std::string allowed = markdown_cell(scenario_schema::allowed_of(k));
  if (k.type == ValueType::kEnum) {
    std::vector<std::string> names;
    for (std::string_view v : k.values) names.push_back(markdown_code(v));
    allowed = scenario_schema::join(names, ", ");
  }
  std::string doc = markdown_cell(k.doc);
  if (k.needs_experts) doc += " (MoE models only)";
  if (k.executor_only) doc += " (live training; the simulator ignores it)";
  return fmt::format("| {} | {} | {} | {} | {} | {} |\n", markdown_code(k.key), type, default_value,
                     allowed, markdown_code(k.flag), doc);
}

/// `section` and, depth first, the mappings inside it: the file's order (the top level, model,
/// ..., cluster, cluster.what_if, its straggler and degraded_link, data).
void add_sections(const std::string& section, std::vector<std::string>& out) {
  out.push_back(section);
  for (std::string_view k : scenario_schema::keys_of(section)) {
    const std::string path = section.empty() ? std::string(k) : fmt::format("{}.{}", section, k);
    if (scenario_schema::key(path).type == ValueType::kMapping) add_sections(path, out);
  }
}

std::vector<std::string> sections() {
  std::vector<std::string> out;
  add_sections("", out);
  return out;
}

}  // namespace

std::string scenario_key_reference() {
  std::string out;
  bool first = true;
  for (const std::string& section : sections()) {
    if (!first) out += "\n";
    first = false;
    out += fmt::format("### {}\n\n", heading(section));
    out += "| key | type | default | allowed | flag | description |\n";
    out += "|---|---|---|---|---|---|\n";
    for (const KeySpec& k : scenario_schema::scenario_keys()) {
      if (k.section == section) out += row(k);
    }
  }
  return out;
}

std::string with_key_reference(const std::string& readme) {
  return with_generated_section(readme, kReferenceBegin, kReferenceEnd, scenario_key_reference());
}

}  // namespace traintwin
