// Scenario values outside the reader: bytes_per_element, the enums' to_string (from
// core/scenario_enum_names.hpp), the architecture presets, validate_scenario (the cross-key rules
// of core/scenario_rules.cpp), the data split's fractions and `--set` override parsing. Reading a
// scenario file is core/scenario_reader.cpp's; the keys, their types, defaults and members are
// core/scenario_schema.hpp's table. Next in the flow: core/scenario_reader.cpp (a YAML file to a
// validated Scenario).
#include "core/scenario.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string_view>

#include "core/error.hpp"
#include "core/scenario_enum_names.hpp"
#include "core/scenario_rules.hpp"
#include "core/scenario_schema.hpp"
#include "core/text.hpp"

namespace traintwin {


int bytes_per_element(Precision p) {
  switch (p) {
    case Precision::kFp32:
    case Precision::kTf32:
    case Precision::kFp32Bf16:
      return 4;
    case Precision::kFp16:
    case Precision::kBf16:
      return 2;
    case Precision::kFp8:
      return 1;
  }
  throw InvalidArgument("bytes_per_element: unknown Precision value");
}

// The names come from core/scenario_enum_names.hpp's tables (string literals: NUL-terminated).
const char* to_string(Precision p) { return enum_name(p).data(); }
std::optional<Precision> precision_from_string(std::string_view text) {
  return EnumNames<Precision>::table.parse(text);
}
std::string precision_names() {
  std::string out;
  for (std::string_view n : EnumNames<Precision>::table.names()) {
    out += (out.empty() ? "" : ", ") + std::string(n);
  }
  return out;
}
const char* to_string(Float32MatmulPrecision p) { return enum_name(p).data(); }
const char* to_string(Normalization n) { return enum_name(n).data(); }
const char* to_string(Activation a) { return enum_name(a).data(); }
const char* to_string(PositionEmbedding p) { return enum_name(p).data(); }
const char* to_string(Fp8Format f) { return enum_name(f).data(); }
const char* to_string(Fp8Recipe r) { return enum_name(r).data(); }
const char* to_string(CpCommType c) { return enum_name(c).data(); }
const char* to_string(MoeTokenDispatcher d) { return enum_name(d).data(); }
const char* to_string(MoeLoadBalancing b) { return enum_name(b).data(); }
const char* to_string(RecomputeGranularity r) { return enum_name(r).data(); }
const char* to_string(SelectiveAcOption o) { return enum_name(o).data(); }
const char* to_string(CrossEntropyLoss l) { return enum_name(l).data(); }
const char* to_string(DataParallelShardingStrategy d) { return enum_name(d).data(); }
const char* to_string(PipelineScheduleKind k) { return enum_name(k).data(); }
const char* to_string(AttentionBackend a) { return enum_name(a).data(); }
const char* to_string(LrDecayStyle s) { return enum_name(s).data(); }

namespace {

using namespace scenario_schema;
using scenario_rules::check_rules;

/// What an architecture preset sets (explicit keys in the file win). gpt: GPT-3 / Megatron's
/// defaults; llama: Llama 2/3 (Touvron et al. 2023; Meta's Llama 3 paper, 2024); nemotron:
/// Nemotron-4 (Parmar et al. 2024). Transformer Engine's fused attention is Megatron-Core's
/// attention for the latter two.
struct ArchitecturePreset {
  Normalization normalization;
  Activation activation;
  PositionEmbedding position_embedding_type;
  bool untie_embeddings_and_output_weights;
  bool add_bias_linear;
  AttentionBackend attention_backend;
};

ArchitecturePreset preset_of(std::string_view architecture) {
  if (architecture == "llama") {
    return {Normalization::kRmsNorm, Activation::kSwiglu, PositionEmbedding::kRope, true, false,
            AttentionBackend::kFlash};
  }
  if (architecture == "nemotron") {
    return {Normalization::kLayerNorm, Activation::kSquaredRelu, PositionEmbedding::kRope, true,
            false, AttentionBackend::kFlash};
  }
  return {Normalization::kLayerNorm, Activation::kGelu, PositionEmbedding::kLearnedAbsolute,
          false, true, AttentionBackend::kUnfused};
}

}  // namespace

void apply_architecture_preset(Scenario& s) {
  const ArchitecturePreset preset = preset_of(s.model.architecture);
  s.model.normalization = preset.normalization;
  s.model.activation = preset.activation;
  s.model.position_embedding_type = preset.position_embedding_type;
  s.model.untie_embeddings_and_output_weights = preset.untie_embeddings_and_output_weights;
  s.model.add_bias_linear = preset.add_bias_linear;
  s.training.attention_backend = preset.attention_backend;
}

void validate_scenario(const Scenario& s, const std::string& origin) {
  const std::string where = origin.empty() ? "<scenario>" : origin;
  check_rules(s, [&where](std::string_view) { return where; });
}

std::array<double, 3> split_fractions(const std::string& split) {
  const auto invalid = [&split](const std::string& problem) {
    return InvalidArgument(fmt::format("'{}' is not a valid split: {} (rule: 1 to 3 "
                                       "comma-separated numbers >= 0, not all zero, for train, "
                                       "validation and test, e.g. 969,30,1)",
                                       split, problem));
  };
  const std::vector<std::string> fields = traintwin::split(split, ',');
  if (fields.empty()) throw invalid("it is empty");
  if (fields.size() > 3) throw invalid(fmt::format("{} fields", fields.size()));
  std::array<double, 3> weights{0, 0, 0};
  double largest = 0;
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string field = trim(fields[i]);
    if (field.empty()) throw invalid(fmt::format("field {} is empty", i + 1));
    const std::optional<double> w = parse_number_text(field);
    if (!w || *w < 0) throw invalid(fmt::format("'{}' is not a number >= 0", field));
    if (!std::isfinite(*w)) throw invalid(fmt::format("'{}' is not finite", field));
    weights[i] = *w;
    largest = std::max(largest, *w);
  }
  if (!(largest > 0)) throw invalid("every weight is zero");
  // Scaled by the largest weight first, so that the sum cannot overflow (1e308,1e308,1e308).
  double sum = 0;
  for (double& w : weights) sum += (w /= largest);
  for (double& w : weights) w /= sum;
  return weights;
}

Override parse_override(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    throw ConfigError(
        fmt::format("{}: '{}': expected KEY=VALUE, e.g. "
                    "parallelism.tensor_model_parallel_size=4",
                    kOverrideOrigin, text));
  }
  Override o;
  o.key = trim(text.substr(0, eq));
  o.value = text.substr(eq + 1);
  if (o.key.empty()) {
    throw ConfigError(
        fmt::format("{}: '{}': empty key before '=' (expected KEY=VALUE, e.g. "
                    "parallelism.tensor_model_parallel_size=4)",
                    kOverrideOrigin, text));
  }
  return o;
}

}  // namespace traintwin
