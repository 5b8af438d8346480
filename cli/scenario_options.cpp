#include "cli/scenario_options.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <map>

#include "core/error.hpp"

namespace traintwin::cli {

using scenario_schema::KeySpec;
using scenario_schema::ValueType;

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option("scenario", o.file, "Scenario file (scenarios/*.yaml)")->required();
  add_scenario_flags(cmd, o);
}

void add_scenario_flags(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option("--set", o.set, "Override any scenario key: --set parallelism.tensor_model_parallel_size=4")
      ->type_name("KEY=VALUE");
  auto* g = cmd.add_option_group("Megatron-LM flags", "Shorthands for --set of the common keys");
  o.megatron.add_to(*g, [](const KeySpec& k) { return !k.executor_only; });
  auto* t = cmd.add_option_group("Megatron-LM training flags",
                                 "Shorthands for --set of the training.* and data.* keys");
  o.megatron_training.add_to(*t, [](const KeySpec& k) { return k.executor_only; });
}

namespace {

/// `text` as a YAML scalar that reads back as `text`: as is when plain YAML reads it so (e.g.
/// 969,30,1 or data/doc), else double-quoted with backslash escapes (e.g. "null", "a: b").
std::string yaml_scalar(const std::string& text) {
  try {
    const YAML::Node node = YAML::Load(text);
    if (!text.empty() && node.IsScalar() && node.Scalar() == text) return text;
  } catch (const YAML::Exception&) {
    // not plain YAML: quote it
  }
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

void SchemaFlags::add_to(CLI::Option_group& g, const std::function<bool(const KeySpec&)>& pick) {
  for (const KeySpec& k : scenario_schema::scenario_keys()) {
    if (k.flag.empty() || !pick(k)) continue;
    const std::string path = k.path();
    const std::string flag(k.flag);
    const std::string help = fmt::format("{} ({})", k.doc, path);
    switch (k.type) {
      case ValueType::kInteger:
        g.add_option(flag, integers_[path], help);
        break;
      case ValueType::kNumber:
        g.add_option(flag, numbers_[path], help);
        break;
      case ValueType::kBoolean:
        g.add_flag(flag, switches_[path], help);
        break;
      case ValueType::kEnum:
        g.add_option(flag, raw_[path], help)
            ->check(CLI::IsMember(std::vector<std::string>(k.values.begin(), k.values.end())));
        break;
      case ValueType::kIntegerOrList:
        g.add_option(flag, raw_[path], help);
        break;
      case ValueType::kString:
      case ValueType::kPath:
        g.add_option(flag, text_[path], help);
        break;
      case ValueType::kMapping:
        continue;  // a mapping has no flag
    }
    order_.push_back(path);
  }
}

void SchemaFlags::append_overrides(std::vector<Override>& out) const {
  for (const std::string& path : order_) {
    if (auto it = integers_.find(path); it != integers_.end() && it->second) {
      out.push_back({path, std::to_string(*it->second)});
    } else if (auto nt = numbers_.find(path); nt != numbers_.end() && nt->second) {
      // The shortest round-trip form ("0.0006", "1e-08"), which the reader parses back to the
      // same value (std::to_string would print 6 decimals).
      out.push_back({path, fmt::format("{}", *nt->second)});
    } else if (auto rt = raw_.find(path); rt != raw_.end() && rt->second) {
      out.push_back({path, *rt->second});
    } else if (auto tt = text_.find(path); tt != text_.end() && tt->second) {
      out.push_back({path, yaml_scalar(*tt->second)});
    } else if (auto st = switches_.find(path); st != switches_.end() && st->second) {
      out.push_back({path, "true"});
    }
  }
}

void PipelineSplitFlags::add_to(CLI::Option_group& g) {
  flags_.add_to(g, [](const KeySpec& k) {
    return k.section == "parallelism" &&
           (k.key == "pipeline_model_parallel_layout" ||
            k.key == "decoder_first_pipeline_num_layers" ||
            k.key == "decoder_last_pipeline_num_layers" ||
            k.key == "account_for_embedding_in_pipeline_split" ||
            k.key == "account_for_loss_in_pipeline_split");
  });
}

void PipelineSplitFlags::append_overrides(std::vector<Override>& out) const {
  flags_.append_overrides(out);
}


std::vector<Override> ScenarioOptions::overrides() const {
  std::vector<Override> out;
  for (const auto& s : set) out.push_back(parse_override(s));
  megatron.append_overrides(out);
  megatron_training.append_overrides(out);
  check_given_once(out);
  return out;
}

void check_given_once(const std::vector<Override>& overrides) {
  std::map<std::string, std::string> seen;
  for (const auto& ov : overrides) {
    auto [it, inserted] = seen.emplace(ov.key, ov.value);
    if (!inserted && it->second != ov.value) {
      throw ConfigError("command line: " + ov.key + " is given twice with different values ('" +
                        it->second + "' and '" + ov.value + "')");
    }
  }
}

Scenario ScenarioOptions::load() const { return load_scenario(file, overrides()); }

}  // namespace traintwin::cli
