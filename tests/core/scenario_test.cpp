// Tests of the scenario reader: shipped files, defaults, derived values, every validation rule,
// unknown keys, type errors, overrides and parse_override().
#include "core/scenario.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/pipeline_split.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

const fs::path kSourceDir = TRAINTWIN_SOURCE_DIR;

/// A scenario text built section by section, so that tests can set, add or drop one key and know
/// on which line each key lands.
class ScenarioText {
 public:
  /// A small valid scenario: GPT, 8 layers, TP 2, PP 2, derived DP 2 on 8 GPUs.
  ScenarioText() {
    sections_ = {
        {"", {{"name", "test"}}},
        {"model",
         {{"num_layers", "8"},
          {"hidden_size", "256"},
          {"num_attention_heads", "8"},
          {"seq_length", "128"},
          {"vocab_size", "1000"}}},
        {"parallelism",
         {{"tensor_model_parallel_size", "2"}, {"pipeline_model_parallel_size", "2"}}},
        {"training",
         {{"micro_batch_size", "1"}, {"global_batch_size", "8"}, {"precision", "bf16"}}},
        {"cluster", {{"topology", "topo.yaml"}, {"num_gpus", "8"}}},
    };
  }

  /// Sets `section.key` to `value` (raw YAML text), adding it at the end of its section.
  ScenarioText& set(const std::string& section, const std::string& key, const std::string& value) {
    auto& keys = find_section(section);
    for (auto& kv : keys) {
      if (kv.first == key) {
        kv.second = value;
        return *this;
      }
    }
    keys.emplace_back(key, value);
    return *this;
  }

  /// Removes `section.key`.
  ScenarioText& erase(const std::string& section, const std::string& key) {
    auto& keys = find_section(section);
    keys.erase(
        std::remove_if(keys.begin(), keys.end(), [&](const auto& kv) { return kv.first == key; }),
        keys.end());
    return *this;
  }

  /// Removes a whole section.
  ScenarioText& erase_section(const std::string& section) {
    sections_.erase(std::remove_if(sections_.begin(), sections_.end(),
                                   [&](const auto& s) { return s.first == section; }),
                    sections_.end());
    return *this;
  }

  std::string text() const {
    std::ostringstream out;
    for (const auto& [section, keys] : sections_) {
      const std::string indent = section.empty() ? "" : "  ";
      if (!section.empty()) out << section << ":\n";
      for (const auto& [key, value] : keys) out << indent << key << ": " << value << "\n";
    }
    return out.str();
  }

  /// 1-based line of `key` ("section.key", or a section name / root key) in text().
  int line_of(const std::string& path) const {
    int line = 0;
    for (const auto& [section, keys] : sections_) {
      if (!section.empty()) {
        ++line;
        if (path == section) return line;
      }
      for (const auto& kv : keys) {
        ++line;
        if ((section.empty() ? kv.first : section + "." + kv.first) == path) return line;
      }
    }
    ADD_FAILURE() << "no key " << path;
    return -1;
  }

 private:
  std::vector<std::pair<std::string, std::string>>& find_section(const std::string& section) {
    for (auto& s : sections_) {
      if (s.first == section) return s.second;
    }
    sections_.emplace_back(section, std::vector<std::pair<std::string, std::string>>{});
    return sections_.back().second;
  }

  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> sections_;
};

constexpr const char* kOrigin = "test.yaml";

Scenario parse(const std::string& text, const std::vector<Override>& overrides = {}) {
  return parse_scenario(text, kOrigin, "base", overrides);
}

/// The message of the ConfigError that parsing `text` raises ("" and a failure when none).
std::string error_of(const std::string& text, const std::vector<Override>& overrides = {}) {
  try {
    parse(text, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << text;
  return "";
}

std::string error_of(const ScenarioText& t, const std::vector<Override>& overrides = {}) {
  return error_of(t.text(), overrides);
}

/// "test.yaml:<line>: " for `path` in `t`.
std::string at(const ScenarioText& t, const std::string& path) {
  return std::string(kOrigin) + ":" + std::to_string(t.line_of(path)) + ": ";
}

// ----- helpers --------------------------------------------------------------------------------

TEST(ScenarioHelpers, BytesPerElement) {
  EXPECT_EQ(bytes_per_element(Precision::kFp32), 4);
  EXPECT_EQ(bytes_per_element(Precision::kFp16), 2);
  EXPECT_EQ(bytes_per_element(Precision::kBf16), 2);
}

TEST(ScenarioHelpers, EnumNames) {
  EXPECT_STREQ(to_string(Precision::kFp32), "fp32");
  EXPECT_STREQ(to_string(Precision::kFp16), "fp16");
  EXPECT_STREQ(to_string(Precision::kBf16), "bf16");
  EXPECT_STREQ(to_string(RecomputeGranularity::kNone), "none");
  EXPECT_STREQ(to_string(RecomputeGranularity::kSelective), "selective");
  EXPECT_STREQ(to_string(RecomputeGranularity::kFull), "full");
  EXPECT_STREQ(to_string(PipelineScheduleKind::kGPipe), "gpipe");
  EXPECT_STREQ(to_string(PipelineScheduleKind::k1F1B), "1f1b");
}

TEST(ScenarioParseOverride, SplitsAtFirstEquals) {
  const Override o = parse_override("parallelism.tensor_model_parallel_size=4");
  EXPECT_EQ(o.key, "parallelism.tensor_model_parallel_size");
  EXPECT_EQ(o.value, "4");
  const Override eq = parse_override("name=a=b");
  EXPECT_EQ(eq.key, "name");
  EXPECT_EQ(eq.value, "a=b");
  const Override empty_value = parse_override("name=");
  EXPECT_EQ(empty_value.key, "name");
  EXPECT_EQ(empty_value.value, "");
}

TEST(ScenarioParseOverride, RejectsMissingEqualsAndEmptyKey) {
  EXPECT_THROW(parse_override("parallelism.tensor_model_parallel_size"), ConfigError);
  EXPECT_THROW(parse_override("=4"), ConfigError);
  EXPECT_THROW(parse_override(""), ConfigError);
  try {
    parse_override("tp4");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("--set"), HasSubstr("tp4"), HasSubstr("KEY=VALUE")));
  }
}

// ----- shipped scenarios ----------------------------------------------------------------------

std::vector<fs::path> shipped_scenarios() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kSourceDir / "scenarios")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ScenarioShipped, EveryFileLoadsAndIsNamedAfterItsFile) {
  const std::vector<fs::path> files = shipped_scenarios();
  ASSERT_GE(files.size(), 5u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    Scenario s;
    ASSERT_NO_THROW(s = load_scenario(file)) << file;
    EXPECT_EQ(s.name, file.stem().string());
    EXPECT_EQ(s.source, file);
    // Every shipped topology sits in topologies/, next to scenarios/.
    EXPECT_EQ(s.cluster.topology.parent_path().filename(), "topologies");
    EXPECT_EQ(s.cluster.topology.lexically_normal(), s.cluster.topology);
    EXPECT_NO_THROW(validate_scenario(s, file.string()));
  }
}

Scenario load_shipped(const std::string& name) {
  return load_scenario(kSourceDir / "scenarios" / (name + ".yaml"));
}

TEST(ScenarioShipped, Gpt3_175bH100_1024) {
  const Scenario s = load_shipped("gpt3-175b-h100-1024");
  EXPECT_EQ(s.model.architecture, "gpt");
  EXPECT_EQ(s.model.num_layers, 96);
  EXPECT_EQ(s.model.hidden_size, 12288);
  EXPECT_EQ(s.model.num_attention_heads, 96);
  EXPECT_EQ(s.model.ffn_hidden_size, 49152);
  EXPECT_EQ(s.model.seq_length, 2048);
  EXPECT_EQ(s.model.vocab_size, 51200);
  EXPECT_EQ(s.parallel.tensor_model_parallel_size, 8);
  EXPECT_EQ(s.parallel.pipeline_model_parallel_size, 16);
  EXPECT_EQ(s.parallel.virtual_pipeline_model_parallel_size, 1);
  EXPECT_EQ(s.parallel.context_parallel_size, 1);
  EXPECT_EQ(s.parallel.data_parallel_size, 8);
  EXPECT_TRUE(s.parallel.sequence_parallel);
  EXPECT_EQ(s.parallel.pipeline_schedule, PipelineScheduleKind::k1F1B);
  EXPECT_FALSE(s.parallel.interleaved());
  EXPECT_EQ(s.parallel.rank_order, "tp-cp-dp-pp");
  EXPECT_EQ(s.training.micro_batch_size, 1);
  EXPECT_EQ(s.training.global_batch_size, 1536);
  EXPECT_EQ(s.training.precision, Precision::kBf16);
  EXPECT_EQ(s.training.recompute_granularity, RecomputeGranularity::kNone);
  EXPECT_TRUE(s.training.use_distributed_optimizer);
  EXPECT_TRUE(s.training.overlap_grad_reduce);
  EXPECT_FALSE(s.training.overlap_param_gather);
  EXPECT_FALSE(s.training.tp_comm_overlap);
  EXPECT_EQ(s.cluster.num_gpus, 1024);
  EXPECT_EQ(s.cluster.topology,
            (kSourceDir / "topologies/dgx-h100-superpod.yaml").lexically_normal());
  EXPECT_EQ(s.num_micro_batches(), 192);
  EXPECT_EQ(chunk_layers(s, 0, 0).num_layers, 6);
  EXPECT_EQ(s.world_size(), 1024);
}

TEST(ScenarioShipped, Gpt3_175bH100_128DgxCloudRecipe) {
  const Scenario s = load_shipped("gpt3-175b-h100-128");
  EXPECT_EQ(s.model.num_layers, 96);
  EXPECT_EQ(s.model.hidden_size, 12288);
  EXPECT_EQ(s.parallel.tensor_model_parallel_size, 4);
  EXPECT_EQ(s.parallel.pipeline_model_parallel_size, 8);
  EXPECT_EQ(s.parallel.virtual_pipeline_model_parallel_size, 12);
  EXPECT_TRUE(s.parallel.interleaved());
  EXPECT_EQ(s.parallel.data_parallel_size, 4);  // derived: 128 / (4 * 8)
  EXPECT_TRUE(s.parallel.sequence_parallel);
  EXPECT_EQ(s.training.micro_batch_size, 1);
  EXPECT_EQ(s.training.global_batch_size, 256);
  EXPECT_EQ(s.training.precision, Precision::kBf16);
  EXPECT_TRUE(s.training.use_distributed_optimizer);
  EXPECT_TRUE(s.training.overlap_grad_reduce);
  EXPECT_TRUE(s.training.overlap_param_gather);
  EXPECT_TRUE(s.training.tp_comm_overlap);
  EXPECT_EQ(s.cluster.num_gpus, 128);
  EXPECT_EQ(s.num_micro_batches(), 64);
  EXPECT_EQ(chunk_layers(s, 0, 0).num_layers, 1);
}

// Narayanan et al., SC'21, Table 1, 145.6B row.
TEST(ScenarioShipped, Megatron145bA100_1536NarayananTable1) {
  const Scenario s = load_shipped("megatron-145b-a100-1536");
  EXPECT_EQ(s.model.num_layers, 80);
  EXPECT_EQ(s.model.hidden_size, 12288);
  EXPECT_EQ(s.model.num_attention_heads, 96);
  EXPECT_EQ(s.model.ffn_hidden_size, 4 * 12288);  // default 4h
  EXPECT_EQ(s.parallel.tensor_model_parallel_size, 8);
  EXPECT_EQ(s.parallel.pipeline_model_parallel_size, 8);
  EXPECT_EQ(s.parallel.virtual_pipeline_model_parallel_size, 2);  // 80 / (8 * 5)
  EXPECT_EQ(chunk_layers(s, 0, 0).num_layers, 5);
  EXPECT_EQ(s.parallel.data_parallel_size, 24);
  EXPECT_FALSE(s.parallel.sequence_parallel);
  EXPECT_EQ(s.training.micro_batch_size, 2);
  EXPECT_EQ(s.training.global_batch_size, 2304);
  EXPECT_EQ(s.training.precision, Precision::kFp16);
  EXPECT_EQ(s.training.recompute_granularity, RecomputeGranularity::kFull);
  EXPECT_FALSE(s.training.use_distributed_optimizer);
  EXPECT_EQ(s.cluster.num_gpus, 1536);
  EXPECT_EQ(s.cluster.topology,
            (kSourceDir / "topologies/dgx-a100-superpod.yaml").lexically_normal());
  EXPECT_EQ(s.num_micro_batches(), 48);
}

// Korthikanti et al. 2022, Table 3, 22B row.
TEST(ScenarioShipped, Gpt22bA100_8KorthikantiTable3) {
  const Scenario s = load_shipped("gpt-22b-a100-8");
  EXPECT_EQ(s.model.num_layers, 48);
  EXPECT_EQ(s.model.hidden_size, 6144);
  EXPECT_EQ(s.model.num_attention_heads, 64);
  EXPECT_EQ(s.parallel.tensor_model_parallel_size, 8);
  EXPECT_EQ(s.parallel.pipeline_model_parallel_size, 1);
  EXPECT_EQ(s.parallel.data_parallel_size, 1);
  EXPECT_TRUE(s.parallel.sequence_parallel);
  EXPECT_EQ(s.training.micro_batch_size, 4);
  EXPECT_EQ(s.training.global_batch_size, 4);
  EXPECT_EQ(s.training.precision, Precision::kFp16);
  EXPECT_EQ(s.training.recompute_granularity, RecomputeGranularity::kSelective);
  EXPECT_EQ(s.cluster.num_gpus, 8);
  EXPECT_EQ(s.cluster.topology,
            (kSourceDir / "topologies/dgx-a100-superpod.yaml").lexically_normal());
  EXPECT_EQ(s.num_micro_batches(), 1);
}

TEST(ScenarioShipped, Gpt1_3bH200_8) {
  const Scenario s = load_shipped("gpt-1.3b-h200-8");
  EXPECT_EQ(s.model.num_layers, 24);
  EXPECT_EQ(s.model.hidden_size, 2048);
  EXPECT_EQ(s.model.num_attention_heads, 16);
  EXPECT_EQ(s.model.seq_length, 2048);
  EXPECT_EQ(s.model.vocab_size, 51200);
  EXPECT_EQ(s.parallel.tensor_model_parallel_size, 1);
  EXPECT_EQ(s.parallel.pipeline_model_parallel_size, 2);
  EXPECT_EQ(s.parallel.data_parallel_size, 4);
  EXPECT_EQ(s.training.micro_batch_size, 4);
  EXPECT_EQ(s.training.global_batch_size, 64);
  EXPECT_EQ(s.training.precision, Precision::kBf16);
  EXPECT_EQ(s.cluster.num_gpus, 8);
  EXPECT_EQ(s.cluster.topology,
            (kSourceDir / "topologies/dgx-h200-superpod.yaml").lexically_normal());
  EXPECT_EQ(s.num_micro_batches(), 4);
}

// ----- defaults and derived values ------------------------------------------------------------

TEST(ScenarioDefaults, OptionalKeysTakeMegatronDefaults) {
  ScenarioText t;
  t.erase_section("parallelism");
  t.set("cluster", "num_gpus", "1");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.name, "test");
  EXPECT_TRUE(s.source.empty());
  EXPECT_EQ(s.model.architecture, "gpt");
  EXPECT_EQ(s.model.ffn_hidden_size, 4 * 256);
  EXPECT_EQ(s.parallel.tensor_model_parallel_size, 1);
  EXPECT_EQ(s.parallel.pipeline_model_parallel_size, 1);
  EXPECT_EQ(s.parallel.virtual_pipeline_model_parallel_size, 1);
  EXPECT_EQ(s.parallel.context_parallel_size, 1);
  EXPECT_EQ(s.parallel.data_parallel_size, 1);
  EXPECT_FALSE(s.parallel.sequence_parallel);
  EXPECT_EQ(s.parallel.pipeline_schedule, PipelineScheduleKind::k1F1B);
  EXPECT_EQ(s.parallel.rank_order, "tp-cp-ep-dp-pp");
  EXPECT_EQ(s.training.recompute_granularity, RecomputeGranularity::kNone);
  EXPECT_EQ(s.training.attention_backend, AttentionBackend::kUnfused);
  EXPECT_EQ(s.cluster.collective_algorithm, "");
  EXPECT_FALSE(s.training.use_distributed_optimizer);
  EXPECT_FALSE(s.training.overlap_grad_reduce);
  EXPECT_FALSE(s.training.overlap_param_gather);
  EXPECT_FALSE(s.training.tp_comm_overlap);
}

TEST(ScenarioDefaults, EmptyParallelismSectionIsAllowed) {
  ScenarioText t;
  t.erase_section("parallelism");
  t.set("cluster", "num_gpus", "1");
  const Scenario s = parse(t.text() + "parallelism:\n");
  EXPECT_EQ(s.parallel.tensor_model_parallel_size, 1);
}

TEST(ScenarioDefaults, ExplicitValuesAreRead) {
  ScenarioText t;
  t.set("model", "ffn_hidden_size", "512")
      .set("parallelism", "pipeline_schedule", "gpipe")
      .set("parallelism", "rank_order", "tp-dp-cp-pp")
      .set("training", "precision", "fp32")
      .set("training", "recompute_granularity", "selective")
      .set("training", "attention_backend", "flash")
      .set("cluster", "collective_algorithm", "ring")
      .set("training", "use_distributed_optimizer", "True")
      .set("training", "overlap_grad_reduce", "TRUE")
      .set("training", "overlap_param_gather", "true")
      .set("parallelism", "sequence_parallel", "true")
      .set("training", "tp_comm_overlap", "true");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.model.ffn_hidden_size, 512);
  EXPECT_EQ(s.parallel.pipeline_schedule, PipelineScheduleKind::kGPipe);
  EXPECT_EQ(s.parallel.rank_order, "tp-dp-cp-pp");
  EXPECT_EQ(s.training.precision, Precision::kFp32);
  EXPECT_EQ(s.training.recompute_granularity, RecomputeGranularity::kSelective);
  EXPECT_EQ(s.training.attention_backend, AttentionBackend::kFlash);
  EXPECT_EQ(s.cluster.collective_algorithm, "ring");
  EXPECT_TRUE(s.training.use_distributed_optimizer);
  EXPECT_TRUE(s.training.overlap_grad_reduce);
  EXPECT_TRUE(s.training.overlap_param_gather);
  EXPECT_TRUE(s.training.tp_comm_overlap);
  EXPECT_TRUE(s.parallel.sequence_parallel);
}

TEST(ScenarioDerived, DataParallelSizeIsNumGpusOverModelParallel) {
  ScenarioText t;
  t.set("cluster", "num_gpus", "64").set("parallelism", "context_parallel_size", "2");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.parallel.data_parallel_size, 8);  // 64 / (2 * 2 * 2)
}

TEST(ScenarioDerived, GivenDataParallelSizeThatMatchesIsAccepted) {
  ScenarioText t;
  t.set("parallelism", "data_parallel_size", "2");
  EXPECT_EQ(parse(t.text()).parallel.data_parallel_size, 2);
}

TEST(ScenarioDerived, LayersPerVirtualStageGivesModelChunks) {
  ScenarioText t;
  t.set("model", "num_layers", "16")
      .set("parallelism", "num_layers_per_virtual_pipeline_stage", "2")
      .set("training", "global_batch_size", "4");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.parallel.virtual_pipeline_model_parallel_size, 4);  // 16 / (2 * 2)
  EXPECT_EQ(chunk_layers(s, 0, 0).num_layers, 2);
  EXPECT_TRUE(s.parallel.interleaved());
}

TEST(ScenarioDerived, LayersPerVirtualStageEqualToStageMeansOneChunk) {
  ScenarioText t;
  t.set("parallelism", "num_layers_per_virtual_pipeline_stage", "4");
  EXPECT_EQ(parse(t.text()).parallel.virtual_pipeline_model_parallel_size, 1);
}

TEST(ScenarioDerived, TopologyResolvesAgainstBaseDirAndNeedNotExist) {
  ScenarioText t;
  t.set("cluster", "topology", "../topologies/none-such.yaml");
  const Scenario s = parse_scenario(t.text(), kOrigin, "/x/scenarios");
  EXPECT_EQ(s.cluster.topology, fs::path("/x/topologies/none-such.yaml"));
  t.set("cluster", "topology", "/abs/t.yaml");
  EXPECT_EQ(parse_scenario(t.text(), kOrigin, "/x/scenarios").cluster.topology,
            fs::path("/abs/t.yaml"));
  t.set("cluster", "topology", "t.yaml");
  EXPECT_EQ(parse_scenario(t.text(), kOrigin, "").cluster.topology, fs::path("t.yaml"));
}

TEST(ScenarioDerived, LoadScenarioResolvesTopologyNextToTheFile) {
  const fs::path dir = fs::temp_directory_path() / "traintwin_scenario_test";
  fs::create_directories(dir / "scenarios");
  const fs::path file = dir / "scenarios" / "s.yaml";
  ScenarioText t;
  t.set("cluster", "topology", "../topologies/t.yaml");
  std::ofstream(file) << t.text();
  const Scenario s = load_scenario(file);
  EXPECT_EQ(s.source, file);
  EXPECT_EQ(s.cluster.topology, (dir / "topologies" / "t.yaml").lexically_normal());
  fs::remove_all(dir);
}

TEST(ScenarioLoad, MissingFileIsAConfigError) {
  try {
    load_scenario(kSourceDir / "scenarios" / "does-not-exist.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("does-not-exist.yaml"), HasSubstr("cannot open")));
  }
}

TEST(ScenarioLoad, YamlSyntaxErrorNamesTheLine) {
  EXPECT_THAT(error_of("name: x\nmodel:\n  num_layers: [1, 2\n"),
              AllOf(HasSubstr("test.yaml:"), HasSubstr("YAML syntax error")));
  EXPECT_THAT(error_of("name: x\nmodel: {\n"), HasSubstr("YAML syntax error"));
}

TEST(ScenarioLoad, NonMappingDocumentIsRejected) {
  EXPECT_THAT(error_of(""), AllOf(HasSubstr("test.yaml"), HasSubstr("expected a mapping")));
  EXPECT_THAT(error_of("- a\n- b\n"), HasSubstr("expected a mapping"));
  EXPECT_THAT(error_of("just text\n"), HasSubstr("expected a mapping"));
}

// ----- required keys ---------------------------------------------------------------------------

TEST(ScenarioRequired, EveryRequiredKeyIsNamedWhenMissing) {
  const std::vector<std::pair<std::string, std::string>> required = {
      {"", "name"},
      {"model", "num_layers"},
      {"model", "hidden_size"},
      {"model", "num_attention_heads"},
      {"model", "seq_length"},
      {"model", "vocab_size"},
      {"training", "micro_batch_size"},
      {"training", "global_batch_size"},
      {"training", "precision"},
      {"cluster", "topology"},
      {"cluster", "num_gpus"},
  };
  for (const auto& [section, key] : required) {
    ScenarioText t;
    t.erase(section, key);
    const std::string path = section.empty() ? key : section + "." + key;
    SCOPED_TRACE(path);
    EXPECT_THAT(error_of(t),
                AllOf(HasSubstr(path + ": missing required key"), HasSubstr("test.yaml")));
  }
}

TEST(ScenarioRequired, MissingSectionIsNamed) {
  for (const std::string section : {"model", "training", "cluster"}) {
    ScenarioText t;
    t.erase_section(section);
    EXPECT_THAT(error_of(t), AllOf(HasSubstr(section + ": missing required section"))) << section;
  }
}

TEST(ScenarioRequired, MissingKeyIsPlacedAtItsSection) {
  ScenarioText t;
  t.erase("model", "vocab_size");
  EXPECT_THAT(error_of(t), HasSubstr(at(t, "model") + "model.vocab_size: missing required key"));
}

// ----- unknown and duplicate keys --------------------------------------------------------------

TEST(ScenarioUnknownKeys, RejectedAtEveryLevelWithLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "nmae"},       {"model", "hiden_size"}, {"parallelism", "expert_parallel_size"},
      {"training", "learning_rate"}, {"cluster", "nodes"}, {"data", "data_prefix"},
  };
  for (const auto& [section, key] : cases) {
    ScenarioText t;
    t.set(section, key, "1");
    const std::string path = section.empty() ? key : section + "." + key;
    SCOPED_TRACE(path);
    EXPECT_THAT(error_of(t),
                AllOf(HasSubstr(at(t, path) + path + ": unknown key"), HasSubstr("(allowed: ")));
  }
}

TEST(ScenarioUnknownKeys, ListsAllowedKeysAndSuggestsTheClosest) {
  ScenarioText t;
  t.set("model", "hiden_size", "1");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("did you mean hidden_size?"),
                                 HasSubstr("allowed: architecture, num_layers, hidden_size, "
                                           "num_attention_heads, num_query_groups, "
                                           "kv_channels, ffn_hidden_size, seq_length, "
                                           "vocab_size, "
                                           "normalization, activation, position_embedding_type, "
                                           "rotary_base, untie_embeddings_and_output_weights, "
                                           "add_bias_linear, num_moe_experts, "
                                           "moe_router_topk")));
}

TEST(ScenarioUnknownKeys, UnknownSection) {
  ScenarioText t;
  t.set("optimizer", "lr", "1");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "optimizer") + "optimizer: unknown key"),
                                 HasSubstr("allowed: name, model, parallelism, training, "
                                           "cluster, data")));
}

TEST(ScenarioUnknownKeys, DuplicateKeyIsRejected) {
  const std::string text = ScenarioText().text() + "name: again\n";
  const int last_line = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  EXPECT_THAT(error_of(text),
              AllOf(HasSubstr("test.yaml:" + std::to_string(last_line) + ": name: duplicate key"),
                    HasSubstr("first given at line 1")));
  std::string in_section = ScenarioText().text();
  in_section.insert(in_section.find("  hidden_size"), "  num_layers: 4\n");
  EXPECT_THAT(error_of(in_section), HasSubstr("model.num_layers: duplicate key"));
}

TEST(ScenarioUnknownKeys, SectionMustBeAMapping) {
  ScenarioText t;
  t.erase_section("training");
  EXPECT_THAT(error_of(t.text() + "training: 3\n"),
              AllOf(HasSubstr("training: expected a mapping"), HasSubstr("got '3'")));
}

// ----- types -----------------------------------------------------------------------------------

TEST(ScenarioTypes, IntegerKeysRejectNonIntegers) {
  for (const std::string bad : {"eight", "1.5", "8.0", "1e3", "0x10", "true", "\"8\"", "[8]",
                                "{a: 1}", "", "99999999999999999999999"}) {
    ScenarioText t;
    t.set("parallelism", "tensor_model_parallel_size", bad);
    SCOPED_TRACE(bad);
    EXPECT_THAT(error_of(t), HasSubstr(at(t, "parallelism.tensor_model_parallel_size") +
                                       "parallelism.tensor_model_parallel_size: expected an "
                                       "integer"));
  }
}

TEST(ScenarioTypes, IntegerMessageShowsTheValue) {
  ScenarioText t;
  t.set("model", "num_layers", "eight");
  EXPECT_THAT(error_of(t), HasSubstr("model.num_layers: expected an integer >= 1, got 'eight'"));
  t.set("model", "num_layers", "'8'");
  EXPECT_THAT(error_of(t), HasSubstr("got the quoted string \"8\""));
}

TEST(ScenarioTypes, IntegersMustBePositive) {
  for (const std::string key : {"num_layers", "hidden_size", "num_attention_heads",
                                "ffn_hidden_size", "seq_length", "vocab_size"}) {
    ScenarioText t;
    t.set("model", key, "0");
    EXPECT_THAT(error_of(t),
                HasSubstr(at(t, "model." + key) + "model." + key + ": must be >= 1, got 0"));
  }
  for (const std::string key : {"tensor_model_parallel_size", "pipeline_model_parallel_size",
                                "virtual_pipeline_model_parallel_size", "context_parallel_size",
                                "data_parallel_size", "num_layers_per_virtual_pipeline_stage"}) {
    ScenarioText t;
    t.set("parallelism", key, "-2");
    EXPECT_THAT(error_of(t), HasSubstr("parallelism." + key + ": must be >= 1, got -2"));
  }
  for (const auto& [section, key] :
       std::vector<std::pair<std::string, std::string>>{{"training", "micro_batch_size"},
                                                        {"training", "global_batch_size"},
                                                        {"cluster", "num_gpus"}}) {
    ScenarioText t;
    t.set(section, key, "0");
    EXPECT_THAT(error_of(t), HasSubstr(section + "." + key + ": must be >= 1"));
  }
}

TEST(ScenarioTypes, BooleanKeysAcceptOnlyTrueAndFalse) {
  for (const std::string key : {"use_distributed_optimizer", "overlap_grad_reduce",
                                "overlap_param_gather", "tp_comm_overlap",
                                "gradient_accumulation_fusion"}) {
    for (const std::string bad : {"yes", "on", "1", "\"true\"", "maybe"}) {
      ScenarioText t;
      t.set("training", key, bad);
      SCOPED_TRACE(key + "=" + bad);
      EXPECT_THAT(error_of(t), HasSubstr(at(t, "training." + key) + "training." + key +
                                         ": expected a boolean (true or false)"));
    }
  }
  ScenarioText t;
  t.set("parallelism", "sequence_parallel", "yes");
  EXPECT_THAT(error_of(t), HasSubstr(at(t, "parallelism.sequence_parallel") +
                                     "parallelism.sequence_parallel: expected a boolean"));
}

TEST(ScenarioTypes, EnumKeysListAllowedValues) {
  struct Case {
    std::string section, key, bad, allowed;
  };
  const std::vector<Case> cases = {
      {"model", "architecture", "mixtral", "(allowed: gpt, llama, nemotron)"},
      {"model", "normalization", "ln", "(allowed: layernorm, rmsnorm)"},
      {"model", "activation", "relu", "(allowed: gelu, swiglu, squared_relu)"},
      {"model", "position_embedding_type", "alibi", "(allowed: learned_absolute, rope)"},
      {"parallelism", "cp_comm_type", "ring", "(allowed: p2p, a2a, all_gather)"},
      {"training", "fp8_format", "e5m2", "(allowed: hybrid, e4m3)"},
      {"training", "precision", "fp8", "(allowed: fp32, fp16, bf16)"},
      {"training", "precision", "BF16", "(allowed: fp32, fp16, bf16)"},
      {"training", "recompute_granularity", "partial", "(allowed: none, selective, full)"},
      {"training", "attention_backend", "local", "(allowed: unfused, flash, fused)"},
      {"cluster", "collective_algorithm", "collnet", "(allowed: auto, ring, tree, nvls)"},
      {"parallelism", "pipeline_schedule", "interleaved",
       "(allowed: gpipe, 1f1b, zb-h1, zb-h2, zb-v, dualpipe, dualpipev)"},
  };
  for (const Case& c : cases) {
    ScenarioText t;
    t.set(c.section, c.key, c.bad);
    const std::string path = c.section + "." + c.key;
    SCOPED_TRACE(path);
    EXPECT_THAT(error_of(t),
                AllOf(HasSubstr(at(t, path) + path + ": '" + c.bad + "' is not allowed"),
                      HasSubstr(c.allowed)));
  }
}

TEST(ScenarioTypes, StringKeysMustBeNonEmptyScalars) {
  ScenarioText t;
  t.set("cluster", "topology", "[a, b]");
  EXPECT_THAT(error_of(t), HasSubstr("cluster.topology: expected a non-empty string"));
  t = ScenarioText();
  t.set("", "name", "\"\"");
  EXPECT_THAT(error_of(t), HasSubstr(at(t, "name") + "name: expected a non-empty string"));
}

// ----- validation rules ------------------------------------------------------------------------

TEST(ScenarioRules, HiddenSizeDivisibleByHeads) {
  ScenarioText t;
  t.set("model", "hidden_size", "250");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "model.hidden_size") + "model.hidden_size"),
                                 HasSubstr("250 is not divisible by model.num_attention_heads = "
                                           "8")));
}

TEST(ScenarioRules, ZeroBubbleSchedulesNeedOneChunkAndPpMicroBatches) {
  ScenarioText t;
  t.set("parallelism", "pipeline_schedule", "zb-h2");
  EXPECT_EQ(parse(t.text()).parallel.pipeline_schedule, PipelineScheduleKind::kZbH2);
  // 2 / (1 x DP 2) = 1 micro-batch on PP 2.
  t.set("training", "global_batch_size", "2");
  EXPECT_THAT(
      error_of(t),
      AllOf(HasSubstr(at(t, "parallelism.pipeline_schedule") + "parallelism.pipeline_schedule"),
            HasSubstr("zb-h2 needs at least pipeline_model_parallel_size = 2 "
                      "micro-batches, got global_batch_size / (micro_batch_size x DP) = "
                      "2 / (1 x 2) = 1"),
            HasSubstr("allowed values: gpipe, 1f1b, zb-h1, zb-h2")));
  t = ScenarioText();
  t.set("parallelism", "pipeline_schedule", "zb-h1")
      .set("parallelism", "virtual_pipeline_model_parallel_size", "2");
  EXPECT_THAT(error_of(t),
              AllOf(HasSubstr("parallelism.pipeline_schedule"),
                    HasSubstr("zb-h1 needs parallelism.virtual_pipeline_model_parallel_size: 1, "
                              "got 2"),
                    HasSubstr("allowed with v > 1: 1f1b")));
}

// ZB-V (core/schedule.hpp zb_v_schedule): v = 2 (the V's two chunks) and >= 2 x PP micro-batches.
TEST(ScenarioRules, ZbVNeedsTwoChunksAndTwicePpMicroBatches) {
  ScenarioText t;
  t.set("parallelism", "pipeline_schedule", "zb-v");
  EXPECT_THAT(error_of(t),
              AllOf(HasSubstr(at(t, "parallelism.pipeline_schedule") +
                              "parallelism.pipeline_schedule"),
                    HasSubstr("zb-v needs parallelism.virtual_pipeline_model_parallel_size: 2"),
                    HasSubstr("got 1")));
  // PP 2, v 2, 8 layers: 2 per virtual stage; 8 / (1 x DP 2) = 4 = 2 x PP micro-batches.
  t.set("parallelism", "virtual_pipeline_model_parallel_size", "2");
  EXPECT_EQ(parse(t.text()).parallel.pipeline_schedule, PipelineScheduleKind::kZbV);
  t.set("training", "global_batch_size", "6");  // 3 micro-batches
  EXPECT_THAT(error_of(t),
              AllOf(HasSubstr("zb-v needs at least 2 x pipeline_model_parallel_size = 4 "
                              "micro-batches, got global_batch_size / (micro_batch_size x DP) = "
                              "6 / (1 x 2) = 3"),
                    HasSubstr("allowed values: gpipe, 1f1b, zb-h1, zb-h2, zb-v")));
  // decoder_first/last_pipeline_num_layers size Megatron's first and last ranks (each chunk of a
  // rank its share); ZB-V holds both ends on rank 0.
  t.set("training", "global_batch_size", "8");
  for (const auto& [key, value] : {std::pair{"decoder_first_pipeline_num_layers", "2"},
                                   std::pair{"decoder_last_pipeline_num_layers", "2"}}) {
    ScenarioText u = t;
    u.set("parallelism", key, value);
    EXPECT_THAT(error_of(u), AllOf(HasSubstr("zb-v is not combined with parallelism."
                                             "decoder_first_pipeline_num_layers or "
                                             "decoder_last_pipeline_num_layers"),
                                   HasSubstr("allowed with them: gpipe, 1f1b, zb-h1, zb-h2")))
        << key;
  }
}

// DualPipe (core/schedule.hpp dualpipe_schedule; deepseek-ai/DualPipe dualpipe.py, whose step()
// asserts num_ranks % 2 == 0, num_chunks % 2 == 0 and num_chunks >= num_ranks * 2): accepted
// with an even PP, two model chunks (its two parameter copies) and an even number of
// micro-batches >= 2 x PP; each broken precondition refused naming its key.
TEST(ScenarioRules, DualPipeNeedsEvenPpTwoCopiesAndAnEvenBatchOfTwicePp) {
  ScenarioText t;  // TP 2 x PP 2 on 8 GPUs: DP 2, 8 / (1 x 2) = 4 micro-batches
  t.set("parallelism", "pipeline_schedule", "dualpipe")
      .set("parallelism", "virtual_pipeline_model_parallel_size", "2");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.parallel.pipeline_schedule, PipelineScheduleKind::kDualPipe);
  // Each chunk a whole stage of the split over PP = 2 stages: 4 layers, held twice.
  EXPECT_EQ(chunk_layers(s, 0, 0), (ChunkLayers{0, 4}));
  EXPECT_EQ(chunk_layers(s, 0, 1), (ChunkLayers{4, 4}));
  EXPECT_EQ(chunk_layers(s, 1, 0), (ChunkLayers{4, 4}));
  EXPECT_EQ(chunk_layers(s, 1, 1), (ChunkLayers{0, 4}));

  ScenarioText v1 = t;
  v1.set("parallelism", "virtual_pipeline_model_parallel_size", "1");
  EXPECT_THAT(error_of(v1),
              AllOf(HasSubstr(at(v1, "parallelism.pipeline_schedule") +
                              "parallelism.pipeline_schedule"),
                    HasSubstr("dualpipe needs parallelism.virtual_pipeline_model_parallel_size: "
                              "2, got 1")));

  ScenarioText odd_batch = t;  // 6 / (1 x 2) = 3 micro-batches
  odd_batch.set("training", "global_batch_size", "6");
  EXPECT_THAT(error_of(odd_batch),
              AllOf(HasSubstr(at(odd_batch, "training.global_batch_size") +
                              "training.global_batch_size"),
                    HasSubstr("= 3 micro-batches; dualpipe needs an even number of them, at least "
                              "2 x pipeline_model_parallel_size = 4")));
  ScenarioText few = t;  // PP 4 on 8 GPUs: DP 1, 4 micro-batches < 8
  few.set("parallelism", "pipeline_model_parallel_size", "4")
      .set("training", "global_batch_size", "4");
  EXPECT_THAT(error_of(few), HasSubstr("= 4 micro-batches; dualpipe needs an even number of "
                                       "them, at least 2 x pipeline_model_parallel_size = 8"));
  few.set("training", "global_batch_size", "8");
  EXPECT_NO_THROW(parse(few.text()));

  ScenarioText odd_pp = t;  // PP 3 on 6 GPUs, 9 layers: the split is fine, PP is odd
  odd_pp.set("model", "num_layers", "9")
      .set("parallelism", "pipeline_model_parallel_size", "3")
      .set("cluster", "num_gpus", "6");
  EXPECT_THAT(error_of(odd_pp),
              AllOf(HasSubstr(at(odd_pp, "parallelism.pipeline_model_parallel_size") +
                              "parallelism.pipeline_model_parallel_size"),
                    HasSubstr("3 with pipeline_schedule dualpipe; it needs an even PP >= 2"),
                    HasSubstr("dualpipe.py asserts num_ranks % 2 == 0")));
}

// training.selective_ac_option op (torchtitan's op-level selective activation checkpointing) is
// read with recompute_granularity selective on a Llama layer at TP 1, and refused by name with
// anything its policy was not written for.
TEST(ScenarioRules, OpLevelSelectiveCheckpointingNeedsTorchtitansLlamaLayer) {
  ScenarioText t;
  t.set("model", "architecture", "llama")
      .set("model", "ffn_hidden_size", "512")
      .set("parallelism", "tensor_model_parallel_size", "1")
      .set("training", "recompute_granularity", "selective")
      .set("training", "selective_ac_option", "op")
      .set("training", "cross_entropy_loss", "torch");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.training.selective_ac_option, SelectiveAcOption::kOp);
  EXPECT_EQ(s.training.cross_entropy_loss, CrossEntropyLoss::kTorch);
  EXPECT_EQ(parse(ScenarioText().text()).training.selective_ac_option,
            SelectiveAcOption::kCoreAttn);
  EXPECT_EQ(parse(ScenarioText().text()).training.cross_entropy_loss,
            CrossEntropyLoss::kVocabParallel);
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> refused = {
      {"training", "recompute_granularity", "full", "op needs training.recompute_granularity: "
                                                    "selective, got full"},
      {"training", "recompute_granularity", "none", "op needs training.recompute_granularity: "
                                                    "selective, got none"},
      {"parallelism", "tensor_model_parallel_size", "2",
       "op needs parallelism.tensor_model_parallel_size: 1, got 2"},
      {"training", "attention_backend", "unfused",
       "op needs training.attention_backend: flash or fused, got unfused"},
      {"model", "architecture", "gpt", "op needs model.activation: swiglu, got gelu"},
      {"model", "add_bias_linear", "true", "op needs model.add_bias_linear: false, got true"},
  };
  for (const auto& [section, key, value, message] : refused) {
    ScenarioText bad = t;
    bad.set(section, key, value);
    EXPECT_THAT(error_of(bad), AllOf(HasSubstr("training.selective_ac_option"), HasSubstr(message)))
        << key << " " << value;
  }
  ScenarioText typo = t;
  typo.set("training", "selective_ac_option", "2");
  EXPECT_THAT(error_of(typo), AllOf(HasSubstr("training.selective_ac_option"),
                                    HasSubstr("core_attn"), HasSubstr("op")));
}

TEST(ScenarioRules, TensorParallelDividesHeads) {
  ScenarioText t;
  t.set("model", "num_attention_heads", "4")
      .set("parallelism", "tensor_model_parallel_size", "8")
      .set("cluster", "num_gpus", "16");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "parallelism.tensor_model_parallel_size") +
                                           "parallelism.tensor_model_parallel_size"),
                                 HasSubstr("8 does not divide model.num_attention_heads = 4")));
}

TEST(ScenarioRules, TensorParallelDividesFfnHiddenSize) {
  ScenarioText t;
  t.set("model", "ffn_hidden_size", "1001");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("parallelism.tensor_model_parallel_size"),
                                 HasSubstr("2 does not divide model.ffn_hidden_size = 1001")));
}

TEST(ScenarioRules, NumLayersDivisibleByPipelineTimesVirtual) {
  ScenarioText t;
  t.set("model", "num_layers", "6")
      .set("parallelism", "pipeline_model_parallel_size", "4")
      .set("cluster", "num_gpus", "16");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "model.num_layers") + "model.num_layers"),
                                 HasSubstr("6 is not divisible by pipeline_model_parallel_size x "
                                           "virtual_pipeline_model_parallel_size = 4 x 1 = 4")));
  t = ScenarioText();
  t.set("parallelism", "virtual_pipeline_model_parallel_size", "3");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("model.num_layers"), HasSubstr("= 2 x 3 = 6")));
}

TEST(ScenarioRules, NumLayersDivisibleByPipelineTimesLayersPerVirtualStage) {
  ScenarioText t;
  t.set("parallelism", "num_layers_per_virtual_pipeline_stage", "3");
  EXPECT_THAT(error_of(t),
              AllOf(HasSubstr(at(t, "parallelism.num_layers_per_virtual_pipeline_stage") +
                              "parallelism.num_layers_per_virtual_pipeline_stage"),
                    HasSubstr("model.num_layers = 8 is not divisible by "
                              "pipeline_model_parallel_size x "
                              "num_layers_per_virtual_pipeline_stage = 2 x 3 = 6")));
}

// ----- uneven pipeline split (core/pipeline_split.hpp has the rules and their tests) -----------

/// A 126-layer model on TP 2 x PP 8 x VP 8 with both account flags: NVIDIA's Llama 3.1 405B
/// recipe's split, shrunk to 16 GPUs.
ScenarioText llama_split_text() {
  ScenarioText t;
  t.set("model", "num_layers", "126")
      .set("parallelism", "pipeline_model_parallel_size", "8")
      .set("parallelism", "virtual_pipeline_model_parallel_size", "8")
      .set("parallelism", "account_for_embedding_in_pipeline_split", "true")
      .set("parallelism", "account_for_loss_in_pipeline_split", "true")
      .set("cluster", "num_gpus", "16");
  return t;
}

TEST(ScenarioUnevenSplit, Llama405bLayoutIsAccepted) {
  const Scenario s = parse(llama_split_text().text());
  EXPECT_TRUE(s.parallel.account_for_embedding_in_pipeline_split);
  EXPECT_TRUE(s.parallel.account_for_loss_in_pipeline_split);
  EXPECT_FALSE(s.parallel.decoder_first_pipeline_num_layers.has_value());
  EXPECT_EQ(chunk_layers(s, 0, 0), (ChunkLayers{0, 1}));
  EXPECT_EQ(chunk_layers(s, 7, 7), (ChunkLayers{125, 1}));
  EXPECT_EQ(layers_per_stage_text(s), "15/16/16/16/16/16/16/15");
  // Without the flags the same layout is refused, naming the way out.
  EXPECT_THAT(error_of(llama_split_text(),
                       {{"parallelism.account_for_embedding_in_pipeline_split", "null"},
                        {"parallelism.account_for_loss_in_pipeline_split", "false"}}),
              AllOf(HasSubstr(at(llama_split_text(), "model.num_layers") +
                              "model.num_layers: 126 is not divisible by "
                              "pipeline_model_parallel_size x virtual_pipeline_model_parallel_size "
                              "= 8 x 8 = 64"),
                    HasSubstr("account_for_embedding/loss_in_pipeline_split")));
}

TEST(ScenarioUnevenSplit, LayersPerVirtualStageCountsTheAccountedEmbeddingAndLoss) {
  // Megatron: v = (126 + 2) / 8 / 2 = 8.
  const Scenario s = parse(llama_split_text().text(),
                           {{"parallelism.num_layers_per_virtual_pipeline_stage", "2"}});
  EXPECT_EQ(s.parallel.virtual_pipeline_model_parallel_size, 8);
  EXPECT_EQ(layers_on_stage(s, 0), 15);
  EXPECT_THAT(error_of(llama_split_text(),
                       {{"parallelism.num_layers_per_virtual_pipeline_stage", "3"}}),
              HasSubstr("--set: parallelism.num_layers_per_virtual_pipeline_stage: 3: "
                        "model.num_layers + 2 (embedding/loss accounted in the split) = 128 is not "
                        "divisible by pipeline_model_parallel_size x "
                        "num_layers_per_virtual_pipeline_stage = 8 x 3 = 24"));
}

TEST(ScenarioUnevenSplit, FirstAndLastStageCounts) {
  ScenarioText t;
  t.set("model", "num_layers", "30")
      .set("parallelism", "pipeline_model_parallel_size", "4")
      .set("parallelism", "decoder_first_pipeline_num_layers", "6")
      .set("parallelism", "decoder_last_pipeline_num_layers", "6")
      .set("cluster", "num_gpus", "8");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.parallel.decoder_first_pipeline_num_layers, 6);
  EXPECT_EQ(s.parallel.decoder_last_pipeline_num_layers, 6);
  EXPECT_EQ(layers_per_stage_text(s), "6/9/9/6");
  // A rule broken in the file names file:line and the key.
  t.set("parallelism", "decoder_first_pipeline_num_layers", "5");
  EXPECT_THAT(error_of(t),
              HasSubstr(at(t, "parallelism.decoder_first_pipeline_num_layers") +
                        "parallelism.decoder_first_pipeline_num_layers: the 19 layers left by "
                        "decoder_first_pipeline_num_layers + decoder_last_pipeline_num_layers = "
                        "5 + 6 (of model.num_layers = 30) are not divisible by the 2 middle "
                        "pipeline stage(s)"));
  // Not with the account flags (Megatron-Core refuses the combination).
  EXPECT_THAT(error_of(t, {{"parallelism.decoder_first_pipeline_num_layers", "6"},
                           {"parallelism.account_for_loss_in_pipeline_split", "true"}}),
              HasSubstr("--set: parallelism.decoder_first_pipeline_num_layers: cannot be combined "
                        "with parallelism.account_for_loss_in_pipeline_split"));
  // Not with num_layers_per_virtual_pipeline_stage (Megatron asks for the chunk count).
  EXPECT_THAT(error_of(t, {{"parallelism.decoder_first_pipeline_num_layers", "6"},
                           {"parallelism.num_layers_per_virtual_pipeline_stage", "3"}}),
              AllOf(HasSubstr("--set: parallelism.num_layers_per_virtual_pipeline_stage: cannot be "
                              "used with parallelism.decoder_first_pipeline_num_layers (at --set)"),
                    HasSubstr("virtual_pipeline_model_parallel_size")));
  // Counts are integers >= 1.
  EXPECT_THAT(error_of(t, {{"parallelism.decoder_last_pipeline_num_layers", "0"}}),
              HasSubstr("--set: parallelism.decoder_last_pipeline_num_layers: must be"));
  // One pipeline stage: refused.
  EXPECT_THAT(error_of(t, {{"parallelism.decoder_first_pipeline_num_layers", "6"},
                           {"parallelism.pipeline_model_parallel_size", "1"}}),
              HasSubstr("needs parallelism.pipeline_model_parallel_size > 1, got 1"));
}

TEST(ScenarioRules, NumGpusDivisibleByModelParallelWhenDataParallelDerived) {
  ScenarioText t;
  t.set("cluster", "num_gpus", "10");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "cluster.num_gpus") + "cluster.num_gpus"),
                                 HasSubstr("10 is not divisible by tensor_model_parallel_size x "
                                           "context_parallel_size x pipeline_model_parallel_size "
                                           "= 2 x 1 x 2 = 4")));
}

TEST(ScenarioRules, GivenDataParallelSizeMustMatchNumGpus) {
  ScenarioText t;
  t.set("parallelism", "data_parallel_size", "4");
  EXPECT_THAT(error_of(t),
              AllOf(HasSubstr(at(t, "parallelism.data_parallel_size") +
                              "parallelism.data_parallel_size: 4 disagrees with cluster.num_gpus"),
                    HasSubstr("8 / (2 x 1 x 2) = 2"), HasSubstr("set it to 2 or remove it")));
}

TEST(ScenarioRules, GlobalBatchDivisibleByMicroBatchTimesDataParallel) {
  ScenarioText t;
  t.set("training", "micro_batch_size", "3");
  EXPECT_THAT(error_of(t),
              AllOf(HasSubstr(at(t, "training.global_batch_size") + "training.global_batch_size"),
                    HasSubstr("8 is not divisible by training.micro_batch_size x "
                              "parallelism.data_parallel_size = 3 x 2 = 6")));
}

TEST(ScenarioRules, InterleavingNeedsMicroBatchesDivisibleByPipeline) {
  ScenarioText t;
  // v = 2, DP = 2, b = 1, B = 6: 3 micro-batches, not divisible by PP = 2.
  t.set("parallelism", "virtual_pipeline_model_parallel_size", "2")
      .set("training", "global_batch_size", "6");
  EXPECT_THAT(error_of(t),
              AllOf(HasSubstr(at(t, "parallelism.virtual_pipeline_model_parallel_size") +
                              "parallelism.virtual_pipeline_model_parallel_size"),
                    HasSubstr("= 6 / (1 x 2) = 3"),
                    HasSubstr("divisible by pipeline_model_parallel_size = 2")));
  // Without interleaving the same batch is fine.
  t.erase("parallelism", "virtual_pipeline_model_parallel_size");
  EXPECT_NO_THROW(parse(t.text()));
}

TEST(ScenarioRules, InterleavingNeeds1F1B) {
  ScenarioText t;
  t.set("parallelism", "virtual_pipeline_model_parallel_size", "2")
      .set("parallelism", "pipeline_schedule", "gpipe");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("parallelism.virtual_pipeline_model_parallel_size"),
                                 HasSubstr("pipeline_schedule: 1f1b (or zb-v, dualpipe or dualpipev with 2 chunks), got gpipe")));
}

TEST(ScenarioRules, InterleavingNeedsAPipeline) {
  ScenarioText t;
  t.set("parallelism", "pipeline_model_parallel_size", "1")
      .set("parallelism", "virtual_pipeline_model_parallel_size", "2")
      .set("cluster", "num_gpus", "4");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("parallelism.virtual_pipeline_model_parallel_size"),
                                 HasSubstr("pipeline_model_parallel_size > 1, got 1")));
}

// Megatron-FSDP (Megatron-LM's Megatron-FSDP guide: --use-megatron-fsdp with
// --use-distributed-optimizer; --data-parallel-sharding-strategy applies to Megatron-FSDP).
TEST(ScenarioRules, MegatronFsdpKeys) {
  ScenarioText t;
  t.set("training", "use_megatron_fsdp", "true")
      .set("training", "use_distributed_optimizer", "true")
      .set("training", "data_parallel_sharding_strategy", "optim_grads");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.training.data_parallel_sharding_strategy, DataParallelShardingStrategy::kOptimGrads);
  EXPECT_EQ(s.training.zero_stage(), 2);

  ScenarioText no_distopt;
  no_distopt.set("training", "use_megatron_fsdp", "true");
  EXPECT_THAT(error_of(no_distopt),
              AllOf(HasSubstr("training.use_megatron_fsdp"),
                    HasSubstr("needs training.use_distributed_optimizer: true")));
  ScenarioText no_fsdp;
  no_fsdp.set("training", "data_parallel_sharding_strategy", "optim_grads_params");
  EXPECT_THAT(error_of(no_fsdp), AllOf(HasSubstr("training.data_parallel_sharding_strategy"),
                                       HasSubstr("optim_grads_params needs "
                                                 "training.use_megatron_fsdp: true")));
  ScenarioText bad;
  bad.set("training", "data_parallel_sharding_strategy", "zero3");
  EXPECT_THAT(error_of(bad),
              AllOf(HasSubstr("training.data_parallel_sharding_strategy"),
                    HasSubstr("no_shard, optim, optim_grads, optim_grads_params")));
}

// ZeRO-3's unit schedule: reshard_after_forward and fsdp_prefetch_depth parse with ZeRO-3 and
// are refused by name below it (only sharded parameters are gathered and prefetched).
TEST(ScenarioRules, FsdpReshardAndPrefetchKeys) {
  ScenarioText t;
  t.set("training", "use_megatron_fsdp", "true")
      .set("training", "use_distributed_optimizer", "true")
      .set("training", "data_parallel_sharding_strategy", "optim_grads_params")
      .set("training", "reshard_after_forward", "false")
      .set("training", "fsdp_prefetch_depth", "3");
  const Scenario s = parse(t.text());
  EXPECT_FALSE(s.training.reshard_after_forward);
  EXPECT_EQ(s.training.fsdp_prefetch_depth, 3);
  EXPECT_TRUE(Scenario{}.training.reshard_after_forward);
  EXPECT_EQ(Scenario{}.training.fsdp_prefetch_depth, 1);

  ScenarioText zero2;
  zero2.set("training", "use_megatron_fsdp", "true")
      .set("training", "use_distributed_optimizer", "true")
      .set("training", "data_parallel_sharding_strategy", "optim_grads")
      .set("training", "reshard_after_forward", "false");
  EXPECT_THAT(error_of(zero2),
              AllOf(HasSubstr("training.reshard_after_forward"),
                    HasSubstr("false needs training.use_megatron_fsdp: true with "
                              "training.data_parallel_sharding_strategy: optim_grads_params"),
                    HasSubstr("got ZeRO-2")));
  ScenarioText plain;
  plain.set("training", "fsdp_prefetch_depth", "2");
  EXPECT_THAT(error_of(plain), AllOf(HasSubstr("training.fsdp_prefetch_depth"),
                                     HasSubstr("2 needs training.use_megatron_fsdp"),
                                     HasSubstr("got ZeRO-")));
  ScenarioText negative;
  negative.set("training", "use_megatron_fsdp", "true")
      .set("training", "use_distributed_optimizer", "true")
      .set("training", "data_parallel_sharding_strategy", "optim_grads_params")
      .set("training", "fsdp_prefetch_depth", "-1");
  EXPECT_THAT(error_of(negative), HasSubstr("training.fsdp_prefetch_depth"));
}

// CPU offload, as Megatron-LM asserts it (megatron/training/arguments.py: optimizer offload needs
// --use-precision-aware-optimizer, which needs the distributed optimizer; TransformerConfig:
// activation offload of fewer layers than num_layers, no pipeline parallelism, no
// recomputation). The base scenario has 8 layers, TP 2, PP 2, DP 2.
TEST(ScenarioRules, CpuOffloadKeys) {
  ScenarioText t;
  t.set("training", "use_distributed_optimizer", "true")
      .set("training", "optimizer_cpu_offload", "true")
      .set("training", "optimizer_offload_fraction", "0.25");
  const Scenario s = parse(t.text());
  EXPECT_TRUE(s.training.optimizer_cpu_offload);
  EXPECT_EQ(s.training.optimizer_offload_fraction, 0.25);
  EXPECT_EQ(parse(ScenarioText().text()).training.optimizer_offload_fraction, 1.0);  // Megatron's

  ScenarioText range = t;
  range.set("training", "optimizer_offload_fraction", "1.5");
  EXPECT_THAT(error_of(range), AllOf(HasSubstr("training.optimizer_offload_fraction"),
                                     HasSubstr("in [0, 1]")));
  ScenarioText no_offload;
  no_offload.set("training", "optimizer_offload_fraction", "0.5");
  EXPECT_THAT(error_of(no_offload),
              AllOf(HasSubstr("training.optimizer_offload_fraction"),
                    HasSubstr("0.5 needs training.optimizer_cpu_offload: true")));
  ScenarioText no_distopt;
  no_distopt.set("training", "optimizer_cpu_offload", "true");
  EXPECT_THAT(error_of(no_distopt),
              AllOf(HasSubstr("training.optimizer_cpu_offload"),
                    HasSubstr("needs training.use_distributed_optimizer: true"),
                    HasSubstr("--use-precision-aware-optimizer")));
  ScenarioText fsdp = t;
  fsdp.set("training", "use_megatron_fsdp", "true");
  EXPECT_THAT(error_of(fsdp), AllOf(HasSubstr("training.optimizer_cpu_offload"),
                                    HasSubstr("use_megatron_fsdp is not supported")));

  // Activation offload: PP 1 (8 GPUs: TP 2 x DP 4).
  ScenarioText act;
  act.set("parallelism", "pipeline_model_parallel_size", "1")
      .set("training", "cpu_offloading", "true")
      .set("training", "cpu_offloading_num_layers", "7");
  EXPECT_EQ(parse(act.text()).training.cpu_offloading_num_layers, 7);
  ScenarioText all = act;
  all.set("training", "cpu_offloading_num_layers", "8");
  EXPECT_THAT(error_of(all), AllOf(HasSubstr("training.cpu_offloading_num_layers"),
                                   HasSubstr("8 must be below model.num_layers = 8 (allowed: 0 "
                                             "to 7")));
  ScenarioText pp = act;
  pp.set("parallelism", "pipeline_model_parallel_size", "2");
  EXPECT_THAT(error_of(pp), AllOf(HasSubstr("training.cpu_offloading"),
                                  HasSubstr("needs parallelism.pipeline_model_parallel_size: 1, "
                                            "got 2")));
  ScenarioText recompute = act;
  recompute.set("training", "recompute_granularity", "selective");
  EXPECT_THAT(error_of(recompute),
              AllOf(HasSubstr("training.cpu_offloading"),
                    HasSubstr("needs training.recompute_granularity: none, got selective")));
  ScenarioText layers_alone;
  layers_alone.set("training", "cpu_offloading_num_layers", "2");
  EXPECT_THAT(error_of(layers_alone),
              AllOf(HasSubstr("training.cpu_offloading_num_layers"),
                    HasSubstr("2 needs training.cpu_offloading: true")));
}

// HSDP (Megatron-Core's --num-distributed-optimizer-instances): DP 2 here, so 2 instances of
// one rank each; 3 does not divide DP x CP = 2; it needs the distributed optimizer; 0 is refused
// by the reader; a mixture of experts is not split.
TEST(ScenarioRules, HsdpInstancesDivideDpTimesCp) {
  ScenarioText t;
  t.set("training", "use_distributed_optimizer", "true")
      .set("training", "num_distributed_optimizer_instances", "2");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.training.num_distributed_optimizer_instances, 2);
  EXPECT_EQ(s.data_parallel_shard_size(), 1);
  ScenarioText three = t;
  three.set("training", "num_distributed_optimizer_instances", "3");
  EXPECT_THAT(error_of(three),
              AllOf(HasSubstr("training.num_distributed_optimizer_instances"),
                    HasSubstr("3 does not divide data_parallel_size x context_parallel_size = "
                              "2 x 1 = 2 (allowed: 1, 2;")));
  ScenarioText no_distopt;
  no_distopt.set("training", "num_distributed_optimizer_instances", "2");
  EXPECT_THAT(error_of(no_distopt),
              AllOf(HasSubstr("training.num_distributed_optimizer_instances"),
                    HasSubstr("needs training.use_distributed_optimizer: true")));
  ScenarioText zero = t;
  zero.set("training", "num_distributed_optimizer_instances", "0");
  EXPECT_THAT(error_of(zero), HasSubstr("training.num_distributed_optimizer_instances"));
}

TEST(ScenarioRules, SequenceParallelNeedsTensorParallel) {
  ScenarioText t;
  t.set("parallelism", "tensor_model_parallel_size", "1")
      .set("parallelism", "sequence_parallel", "true")
      .set("cluster", "num_gpus", "4");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "parallelism.sequence_parallel") +
                                           "parallelism.sequence_parallel"),
                                 HasSubstr("tensor_model_parallel_size > 1, got 1")));
}

TEST(ScenarioRules, TpCommOverlapNeedsSequenceParallel) {
  ScenarioText t;
  t.set("training", "tp_comm_overlap", "true");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "training.tp_comm_overlap")),
                                 HasSubstr("needs parallelism.sequence_parallel: true")));
}

TEST(ScenarioRules, BlockingTpAllReduceNeedsNoSequenceParallel) {
  ScenarioText t;
  t.set("parallelism", "sequence_parallel", "true")
      .set("training", "async_tensor_model_parallel_allreduce", "false");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "training.async_tensor_model_parallel_allreduce")),
                                 HasSubstr("false needs parallelism.sequence_parallel: false")));
}

// Megatron's fused cross entropy casts the logits' gradient to bf16 (fused_cross_entropy.py,
// calculate_gradients): fp16 or fp32 training with it is refused, bf16 accepted; it fuses
// Megatron's vocab-parallel loss, so torch's loss with it is refused.
TEST(ScenarioRules, FusedCrossEntropyNeedsBf16) {
  ScenarioText t;
  t.set("training", "cross_entropy_loss_fusion", "true").set("training", "precision", "fp16");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "training.cross_entropy_loss_fusion")),
                                 HasSubstr("needs training.precision: bf16 (got fp16")));
  t.set("training", "precision", "bf16");
  EXPECT_TRUE(parse(t.text()).training.cross_entropy_loss_fusion);
  t.set("training", "cross_entropy_loss", "torch");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "training.cross_entropy_loss_fusion")),
                                 HasSubstr("needs training.cross_entropy_loss: vocab_parallel")));
}

// Gradient accumulation fusion: on by default (Megatron-LM's default since 83b1e42f30); off is
// Megatron DDP's param hook into its gradient buffer, which ZeRO-2/3 (Megatron-FSDP optim_grads,
// optim_grads_params) does not keep: refused there, accepted with the distributed optimizer.
TEST(ScenarioRules, UnfusedGradientAccumulationNeedsZeroBelowTwo) {
  ScenarioText t;
  EXPECT_TRUE(parse(t.text()).training.gradient_accumulation_fusion);
  t.set("training", "gradient_accumulation_fusion", "false")
      .set("training", "use_distributed_optimizer", "true");
  EXPECT_FALSE(parse(t.text()).training.gradient_accumulation_fusion);
  t.set("training", "use_megatron_fsdp", "true")
      .set("training", "data_parallel_sharding_strategy", "optim_grads");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "training.gradient_accumulation_fusion")),
                                 HasSubstr("false needs a zero stage below 2 (got 2")));
}

TEST(ScenarioRules, OverlapParamGatherNeedsDistributedOptimizerAndGradReduceOverlap) {
  ScenarioText t;
  t.set("training", "overlap_param_gather", "true").set("training", "overlap_grad_reduce", "true");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("training.overlap_param_gather"),
                                 HasSubstr("needs training.use_distributed_optimizer: true")));
  t.set("training", "use_distributed_optimizer", "true")
      .set("training", "overlap_grad_reduce", "false");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("training.overlap_param_gather"),
                                 HasSubstr("needs training.overlap_grad_reduce: true")));
}

TEST(ScenarioRules, ContextParallelDividesSeqLength) {
  ScenarioText t;
  t.set("parallelism", "context_parallel_size", "3").set("cluster", "num_gpus", "12");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "parallelism.context_parallel_size") +
                                           "parallelism.context_parallel_size"),
                                 HasSubstr("3 needs model.seq_length = 128 divisible by 2 x "
                                           "context_parallel_size = 6")));
  // 2 x CP must divide s (the 2 x CP chunks of the causal load balance): CP 2 with s 130 fails,
  // with 128 it loads.
  t.set("parallelism", "context_parallel_size", "2").set("cluster", "num_gpus", "16");
  EXPECT_NO_THROW(parse(t.text()));
  t.set("model", "seq_length", "130");
  EXPECT_THAT(error_of(t), HasSubstr("divisible by 2 x context_parallel_size = 4"));
}

// Architecture presets fill the layer keys; keys given in the file win.
TEST(ScenarioModern, ArchitecturePresets) {
  ScenarioText t;
  Scenario s = parse(t.text());
  EXPECT_EQ(s.model.normalization, Normalization::kLayerNorm);
  EXPECT_EQ(s.model.activation, Activation::kGelu);
  EXPECT_EQ(s.model.position_embedding_type, PositionEmbedding::kLearnedAbsolute);
  EXPECT_FALSE(s.model.untie_embeddings_and_output_weights);
  EXPECT_TRUE(s.model.add_bias_linear);
  EXPECT_EQ(s.model.num_query_groups, 8);
  EXPECT_EQ(s.training.attention_backend, AttentionBackend::kUnfused);
  EXPECT_FALSE(s.training.fp8());

  t.set("model", "architecture", "llama").set("model", "num_query_groups", "2");
  s = parse(t.text());
  EXPECT_EQ(s.model.normalization, Normalization::kRmsNorm);
  EXPECT_EQ(s.model.activation, Activation::kSwiglu);
  EXPECT_EQ(s.model.position_embedding_type, PositionEmbedding::kRope);
  EXPECT_TRUE(s.model.untie_embeddings_and_output_weights);
  EXPECT_FALSE(s.model.add_bias_linear);
  EXPECT_EQ(s.model.num_query_groups, 2);
  EXPECT_EQ(s.training.attention_backend, AttentionBackend::kFlash);

  t.set("model", "architecture", "nemotron");
  s = parse(t.text());
  EXPECT_EQ(s.model.normalization, Normalization::kLayerNorm);
  EXPECT_EQ(s.model.activation, Activation::kSquaredRelu);
  EXPECT_EQ(s.model.position_embedding_type, PositionEmbedding::kRope);
  EXPECT_TRUE(s.model.untie_embeddings_and_output_weights);

  // Explicit keys win over the preset, from the file and from --set.
  t.set("model", "architecture", "llama")
      .set("model", "normalization", "layernorm")
      .set("model", "add_bias_linear", "true")
      .set("training", "attention_backend", "unfused");
  s = parse(t.text(), {{"model.activation", "gelu"}});
  EXPECT_EQ(s.model.normalization, Normalization::kLayerNorm);
  EXPECT_TRUE(s.model.add_bias_linear);
  EXPECT_EQ(s.model.activation, Activation::kGelu);
  EXPECT_EQ(s.training.attention_backend, AttentionBackend::kUnfused);
  EXPECT_EQ(s.model.position_embedding_type, PositionEmbedding::kRope);
}

TEST(ScenarioModern, QueryGroupRules) {
  ScenarioText t;
  t.set("model", "num_query_groups", "3");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "model.num_query_groups")),
                                 HasSubstr("3 does not divide model.num_attention_heads = 8")));
  t.set("model", "num_query_groups", "1");  // MQA: TP 2 cannot split one K/V head
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("parallelism.tensor_model_parallel_size"),
                                 HasSubstr("does not divide model.num_query_groups = 1")));
  t.set("parallelism", "tensor_model_parallel_size", "1").set("cluster", "num_gpus", "4");
  EXPECT_EQ(parse(t.text()).model.query_groups(), 1);
  t.set("model", "num_query_groups", "0");
  EXPECT_THAT(error_of(t), HasSubstr("model.num_query_groups"));
}

TEST(ScenarioModern, RopeNeedsAnEvenHeadDim) {
  ScenarioText t;
  t.set("model", "hidden_size", "24").set("model", "position_embedding_type", "rope");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("model.position_embedding_type"),
                                 HasSubstr("even head dimension")));
}

// model.rotary_base (Megatron --rotary-base): 10000 by default, any base > 0 with RoPE, an error
// with learned positions (it would be ignored) or when not positive.
TEST(ScenarioModern, RotaryBase) {
  ScenarioText t;
  t.set("model", "position_embedding_type", "rope");
  EXPECT_EQ(parse(t.text()).model.rotary_base, 10000.0);
  t.set("model", "rotary_base", "500000");
  EXPECT_EQ(parse(t.text()).model.rotary_base, 500000.0);
  EXPECT_EQ(parse(t.text(), {{"model.rotary_base", "1e6"}}).model.rotary_base, 1e6);
  t.set("model", "rotary_base", "0");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("model.rotary_base"), HasSubstr("> 0")));
  t.set("model", "rotary_base", "500000").set("model", "position_embedding_type",
                                               "learned_absolute");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("model.rotary_base"),
                                 HasSubstr("applies only to position_embedding_type: rope")));
}

TEST(ScenarioModern, Fp8KeysAndRules) {
  ScenarioText t;
  t.set("training", "fp8_format", "hybrid");
  Scenario s = parse(t.text());
  ASSERT_TRUE(s.training.fp8());
  EXPECT_EQ(*s.training.fp8_format, Fp8Format::kHybrid);
  EXPECT_EQ(s.training.fp8_recipe, Fp8Recipe::kDelayed);
  EXPECT_EQ(gemm_precision(s.training), Precision::kFp8);
  t.set("training", "fp8_recipe", "blockwise");
  EXPECT_EQ(parse(t.text()).training.fp8_recipe, Fp8Recipe::kBlockwise);
  t.set("training", "fp8_param_gather", "true");
  EXPECT_TRUE(parse(t.text()).training.fp8_param_gather);
  t.erase("training", "fp8_param_gather");
  t.set("training", "precision", "fp32");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("training.fp8_format"),
                                 HasSubstr("needs training.precision bf16 or fp16")));
  // A recipe without a format would silently run no FP8: refused.
  t.set("training", "precision", "bf16").erase("training", "fp8_format");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("training.fp8_recipe"),
                                 HasSubstr("needs training.fp8_format")));
  t.erase("training", "fp8_recipe").set("training", "fp8_param_gather", "true");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("training.fp8_param_gather"),
                                 HasSubstr("needs training.fp8_format")));
}

TEST(ScenarioModern, Float32MatmulPrecisionKeyAndRule) {
  ScenarioText t;
  t.set("training", "precision", "fp32");
  EXPECT_EQ(parse(t.text()).training.float32_matmul_precision, Float32MatmulPrecision::kHighest);
  EXPECT_EQ(matmul_precision(parse(t.text()).training), Precision::kFp32);
  t.set("training", "float32_matmul_precision", "high");
  Scenario s = parse(t.text());
  EXPECT_EQ(s.training.float32_matmul_precision, Float32MatmulPrecision::kHigh);
  EXPECT_EQ(matmul_precision(s.training), Precision::kTf32);
  EXPECT_EQ(gemm_precision(s.training), Precision::kTf32);
  t.set("training", "float32_matmul_precision", "medium");
  // bf16 arithmetic on fp32 operands: keyed apart from bf16 storage (another kernel's cost).
  EXPECT_EQ(gemm_precision(parse(t.text()).training), Precision::kFp32Bf16);
  t.set("training", "float32_matmul_precision", "low");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("training.float32_matmul_precision"),
                                 HasSubstr("highest, high, medium")));
  // It sets the arithmetic of fp32 products only: with 16-bit training it would be ignored.
  t.set("training", "float32_matmul_precision", "high").set("training", "precision", "bf16");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("training.float32_matmul_precision"),
                                 HasSubstr("high needs training.precision fp32, got bf16")));
  t.set("training", "float32_matmul_precision", "highest");
  EXPECT_EQ(matmul_precision(parse(t.text()).training), Precision::kBf16);
}

TEST(ScenarioModern, ContextParallelCommTypeRules) {
  ScenarioText t;
  t.set("parallelism", "context_parallel_size", "2").set("cluster", "num_gpus", "16");
  EXPECT_EQ(parse(t.text()).parallel.cp_comm_type, CpCommType::kP2p);
  t.set("parallelism", "cp_comm_type", "a2a");
  EXPECT_EQ(parse(t.text()).parallel.cp_comm_type, CpCommType::kA2a);
  // a2a re-shards heads over CP: 8 heads / TP 2 = 4 per rank, CP 8 does not divide them.
  t.set("parallelism", "context_parallel_size", "8").set("cluster", "num_gpus", "64");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("parallelism.cp_comm_type"),
                                 HasSubstr("a2a needs context_parallel_size = 8")));
}

TEST(ScenarioRules, RankOrderIsAPermutation) {
  for (const std::string bad :
       {"tp-cp-dp", "tp-tp-dp-pp", "tp-cp-dp-pp-tp", "tp,cp,dp,pp", "TP-CP-DP-PP", "tp-cp-xx-pp"}) {
    ScenarioText t;
    t.set("parallelism", "rank_order", bad);
    SCOPED_TRACE(bad);
    EXPECT_THAT(error_of(t),
                AllOf(HasSubstr(at(t, "parallelism.rank_order") + "parallelism.rank_order"),
                      HasSubstr("not a permutation of tp, cp, ep, dp, pp")));
  }
  for (const std::string good : {"tp-cp-dp-pp", "pp-dp-cp-tp", "tp-pp-dp-cp"}) {
    ScenarioText t;
    t.set("parallelism", "rank_order", good);
    EXPECT_EQ(parse(t.text()).parallel.rank_order, good);
  }
}

TEST(ScenarioRules, RankOrderMayNameExpertParallelism) {
  // Megatron's default order names ep; a dense model (EP 1) may give it or leave it out.
  ScenarioText t;
  t.set("parallelism", "rank_order", "tp-cp-ep-dp-pp");
  EXPECT_EQ(parse(t.text()).parallel.rank_order, "tp-cp-ep-dp-pp");
  EXPECT_EQ(parse(ScenarioText().text()).parallel.rank_order, "tp-cp-ep-dp-pp");  // default
}

TEST(ScenarioRules, BothSpellingsOfVirtualPipelineInTheFileAreAnError) {
  ScenarioText t;
  t.set("parallelism", "virtual_pipeline_model_parallel_size", "2")
      .set("parallelism", "num_layers_per_virtual_pipeline_stage", "2");
  EXPECT_THAT(
      error_of(t),
      AllOf(
          HasSubstr(at(t, "parallelism.num_layers_per_virtual_pipeline_stage") +
                    "parallelism.num_layers_per_virtual_pipeline_stage: cannot be given "
                    "together with parallelism.virtual_pipeline_model_parallel_size"),
          HasSubstr("(at test.yaml:" +
                    std::to_string(t.line_of("parallelism.virtual_pipeline_model_parallel_size")) +
                    ")")));
}

// validate_scenario() on a Scenario built in code.
Scenario valid_in_code() {
  Scenario s;
  s.name = "code";
  s.model = {"gpt", 8, 256, 8, 1024, 128, 1000};
  s.parallel.tensor_model_parallel_size = 2;
  s.parallel.pipeline_model_parallel_size = 2;
  s.parallel.data_parallel_size = 2;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 8;
  s.cluster.num_gpus = 8;
  return s;
}

TEST(ScenarioValidate, BuiltInCode) {
  EXPECT_NO_THROW(validate_scenario(valid_in_code(), "code"));

  Scenario zero = valid_in_code();
  zero.model.seq_length = 0;
  try {
    validate_scenario(zero, "code");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("code: model.seq_length: must be >= 1, got 0"));
  }

  Scenario world = valid_in_code();
  world.parallel.data_parallel_size = 4;
  try {
    validate_scenario(world, "code");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("code: cluster.num_gpus: 8 != "),
                                HasSubstr("= 2 x 1 x 2 x 4 = 16")));
  }

  Scenario arch = valid_in_code();
  arch.model.architecture = "mixtral";
  EXPECT_THROW(validate_scenario(arch, "code"), ConfigError);

  Scenario gpipe = valid_in_code();
  gpipe.parallel.virtual_pipeline_model_parallel_size = 2;
  gpipe.parallel.pipeline_schedule = PipelineScheduleKind::kGPipe;
  EXPECT_THROW(validate_scenario(gpipe, "code"), ConfigError);
}

// ----- overrides -------------------------------------------------------------------------------

TEST(ScenarioOverrides, ValidOverridesReplaceFileValues) {
  ScenarioText t;
  t.set("cluster", "num_gpus", "16");
  const Scenario s = parse(t.text(), {{"parallelism.tensor_model_parallel_size", "4"},
                                      {"parallelism.sequence_parallel", "true"},
                                      {"training.precision", "fp16"},
                                      {"model.ffn_hidden_size", "2048"},
                                      {"name", "renamed"}});
  EXPECT_EQ(s.parallel.tensor_model_parallel_size, 4);
  EXPECT_EQ(s.parallel.data_parallel_size, 2);  // re-derived: 16 / (4 * 2)
  EXPECT_TRUE(s.parallel.sequence_parallel);
  EXPECT_EQ(s.training.precision, Precision::kFp16);
  EXPECT_EQ(s.model.ffn_hidden_size, 2048);
  EXPECT_EQ(s.name, "renamed");
}

TEST(ScenarioOverrides, CanSetAKeyOrSectionAbsentFromTheFile) {
  ScenarioText t;
  t.erase_section("parallelism");
  const Scenario s = parse(t.text(), {{"parallelism.pipeline_model_parallel_size", "4"},
                                      {"training.recompute_granularity", "full"}});
  EXPECT_EQ(s.parallel.pipeline_model_parallel_size, 4);
  EXPECT_EQ(s.parallel.data_parallel_size, 2);
  EXPECT_EQ(s.training.recompute_granularity, RecomputeGranularity::kFull);
}

TEST(ScenarioOverrides, LastOverrideOfAKeyWins) {
  const Scenario s = parse(ScenarioText().text(),
                           {{"training.precision", "fp16"}, {"training.precision", "fp32"}});
  EXPECT_EQ(s.training.precision, Precision::kFp32);
}

TEST(ScenarioOverrides, UnknownKeyNamesAllowedKeysOfTheSection) {
  EXPECT_THAT(error_of(ScenarioText(), {{"parallelism.tensor_parallel_size", "4"}}),
              AllOf(HasSubstr("--set: parallelism.tensor_parallel_size: unknown key"),
                    HasSubstr("did you mean tensor_model_parallel_size?"),
                    HasSubstr("allowed: tensor_model_parallel_size, pipeline_model_parallel_size, "
                              "virtual_pipeline_model_parallel_size")));
  EXPECT_THAT(error_of(ScenarioText(), {{"optimizer.lr", "1"}}),
              AllOf(HasSubstr("--set: optimizer.lr: unknown key"), HasSubstr("parallelism.KEY")));
  EXPECT_THAT(error_of(ScenarioText(), {{"model.num_layers.x", "1"}}),
              HasSubstr("--set: model.num_layers.x: unknown key"));
  EXPECT_THAT(
      error_of(ScenarioText(), {{"training", "1"}}),
      AllOf(HasSubstr("--set: training: is a section"), HasSubstr("allowed: micro_batch_size")));
}

TEST(ScenarioOverrides, TypeErrorsNameTheOverride) {
  EXPECT_THAT(error_of(ScenarioText(), {{"parallelism.tensor_model_parallel_size", "eight"}}),
              HasSubstr("--set: parallelism.tensor_model_parallel_size: expected an integer >= 1, "
                        "got 'eight'"));
  EXPECT_THAT(error_of(ScenarioText(), {{"training.tp_comm_overlap", "yes"}}),
              HasSubstr("--set: training.tp_comm_overlap: expected a boolean"));
  EXPECT_THAT(error_of(ScenarioText(), {{"training.precision", "fp64"}}),
              HasSubstr("--set: training.precision: 'fp64' is not allowed (allowed: fp32, fp16, "
                        "bf16)"));
  EXPECT_THAT(error_of(ScenarioText(), {{"model.num_layers", "[1, 2]"}}),
              HasSubstr("--set: model.num_layers: expected a scalar value"));
  EXPECT_THAT(error_of(ScenarioText(), {{"model.num_layers", "[1, 2"}}),
              HasSubstr("--set: model.num_layers: value '[1, 2' is not valid YAML"));
}

TEST(ScenarioOverrides, RuleErrorsFromAnOverriddenKeySayDashDashSet) {
  ScenarioText t;
  t.set("cluster", "num_gpus", "32");
  EXPECT_THAT(error_of(t, {{"parallelism.tensor_model_parallel_size", "16"}}),
              HasSubstr("--set: parallelism.tensor_model_parallel_size: 16 does not divide "
                        "model.num_attention_heads = 8"));
}

TEST(ScenarioOverrides, LayersPerVirtualStageReplacesVirtualSizeFromFile) {
  ScenarioText t;
  t.set("model", "num_layers", "16")
      .set("parallelism", "virtual_pipeline_model_parallel_size", "2")
      .set("training", "global_batch_size", "4");
  EXPECT_EQ(parse(t.text()).parallel.virtual_pipeline_model_parallel_size, 2);
  const Scenario s = parse(t.text(), {{"parallelism.num_layers_per_virtual_pipeline_stage", "2"}});
  EXPECT_EQ(s.parallel.virtual_pipeline_model_parallel_size, 4);  // 16 / (2 * 2)
}

TEST(ScenarioOverrides, VirtualSizeReplacesLayersPerVirtualStageFromFile) {
  ScenarioText t;
  t.set("model", "num_layers", "16")
      .set("parallelism", "num_layers_per_virtual_pipeline_stage", "2")
      .set("training", "global_batch_size", "4");
  EXPECT_EQ(parse(t.text()).parallel.virtual_pipeline_model_parallel_size, 4);
  const Scenario s = parse(t.text(), {{"parallelism.virtual_pipeline_model_parallel_size", "1"}});
  EXPECT_EQ(s.parallel.virtual_pipeline_model_parallel_size, 1);
  EXPECT_FALSE(s.parallel.interleaved());
}

TEST(ScenarioOverrides, BothSpellingsOfVirtualPipelineInOverridesAreAnError) {
  EXPECT_THAT(
      error_of(ScenarioText(), {{"parallelism.virtual_pipeline_model_parallel_size", "2"},
                                {"parallelism.num_layers_per_virtual_pipeline_stage", "2"}}),
      AllOf(HasSubstr("--set: parallelism.num_layers_per_virtual_pipeline_stage: cannot "
                      "be given together with "
                      "parallelism.virtual_pipeline_model_parallel_size")));
}

TEST(ScenarioOverrides, TensorParallelOverrideAgainstFileDataParallelSizeExplains) {
  ScenarioText t;
  t.set("parallelism", "data_parallel_size", "2");
  const std::string msg = error_of(t, {{"parallelism.tensor_model_parallel_size", "4"}});
  EXPECT_THAT(msg, AllOf(HasSubstr(at(t, "parallelism.data_parallel_size") +
                                   "parallelism.data_parallel_size: 2 disagrees"),
                         HasSubstr("8 / (4 x 1 x 2) = 1"),
                         HasSubstr("--set parallelism.data_parallel_size")));
  // Overriding DP as well resolves it.
  const Scenario s = parse(t.text(), {{"parallelism.tensor_model_parallel_size", "4"},
                                      {"parallelism.data_parallel_size", "1"}});
  EXPECT_EQ(s.parallel.data_parallel_size, 1);
}

TEST(ScenarioOverrides, NullValueRemovesTheKey) {
  ScenarioText t;
  t.set("parallelism", "data_parallel_size", "2").set("model", "ffn_hidden_size", "512");
  // TP 4 with the file's DP 2 disagrees; dropping DP re-derives it.
  const Scenario s = parse(t.text(), {{"parallelism.tensor_model_parallel_size", "4"},
                                      {"parallelism.data_parallel_size", "null"},
                                      {"model.ffn_hidden_size", ""}});
  EXPECT_EQ(s.parallel.data_parallel_size, 1);
  EXPECT_EQ(s.model.ffn_hidden_size, 4 * 256);
  // A required key removed this way is missing.
  EXPECT_THAT(error_of(t, {{"model.num_layers", "~"}}),
              HasSubstr("model.num_layers: missing required key"));
  // A null override does not count against the exclusive pair.
  t.set("model", "num_layers", "16").set("training", "global_batch_size", "4");
  const Scenario v = parse(t.text(), {{"parallelism.virtual_pipeline_model_parallel_size", "null"},
                                      {"parallelism.num_layers_per_virtual_pipeline_stage", "2"}});
  EXPECT_EQ(v.parallel.virtual_pipeline_model_parallel_size, 4);
}

TEST(ScenarioOverrides, OverrideIntoAbsentSectionThenRuleErrorSaysDashDashSet) {
  ScenarioText t;
  t.erase_section("parallelism");
  t.set("cluster", "num_gpus", "3");
  EXPECT_THAT(error_of(t, {{"parallelism.context_parallel_size", "3"},
                           {"parallelism.sequence_parallel", "false"}}),
              HasSubstr("--set: parallelism.context_parallel_size: 3 needs model.seq_length"));
}

TEST(ScenarioOverrides, OverriddenTopologyIsNotRebased) {
  const Scenario s = parse(ScenarioText().text(), {{"cluster.topology", "topologies/x.yaml"}});
  EXPECT_EQ(s.cluster.topology, fs::path("topologies/x.yaml"));
  EXPECT_EQ(parse(ScenarioText().text()).cluster.topology, fs::path("base/topo.yaml"));
}

TEST(ScenarioOverrides, LoadScenarioAppliesOverrides) {
  const Scenario s = load_scenario(kSourceDir / "scenarios" / "gpt3-175b-h100-128.yaml",
                                   {{"parallelism.virtual_pipeline_model_parallel_size", "6"}});
  EXPECT_EQ(s.parallel.virtual_pipeline_model_parallel_size, 6);
  EXPECT_EQ(chunk_layers(s, 0, 0).num_layers, 2);
  try {
    load_scenario(kSourceDir / "scenarios" / "gpt3-175b-h100-1024.yaml",
                  {{"parallelism.tensor_model_parallel_size", "4"},
                   {"parallelism.data_parallel_size", "8"}});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("--set: parallelism.data_parallel_size: 8 disagrees"),
                      HasSubstr("= 16")));
  }
}

// ----- what-if knobs (cluster.what_if) -------------------------------------------------------

TEST(ScenarioWhatIf, AbsentOrEmptyMeansNoKnobs) {
  EXPECT_FALSE(parse(ScenarioText().text()).cluster.what_if.any());
  ScenarioText t;
  t.set("cluster", "what_if", "");
  EXPECT_FALSE(parse(t.text()).cluster.what_if.any());
  t.set("cluster", "what_if", "{}");
  EXPECT_FALSE(parse(t.text()).cluster.what_if.any());
}

TEST(ScenarioWhatIf, EveryKeyIsRead) {
  const std::string text = ScenarioText().text() +
                           "  what_if:\n"
                           "    ib_bandwidth_scale: 2.0\n"
                           "    nvlink_bandwidth_scale: 0.5\n"
                           "    gpu_speed_scale: 1.5e0\n"
                           "    straggler: {rank: 7, compute_scale: 1.2}\n"
                           "    degraded_link:\n"
                           "      name: rail0-leaf0-spine3-c0-up\n"
                           "      bandwidth_scale: 0.5\n";
  const WhatIf w = parse(text).cluster.what_if;
  EXPECT_TRUE(w.any());
  EXPECT_EQ(w.ib_bandwidth_scale, 2.0);
  EXPECT_EQ(w.nvlink_bandwidth_scale, 0.5);
  EXPECT_EQ(w.gpu_speed_scale, 1.5);
  ASSERT_TRUE(w.straggler.has_value());
  EXPECT_EQ(w.straggler->rank, 7);
  EXPECT_EQ(w.straggler->compute_scale, 1.2);
  ASSERT_TRUE(w.degraded_link.has_value());
  EXPECT_EQ(w.degraded_link->name, "rail0-leaf0-spine3-c0-up");
  EXPECT_EQ(w.degraded_link->bandwidth_scale, 0.5);
  // One knob alone; an integer factor and rank 0 are fine.
  ScenarioText one;
  one.set("cluster", "what_if", "{gpu_speed_scale: 2, straggler: {rank: 0, compute_scale: 1}}");
  const WhatIf g = parse(one.text()).cluster.what_if;
  EXPECT_EQ(g.gpu_speed_scale, 2.0);
  EXPECT_FALSE(g.ib_bandwidth_scale.has_value());
  EXPECT_FALSE(g.degraded_link.has_value());
  ASSERT_TRUE(g.straggler.has_value());
  EXPECT_EQ(g.straggler->rank, 0);
}

TEST(ScenarioWhatIf, UnknownKeysAreErrorsWithFileAndLine) {
  const std::string base = ScenarioText().text();
  const int what_if_line = ScenarioText().line_of("cluster.num_gpus") + 1;
  const auto line = [&](int offset) {
    return std::string(kOrigin) + ":" + std::to_string(what_if_line + offset) + ": ";
  };
  EXPECT_THAT(error_of(base + "  what_if:\n    ib_bandwith_scale: 2.0\n"),
              AllOf(HasSubstr(line(1) + "cluster.what_if.ib_bandwith_scale: unknown key; did "
                                        "you mean ib_bandwidth_scale?"),
                    HasSubstr("allowed: ib_bandwidth_scale, nvlink_bandwidth_scale, "
                              "gpu_speed_scale, straggler, degraded_link")));
  EXPECT_THAT(error_of(base + "  what_if:\n    straggler:\n      rank: 1\n      scale: 1.2\n"),
              AllOf(HasSubstr(line(3) + "cluster.what_if.straggler.scale: unknown key"),
                    HasSubstr("allowed: rank, compute_scale")));
  EXPECT_THAT(error_of(base + "  what_if:\n    degraded_link: {nam: x, bandwidth_scale: 0.5}\n"),
              AllOf(HasSubstr(line(1) + "cluster.what_if.degraded_link.nam: unknown key; did "
                                        "you mean name?")));
  EXPECT_THAT(error_of(base + "  what_if:\n    ib_bandwidth_scale: 2\n    ib_bandwidth_scale: 3\n"),
              HasSubstr(line(2) + "cluster.what_if.ib_bandwidth_scale: duplicate key"));
  EXPECT_THAT(error_of(base + "  what_if: 2.0\n"),
              AllOf(HasSubstr(line(0) + "cluster.what_if: expected a mapping of "
                                        "cluster.what_if keys, got '2.0'"),
                    HasSubstr("allowed: ib_bandwidth_scale")));
  EXPECT_THAT(error_of(base + "  what_if:\n    straggler: 3\n"),
              HasSubstr(line(1) + "cluster.what_if.straggler: expected a mapping"));
}

TEST(ScenarioWhatIf, ScalesArePositiveFiniteNumbers) {
  const auto error_for = [](const std::string& value) {
    ScenarioText t;
    t.set("cluster", "what_if", "{ib_bandwidth_scale: " + value + "}");
    return error_of(t);
  };
  ScenarioText t;
  t.set("cluster", "what_if", "{}");
  const std::string where = at(t, "cluster.what_if") + "cluster.what_if.ib_bandwidth_scale: ";
  const std::string range = "must be a number in [0.001, 1000] (a factor: 1.0 = as the "
                            "topology file says), got ";
  EXPECT_THAT(error_for("-2.0"), HasSubstr(where + range + "-2"));
  EXPECT_THAT(error_for("0"), HasSubstr(where + range + "0"));
  // The extremes that broke the simulation (a false SimGrid deadlock, an MFU above 100 %).
  EXPECT_THAT(error_for("1e-320"), HasSubstr(where + range));
  EXPECT_THAT(error_for("1e308"), HasSubstr(where + range + "1e+308"));
  EXPECT_EQ(*parse(t.text(), {{"cluster.what_if.ib_bandwidth_scale", "0.001"}})
                 .cluster.what_if.ib_bandwidth_scale,
            0.001);
  EXPECT_EQ(*parse(t.text(), {{"cluster.what_if.ib_bandwidth_scale", "1000"}})
                 .cluster.what_if.ib_bandwidth_scale,
            1000.0);
  EXPECT_THAT(error_for("\"2.0\""), HasSubstr(where + "expected a number in [0.001, 1000] (a "
                                                      "factor such as 2.0 or 0.5), got the "
                                                      "quoted string"));
  EXPECT_THAT(error_for("twice"), HasSubstr(where + "expected a number in"));
  EXPECT_THAT(error_for(".inf"), HasSubstr(where + "expected a number in"));
  EXPECT_THAT(error_for("2x"), HasSubstr(where + "expected a number in"));
  EXPECT_THAT(error_for("[2]"), HasSubstr(where + "expected a number in"));
  for (const char* key : {"nvlink_bandwidth_scale", "gpu_speed_scale"}) {
    ScenarioText k;
    k.set("cluster", "what_if", std::string("{") + key + ": -1}");
    EXPECT_THAT(error_of(k), HasSubstr(std::string("cluster.what_if.") + key + ": " + range));
  }
  ScenarioText st;
  st.set("cluster", "what_if", "{straggler: {rank: 1, compute_scale: -1.2}}");
  EXPECT_THAT(error_of(st), HasSubstr("cluster.what_if.straggler.compute_scale: " + range));
  ScenarioText dl;
  dl.set("cluster", "what_if", "{degraded_link: {name: node0-nic0-up, bandwidth_scale: 0}}");
  EXPECT_THAT(error_of(dl),
              HasSubstr("cluster.what_if.degraded_link.bandwidth_scale: " + range));
}

TEST(ScenarioWhatIf, StragglerIsOneOfTheClusterRanks) {
  ScenarioText t;  // 8 GPUs
  t.set("cluster", "what_if", "{straggler: {rank: 8, compute_scale: 1.2}}");
  EXPECT_THAT(error_of(t), HasSubstr(at(t, "cluster.what_if") +
                                     "cluster.what_if.straggler.rank: 8 is outside [0, "
                                     "cluster.num_gpus = 8) (rule: the straggler is one of the "
                                     "cluster's global ranks)"));
  t.set("cluster", "what_if", "{straggler: {rank: -1, compute_scale: 1.2}}");
  EXPECT_THAT(error_of(t), HasSubstr("cluster.what_if.straggler.rank: must be >= 0, got -1"));
  t.set("cluster", "what_if", "{straggler: {rank: 1.5, compute_scale: 1.2}}");
  EXPECT_THAT(error_of(t),
              HasSubstr("cluster.what_if.straggler.rank: expected an integer >= 0, got '1.5'"));
  t.set("cluster", "what_if", "{straggler: {rank: 7}}");
  EXPECT_THAT(error_of(t),
              HasSubstr("cluster.what_if.straggler.compute_scale: missing required key"));
  t.set("cluster", "what_if", "{straggler: {rank: 7, compute_scale: 1.2}}");
  EXPECT_EQ(parse(t.text()).cluster.what_if.straggler->rank, 7);
  // More GPUs by override make rank 8 valid.
  t.set("cluster", "what_if", "{straggler: {rank: 8, compute_scale: 1.2}}");
  EXPECT_EQ(parse(t.text(), {{"cluster.num_gpus", "16"}}).cluster.what_if.straggler->rank, 8);
}

TEST(ScenarioWhatIf, DegradedLinkNeedsANameAndAScale) {
  ScenarioText t;
  t.set("cluster", "what_if", "{degraded_link: {bandwidth_scale: 0.5}}");
  EXPECT_THAT(error_of(t), HasSubstr("cluster.what_if.degraded_link.name: missing required key"));
  t.set("cluster", "what_if", "{degraded_link: {name: node0-nic0-up}}");
  EXPECT_THAT(error_of(t),
              HasSubstr("cluster.what_if.degraded_link.bandwidth_scale: missing required key"));
  t.set("cluster", "what_if", "{degraded_link: {name: [a], bandwidth_scale: 0.5}}");
  EXPECT_THAT(error_of(t), HasSubstr("cluster.what_if.degraded_link.name: expected a non-empty "
                                     "string"));
  // Whether the link exists is checked when the platform is built (sim/platform.hpp): the
  // scenario knows no topology.
  t.set("cluster", "what_if", "{degraded_link: {name: no-such-link, bandwidth_scale: 0.5}}");
  EXPECT_EQ(parse(t.text()).cluster.what_if.degraded_link->name, "no-such-link");
}

TEST(ScenarioWhatIf, OverridesSetAndRemoveNestedKeys) {
  const Scenario s = parse(ScenarioText().text(),
                           {{"cluster.what_if.ib_bandwidth_scale", "2.0"},
                            {"cluster.what_if.straggler.rank", "3"},
                            {"cluster.what_if.straggler.compute_scale", "1.2"},
                            {"cluster.what_if.degraded_link.name", "node0-nic0-up"},
                            {"cluster.what_if.degraded_link.bandwidth_scale", "0.5"}});
  const WhatIf& w = s.cluster.what_if;
  EXPECT_EQ(w.ib_bandwidth_scale, 2.0);
  ASSERT_TRUE(w.straggler && w.degraded_link);
  EXPECT_EQ(w.straggler->rank, 3);
  EXPECT_EQ(w.straggler->compute_scale, 1.2);
  EXPECT_EQ(w.degraded_link->name, "node0-nic0-up");
  // Overrides replace file values and remove keys or whole mappings.
  ScenarioText t;
  t.set("cluster", "what_if",
        "{ib_bandwidth_scale: 2.0, straggler: {rank: 1, compute_scale: 1.2}}");
  const Scenario o = parse(t.text(), {{"cluster.what_if.ib_bandwidth_scale", "4"},
                                      {"cluster.what_if.straggler.compute_scale", "1.5"}});
  EXPECT_EQ(o.cluster.what_if.ib_bandwidth_scale, 4.0);
  EXPECT_EQ(o.cluster.what_if.straggler->compute_scale, 1.5);
  EXPECT_EQ(o.cluster.what_if.straggler->rank, 1);
  EXPECT_FALSE(parse(t.text(), {{"cluster.what_if.straggler", "null"}}).cluster.what_if.straggler);
  EXPECT_FALSE(parse(t.text(), {{"cluster.what_if", "null"}}).cluster.what_if.any());
  // Errors say --set.
  EXPECT_THAT(error_of(ScenarioText(), {{"cluster.what_if.ib_bandwidth_scale", "-1"}}),
              HasSubstr("--set: cluster.what_if.ib_bandwidth_scale: must be a number in "
                        "[0.001, 1000]"));
  EXPECT_THAT(error_of(ScenarioText(), {{"cluster.what_if.straggler.rank", "8"},
                                        {"cluster.what_if.straggler.compute_scale", "1.2"}}),
              HasSubstr("--set: cluster.what_if.straggler.rank: 8 is outside [0, "
                        "cluster.num_gpus = 8)"));
  EXPECT_THAT(error_of(ScenarioText(), {{"cluster.what_if.straggler.rank", "2"}}),
              HasSubstr("--set: cluster.what_if.straggler.compute_scale: missing required key"));
  EXPECT_THAT(error_of(ScenarioText(), {{"cluster.what_if.gpu_sped_scale", "2"}}),
              AllOf(HasSubstr("--set: cluster.what_if.gpu_sped_scale: unknown key; did you mean "
                              "gpu_speed_scale?"),
                    HasSubstr("allowed: ib_bandwidth_scale")));
  EXPECT_THAT(error_of(ScenarioText(), {{"cluster.what_if.straggler.ranks", "2"}}),
              AllOf(HasSubstr("--set: cluster.what_if.straggler.ranks: unknown key; did you mean "
                              "rank?"),
                    HasSubstr("allowed: rank, compute_scale")));
  EXPECT_THAT(error_of(ScenarioText(), {{"cluster.what_if", "2"}}),
              HasSubstr("--set: cluster.what_if: is a mapping; set its keys one --set each, "
                        "e.g. --set cluster.what_if.ib_bandwidth_scale=VALUE"));
  // A flow mapping is answered with the dotted form that works.
  EXPECT_THAT(error_of(ScenarioText(), {{"cluster.what_if.straggler", "{rank: 1}"}}),
              HasSubstr("--set: cluster.what_if.straggler: is a mapping; set its keys one --set "
                        "each, e.g. --set cluster.what_if.straggler.rank=VALUE (allowed: rank, "
                        "compute_scale)"));
  EXPECT_THAT(error_of(ScenarioText(), {{"cluster.what_if.ib_bandwidth_scale.x", "2"}}),
              HasSubstr("--set: cluster.what_if.ib_bandwidth_scale.x: unknown key "
                        "(cluster.what_if.ib_bandwidth_scale holds a value"));
  EXPECT_THAT(error_of(ScenarioText(), {{"cluster.num_gpus.x", "2"}}),
              HasSubstr("--set: cluster.num_gpus.x: unknown key"));
}

TEST(ScenarioWhatIf, BuiltInCodeIsValidatedToo) {
  Scenario s = valid_in_code();
  s.cluster.what_if.gpu_speed_scale = 2.0;
  s.cluster.what_if.straggler = Straggler{7, 1.2};
  EXPECT_NO_THROW(validate_scenario(s, "code"));
  s.cluster.what_if.gpu_speed_scale = -1.0;
  EXPECT_THAT([&] { validate_scenario(s, "code"); },
              ::testing::ThrowsMessage<ConfigError>(
                  HasSubstr("code: cluster.what_if.gpu_speed_scale: must be a number in "
                            "[0.001, 1000]")));
  s.cluster.what_if.gpu_speed_scale = 2.0;
  s.cluster.what_if.straggler = Straggler{8, 1.2};
  EXPECT_THAT([&] { validate_scenario(s, "code"); },
              ::testing::ThrowsMessage<ConfigError>(
                  HasSubstr("code: cluster.what_if.straggler.rank: 8 is outside")));
  s.cluster.what_if.straggler.reset();
  s.cluster.what_if.degraded_link = DegradedLink{"", 0.5};
  EXPECT_THROW(validate_scenario(s, "code"), ConfigError);
  s.cluster.what_if.degraded_link = DegradedLink{"node0-nic0-up", std::nan("")};
  EXPECT_THROW(validate_scenario(s, "code"), ConfigError);
}

TEST(ScenarioWhatIf, ShippedExampleDoublesInfiniBand) {
  const Scenario s = load_shipped("whatif-175b-2x-ib");
  const Scenario base = load_shipped("gpt3-175b-h100-1024");
  EXPECT_EQ(s.cluster.what_if.ib_bandwidth_scale, 2.0);
  EXPECT_FALSE(s.cluster.what_if.nvlink_bandwidth_scale || s.cluster.what_if.gpu_speed_scale ||
               s.cluster.what_if.straggler || s.cluster.what_if.degraded_link);
  EXPECT_FALSE(base.cluster.what_if.any());
  // Everything else is the base scenario.
  EXPECT_EQ(s.parallel.tensor_model_parallel_size, base.parallel.tensor_model_parallel_size);
  EXPECT_EQ(s.parallel.pipeline_model_parallel_size, base.parallel.pipeline_model_parallel_size);
  EXPECT_EQ(s.training.global_batch_size, base.training.global_batch_size);
  EXPECT_EQ(s.cluster.num_gpus, base.cluster.num_gpus);
  EXPECT_EQ(s.cluster.topology, base.cluster.topology);
}

// ----- live training (training.*) and data: ----------------------------------------------------

TEST(ScenarioLiveTraining, OptionalKeysTakeMegatronDefaults) {
  const Scenario s = parse(ScenarioText().text());
  const TrainingConfig& t = s.training;
  EXPECT_FALSE(t.train_iters);
  EXPECT_FALSE(t.lr);
  EXPECT_EQ(t.min_lr, 0.0);
  EXPECT_EQ(t.lr_decay_style, LrDecayStyle::kLinear);
  EXPECT_EQ(t.lr_warmup_iters, 0);
  EXPECT_FALSE(t.lr_decay_iters);  // train_iters, which is not given either
  EXPECT_EQ(t.weight_decay, 0.01);
  EXPECT_EQ(t.clip_grad, 1.0);
  EXPECT_EQ(t.adam_beta1, 0.9);
  EXPECT_EQ(t.adam_beta2, 0.999);
  EXPECT_EQ(t.adam_eps, 1e-8);
  EXPECT_EQ(t.hidden_dropout, 0.1);
  EXPECT_EQ(t.attention_dropout, 0.1);
  EXPECT_EQ(t.init_method_std, 0.02);
  EXPECT_EQ(t.seed, 1234);
  EXPECT_EQ(t.log_interval, 100);
  EXPECT_EQ(t.eval_interval, 1000);
  EXPECT_EQ(t.eval_iters, 100);
  EXPECT_FALSE(t.save_interval);
  EXPECT_FALSE(s.data.data_path);
  EXPECT_EQ(s.data.split, "969,30,1");
  EXPECT_FALSE(s.data.vocab_file);
  EXPECT_FALSE(s.data.merge_file);
  EXPECT_STREQ(to_string(LrDecayStyle::kConstant), "constant");
  EXPECT_STREQ(to_string(LrDecayStyle::kLinear), "linear");
  EXPECT_STREQ(to_string(LrDecayStyle::kCosine), "cosine");
}

TEST(ScenarioLiveTraining, EveryKeyIsRead) {
  ScenarioText t;
  t.set("training", "train_iters", "5000")
      .set("training", "lr", "6.0e-4")
      .set("training", "min_lr", "6e-5")
      .set("training", "lr_decay_style", "cosine")
      .set("training", "lr_warmup_iters", "0")
      .set("training", "lr_decay_iters", "4000")
      .set("training", "weight_decay", "0.1")
      .set("training", "clip_grad", "0")
      .set("training", "adam_beta1", "0")
      .set("training", "adam_beta2", "0.95")
      .set("training", "adam_eps", "1e-5")
      .set("training", "hidden_dropout", "0")
      .set("training", "attention_dropout", "0.25")
      .set("training", "init_method_std", "0.006")
      .set("training", "seed", "0")
      .set("training", "log_interval", "1")
      .set("training", "eval_interval", "50")
      .set("training", "eval_iters", "0")
      .set("training", "save_interval", "250");
  const TrainingConfig s = parse(t.text()).training;
  EXPECT_EQ(s.train_iters, 5000);
  EXPECT_EQ(s.lr, 6.0e-4);
  EXPECT_EQ(s.min_lr, 6e-5);
  EXPECT_EQ(s.lr_decay_style, LrDecayStyle::kCosine);
  EXPECT_EQ(s.lr_warmup_iters, 0);
  EXPECT_EQ(s.lr_decay_iters, 4000);
  EXPECT_EQ(s.weight_decay, 0.1);
  EXPECT_EQ(s.clip_grad, 0.0);
  EXPECT_EQ(s.adam_beta1, 0.0);
  EXPECT_EQ(s.adam_beta2, 0.95);
  EXPECT_EQ(s.adam_eps, 1e-5);
  EXPECT_EQ(s.hidden_dropout, 0.0);
  EXPECT_EQ(s.attention_dropout, 0.25);
  EXPECT_EQ(s.init_method_std, 0.006);
  EXPECT_EQ(s.seed, 0);
  EXPECT_EQ(s.log_interval, 1);
  EXPECT_EQ(s.eval_interval, 50);
  EXPECT_EQ(s.eval_iters, 0);
  EXPECT_EQ(s.save_interval, 250);
  // Integers are numbers too: lr: 1 is 1.0.
  t.set("training", "lr", "1").set("training", "min_lr", "1");
  EXPECT_EQ(parse(t.text()).training.lr, 1.0);
}

TEST(ScenarioLiveTraining, LrDecayItersDefaultsToTrainIters) {
  ScenarioText t;
  t.set("training", "train_iters", "500");
  EXPECT_EQ(parse(t.text()).training.lr_decay_iters, 500);
  t.set("training", "lr_decay_iters", "300");
  EXPECT_EQ(parse(t.text()).training.lr_decay_iters, 300);
  t.erase("training", "train_iters");
  EXPECT_EQ(parse(t.text()).training.lr_decay_iters, 300);
}

TEST(ScenarioLiveTraining, EachRangeRuleNamesTheKeyAndTheRule) {
  struct Case {
    const char* key;
    const char* value;
    const char* problem;
  };
  const std::vector<Case> cases = {
      {"train_iters", "0", "must be >= 1, got 0"},
      {"lr", "0", "must be a finite number > 0 (the peak learning rate), got 0"},
      {"lr", "-0.001", "must be a finite number > 0 (the peak learning rate), got -0.001"},
      {"min_lr", "-1e-5", "must be a finite number >= 0 (the floor the learning rate decays to), "
                          "got -1e-05"},
      {"lr_warmup_iters", "-1", "must be >= 0, got -1"},
      {"lr_decay_iters", "0", "must be >= 1, got 0"},
      {"weight_decay", "-0.01", "must be a finite number >= 0 (AdamW weight decay), got -0.01"},
      {"clip_grad", "-1", "must be a finite number >= 0 (the largest global gradient norm; 0 = "
                          "no clipping), got -1"},
      {"adam_beta1", "1", "must be a finite number in [0, 1) (Adam's first-moment decay), got 1"},
      {"adam_beta1", "-0.1", "must be a finite number in [0, 1)"},
      {"adam_beta2", "1.0",
       "must be a finite number in [0, 1) (Adam's second-moment decay), got 1"},
      {"adam_eps", "0", "must be a finite number > 0 (Adam's denominator term), got 0"},
      {"hidden_dropout", "1", "must be a finite number in [0, 1) (a probability), got 1"},
      {"attention_dropout", "-0.5", "must be a finite number in [0, 1) (a probability), got -0.5"},
      {"init_method_std", "0", "must be a finite number > 0 (the standard deviation of the weight "
                               "initialization), got 0"},
      {"seed", "-1", "must be >= 0, got -1"},
      {"log_interval", "0", "must be >= 1, got 0"},
      {"eval_interval", "0", "must be >= 1, got 0"},
      {"eval_iters", "-1", "must be >= 0, got -1"},
      {"save_interval", "0", "must be >= 1, got 0"},
  };
  for (const Case& c : cases) {
    ScenarioText t;
    t.set("training", c.key, c.value);
    const std::string path = std::string("training.") + c.key;
    SCOPED_TRACE(path + " = " + c.value);
    EXPECT_THAT(error_of(t), HasSubstr(at(t, path) + path + ": " + c.problem));
  }
}

TEST(ScenarioLiveTraining, TypesAreChecked) {
  const auto error_for = [](const std::string& key, const std::string& value) {
    ScenarioText t;
    t.set("training", key, value);
    return error_of(t);
  };
  EXPECT_THAT(error_for("lr", "\"3e-4\""),
              HasSubstr("training.lr: expected a finite number > 0, got the quoted string"));
  EXPECT_THAT(error_for("lr", "fast"), HasSubstr("training.lr: expected a finite number > 0"));
  EXPECT_THAT(error_for("lr", ".inf"), HasSubstr("training.lr: expected a finite number > 0"));
  EXPECT_THAT(error_for("adam_beta2", "[0.9]"),
              HasSubstr("training.adam_beta2: expected a finite number in [0, 1), got a sequence"));
  EXPECT_THAT(error_for("train_iters", "1.5"),
              HasSubstr("training.train_iters: expected an integer >= 1, got '1.5'"));
  EXPECT_THAT(error_for("seed", "1e3"), HasSubstr("training.seed: expected an integer >= 0"));
  EXPECT_THAT(error_for("lr_decay_style", "exponential"),
              HasSubstr("training.lr_decay_style: 'exponential' is not allowed (allowed: "
                        "constant, linear, cosine)"));
}

TEST(ScenarioLiveTraining, MinLrIsAtMostLr) {
  ScenarioText t;
  t.set("training", "lr", "1e-4").set("training", "min_lr", "1e-3");
  EXPECT_THAT(error_of(t), HasSubstr(at(t, "training.min_lr") +
                                     "training.min_lr: 0.001 is larger than training.lr = 0.0001 "
                                     "(rule: 0 <= min_lr <= lr"));
  t.set("training", "min_lr", "1e-4");  // equal: a constant floor
  EXPECT_EQ(parse(t.text()).training.min_lr, 1e-4);
  t.erase("training", "lr").set("training", "min_lr", "5");  // no lr: nothing to compare
  EXPECT_EQ(parse(t.text()).training.min_lr, 5.0);
}

TEST(ScenarioLiveTraining, WarmupEndsBeforeTheDecay) {
  ScenarioText t;
  t.set("training", "train_iters", "100").set("training", "lr_warmup_iters", "100");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "training.lr_warmup_iters") +
                                           "training.lr_warmup_iters: 100 is not smaller than "
                                           "training.lr_decay_iters = 100 (train_iters when not "
                                           "given)"),
                                 HasSubstr("lr_warmup_iters < lr_decay_iters")));
  t.set("training", "lr_decay_iters", "200");  // warm-up 100 of a 200-iteration decay
  EXPECT_EQ(parse(t.text()).training.lr_warmup_iters, 100);
  t.set("training", "lr_decay_iters", "60");
  EXPECT_THAT(error_of(t), HasSubstr("training.lr_decay_iters = 60"));
  t.set("training", "lr_warmup_iters", "59");
  EXPECT_EQ(parse(t.text()).training.lr_decay_iters, 60);
}

TEST(ScenarioLiveTraining, OverridesSetCheckAndRemoveTheNewKeys) {
  ScenarioText t;
  t.set("training", "lr", "1e-3").set("training", "seed", "7");
  const Scenario s = parse(t.text(), {{"training.train_iters", "1000"},
                                      {"training.lr", "6e-4"},
                                      {"training.lr_decay_style", "constant"},
                                      {"training.adam_eps", "1e-6"},
                                      {"training.seed", "null"},
                                      {"training.save_interval", "100"},
                                      {"data.data_path", "/abs/brown_text_document"},
                                      {"data.split", "98,2,0"},
                                      {"data.vocab_file", "gpt2/encoder.json"}});
  EXPECT_EQ(s.training.train_iters, 1000);
  EXPECT_EQ(s.training.lr_decay_iters, 1000);
  EXPECT_EQ(s.training.lr, 6e-4);
  EXPECT_EQ(s.training.lr_decay_style, LrDecayStyle::kConstant);
  EXPECT_EQ(s.training.adam_eps, 1e-6);
  EXPECT_EQ(s.training.seed, 1234);  // removed from the file: back to the default
  EXPECT_EQ(s.training.save_interval, 100);
  EXPECT_EQ(s.data.data_path, fs::path("/abs/brown_text_document"));
  EXPECT_EQ(s.data.split, "98,2,0");
  EXPECT_EQ(s.data.vocab_file, fs::path("gpt2/encoder.json"));  // typed here: not rebased

  EXPECT_THAT(error_of(t, {{"training.adam_beta2", "1"}}),
              HasSubstr("--set: training.adam_beta2: must be a finite number in [0, 1)"));
  EXPECT_THAT(error_of(t, {{"training.lr", "1e-5"}, {"training.min_lr", "1e-4"}}),
              HasSubstr("--set: training.min_lr: 0.0001 is larger than training.lr = 1e-05"));
  EXPECT_THAT(error_of(t, {{"training.lr_decay_sytle", "cosine"}}),
              HasSubstr("--set: training.lr_decay_sytle: unknown key; did you mean "
                        "lr_decay_style?"));
  EXPECT_THAT(error_of(t, {{"data.data_pth", "x"}}),
              AllOf(HasSubstr("--set: data.data_pth: unknown key; did you mean data_path?"),
                    HasSubstr("(allowed: data_path, split, vocab_file, merge_file)")));
  EXPECT_THAT(error_of(t, {{"data.split", "1,2,3,4"}}),
              HasSubstr("--set: data.split: '1,2,3,4' is not a valid split"));
  EXPECT_THAT(error_of(t, {{"data", "x"}}), HasSubstr("--set: data: is a section"));
}

TEST(ScenarioData, PathsResolveAgainstTheScenarioFolder) {
  ScenarioText t;
  t.set("data", "data_path", "../data/brown_text_document")
      .set("data", "vocab_file", "../data/gpt2/encoder.json")
      .set("data", "merge_file", "/abs/vocab.bpe");
  const Scenario s = parse_scenario(t.text(), kOrigin, "/x/scenarios");
  EXPECT_EQ(s.data.data_path, fs::path("/x/data/brown_text_document"));
  EXPECT_EQ(s.data.vocab_file, fs::path("/x/data/gpt2/encoder.json"));
  EXPECT_EQ(s.data.merge_file, fs::path("/abs/vocab.bpe"));
  // No base folder (text without a file): kept as written.
  EXPECT_EQ(parse_scenario(t.text(), kOrigin, "").data.data_path,
            fs::path("../data/brown_text_document"));
  // Given by --set: relative to the current directory, not rebased.
  const Scenario o = parse_scenario(t.text(), kOrigin, "/x/scenarios",
                                    {{"data.data_path", "my/prefix"}});
  EXPECT_EQ(o.data.data_path, fs::path("my/prefix"));
  EXPECT_EQ(o.data.vocab_file, fs::path("/x/data/gpt2/encoder.json"));
}

TEST(ScenarioData, LoadScenarioResolvesDataNextToTheFile) {
  const fs::path dir = fs::temp_directory_path() / "traintwin_scenario_data_test";
  fs::create_directories(dir / "scenarios");
  const fs::path file = dir / "scenarios" / "s.yaml";
  ScenarioText t;
  t.set("data", "data_path", "../data/doc").set("data", "merge_file", "m.bpe");
  std::ofstream(file) << t.text();
  const Scenario s = load_scenario(file);
  EXPECT_EQ(s.data.data_path, (dir / "data" / "doc").lexically_normal());
  EXPECT_EQ(s.data.merge_file, (dir / "scenarios" / "m.bpe").lexically_normal());
  EXPECT_FALSE(s.data.vocab_file);
  fs::remove_all(dir);
}

TEST(ScenarioData, UnknownKeyIsAnErrorWithLineAndSuggestion) {
  ScenarioText t;
  t.set("data", "split", "969,30,1").set("data", "data_pth", "x");
  EXPECT_THAT(error_of(t),
              HasSubstr(at(t, "data.data_pth") +
                        "data.data_pth: unknown key; did you mean data_path? (allowed: "
                        "data_path, split, vocab_file, merge_file)"));
  EXPECT_THAT(error_of(ScenarioText().text() + "data: [x]\n"),
              HasSubstr("data: expected a mapping of data keys, got a sequence"));
  // An empty section is all defaults.
  EXPECT_EQ(parse(ScenarioText().text() + "data:\n").data.split, "969,30,1");
}

TEST(ScenarioData, SplitIsOneToThreeNonNegativeWeightsNotAllZero) {
  for (const char* good : {"969,30,1", "1", "0.9,0.1", "\"98, 2, 0\"", "0,0,1"}) {
    ScenarioText t;
    t.set("data", "split", good);
    EXPECT_NO_THROW(parse(t.text())) << good;
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"0,0,0", "'0,0,0' is not a valid split: every weight is zero"},
      {"1,2,3,4", "'1,2,3,4' is not a valid split: 4 fields"},
      {"1,,2", "'1,,2' is not a valid split: field 2 is empty"},
      {"98,2,", "'98,2,' is not a valid split: field 3 is empty"},
      {"a,b", "'a,b' is not a valid split: 'a' is not a number >= 0"},
      {"-1,2", "'-1,2' is not a valid split: '-1' is not a number >= 0"},
  };
  for (const auto& [value, problem] : bad) {
    ScenarioText t;
    t.set("data", "split", value);
    SCOPED_TRACE(value);
    EXPECT_THAT(error_of(t),
                AllOf(HasSubstr(at(t, "data.split") + "data.split: " + problem),
                      HasSubstr("(rule: 1 to 3 comma-separated numbers >= 0, not all zero")));
  }
  ScenarioText empty;
  empty.set("data", "split", "\"\"");
  EXPECT_THAT(error_of(empty), HasSubstr("data.split: expected a non-empty string"));
}

TEST(ScenarioData, SplitFractionsAreNormalizedWeightsPaddedToThree) {
  // 969 + 30 + 1 = 1000.
  const std::array<double, 3> megatron = split_fractions("969,30,1");
  EXPECT_DOUBLE_EQ(megatron[0], 0.969);
  EXPECT_DOUBLE_EQ(megatron[1], 0.030);
  EXPECT_DOUBLE_EQ(megatron[2], 0.001);
  EXPECT_EQ(split_fractions("3,1"), (std::array<double, 3>{0.75, 0.25, 0.0}));
  EXPECT_EQ(split_fractions("7"), (std::array<double, 3>{1.0, 0.0, 0.0}));
  EXPECT_EQ(split_fractions(" 1 , 1 "), (std::array<double, 3>{0.5, 0.5, 0.0}));
  EXPECT_EQ(split_fractions("0,0.5,1.5"), (std::array<double, 3>{0.0, 0.25, 0.75}));
  for (const char* bad : {"", "0", "1,2,3,4", ",1", "x", "1;2", "-0.5,1", "inf,1"}) {
    EXPECT_THROW(split_fractions(bad), InvalidArgument) << bad;
  }
}

TEST(ScenarioLiveTraining, BuiltInCodeIsValidatedToo) {
  Scenario beta = valid_in_code();
  beta.training.adam_beta2 = 1.0;
  try {
    validate_scenario(beta, "code");
    FAIL() << "adam_beta2 = 1 accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("code: training.adam_beta2: must be a finite number in [0, 1)"));
  }
  Scenario nan = valid_in_code();
  nan.training.lr = std::nan("");
  EXPECT_THROW(validate_scenario(nan, "code"), ConfigError);
  Scenario seed = valid_in_code();
  seed.training.seed = -3;
  EXPECT_THROW(validate_scenario(seed, "code"), ConfigError);
  Scenario split = valid_in_code();
  split.data.split = "1:2";
  try {
    validate_scenario(split, "code");
    FAIL() << "split 1:2 accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("code: data.split: '1:2' is not a valid split"));
  }
  Scenario warmup = valid_in_code();  // lr_decay_iters unset: train_iters is the decay
  warmup.training.train_iters = 10;
  warmup.training.lr_warmup_iters = 10;
  EXPECT_THROW(validate_scenario(warmup, "code"), ConfigError);
  warmup.training.lr_warmup_iters = 9;
  EXPECT_NO_THROW(validate_scenario(warmup, "code"));
}

// ----- mixture of experts (issue 13) ----------------------------------------------------------

/// A small llama MoE: 4 layers, 8 experts top-2, TP 2 with SP, 8 GPUs (PP 2, DP 2).
ScenarioText moe_text() {
  ScenarioText t;
  t.set("model", "architecture", "llama")
      .set("model", "num_layers", "4")
      .set("model", "num_moe_experts", "8")
      .set("parallelism", "sequence_parallel", "true");
  return t;
}

// HSDP does not split the expert-data-parallel groups: refused with a mixture of experts.
TEST(ScenarioMoe, HsdpIsRefusedByName) {
  ScenarioText t = moe_text();
  t.set("training", "use_distributed_optimizer", "true")
      .set("training", "num_distributed_optimizer_instances", "2");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("training.num_distributed_optimizer_instances"),
                                 HasSubstr("mixture of experts is not modelled")));
}

TEST(ScenarioMoe, KeysAreReadWithMegatronDefaults) {
  const Scenario dense = parse(ScenarioText().text());
  EXPECT_FALSE(dense.model.is_moe());
  const Scenario s = parse(moe_text().text());
  const ModelSpec& m = s.model;
  EXPECT_TRUE(m.is_moe());
  EXPECT_EQ(m.num_moe_experts, 8);
  EXPECT_EQ(m.moe_router_topk, 2);
  EXPECT_EQ(m.moe_expert_ffn(), m.ffn_hidden_size);
  EXPECT_EQ(m.moe_shared_expert_intermediate_size, 0);
  EXPECT_TRUE(m.moe_layer_pattern.empty());
  for (int64_t l = 0; l < 4; ++l) EXPECT_TRUE(m.is_moe_layer(l));
  EXPECT_FALSE(m.moe_expert_capacity_factor.has_value());
  EXPECT_EQ(m.moe_token_dispatcher_type, MoeTokenDispatcher::kAllGather);
  EXPECT_EQ(m.moe_router_load_balancing_type, MoeLoadBalancing::kAuxLoss);
  EXPECT_EQ(m.moe_aux_loss_coeff, 0.0);
  EXPECT_FALSE(m.moe_grouped_gemm);
  EXPECT_EQ(s.parallel.expert_model_parallel_size, 1);
  EXPECT_FALSE(s.parallel.expert_tensor_parallel_size.has_value());
  EXPECT_EQ(s.parallel.expert_tp(), 2);  // = TP
  EXPECT_EQ(s.parallel.expert_data_parallel_size(), 2);  // TP x CP x DP / (ETP x EP) = 4 / 2

  ScenarioText t = moe_text();
  t.set("model", "moe_router_topk", "3")
      .set("model", "moe_ffn_hidden_size", "128")
      .set("model", "moe_shared_expert_intermediate_size", "256")
      .set("model", "moe_expert_capacity_factor", "1.25")
      .set("model", "moe_pad_expert_input_to_capacity", "true")
      .set("model", "moe_token_dispatcher_type", "alltoall")
      .set("model", "moe_router_load_balancing_type", "none")
      .set("model", "moe_aux_loss_coeff", "0.01")
      .set("model", "moe_grouped_gemm", "true")
      .set("parallelism", "expert_tensor_parallel_size", "1")
      .set("cluster", "what_if", "{moe_load_imbalance: 1.5}");
  const Scenario e = parse(t.text());
  EXPECT_EQ(e.model.moe_router_topk, 3);
  EXPECT_EQ(e.model.moe_expert_ffn(), 128);
  EXPECT_EQ(e.model.moe_shared_expert_intermediate_size, 256);
  EXPECT_EQ(e.model.moe_expert_capacity_factor, 1.25);
  EXPECT_TRUE(e.model.moe_pad_expert_input_to_capacity);
  EXPECT_EQ(e.model.moe_token_dispatcher_type, MoeTokenDispatcher::kAllToAll);
  EXPECT_EQ(e.model.moe_router_load_balancing_type, MoeLoadBalancing::kNone);
  EXPECT_EQ(e.model.moe_aux_loss_coeff, 0.01);
  EXPECT_TRUE(e.model.moe_grouped_gemm);
  EXPECT_EQ(e.parallel.expert_tp(), 1);
  EXPECT_EQ(e.parallel.expert_data_parallel_size(), 4);
  EXPECT_EQ(e.cluster.what_if.moe_load_imbalance, 1.5);
  // null capacity factor = dropless, as absent.
  EXPECT_FALSE(parse(moe_text().set("model", "moe_expert_capacity_factor", "null").text())
                   .model.moe_expert_capacity_factor);
}

TEST(ScenarioMoe, ExpertParallelLayoutsLoadWithTheDefaultOrder) {
  // TP 2 x DP 2 per stage = 4 ranks: EP 2 with ETP 2 (expert DP 1), EP 4 with ETP 1 (1).
  ScenarioText t = moe_text();
  t.set("parallelism", "expert_model_parallel_size", "2");
  Scenario s = parse(t.text());
  EXPECT_EQ(s.parallel.expert_model_parallel_size, 2);
  EXPECT_EQ(s.parallel.expert_data_parallel_size(), 1);
  t.set("parallelism", "expert_model_parallel_size", "4")
      .set("parallelism", "expert_tensor_parallel_size", "1");
  s = parse(t.text());
  EXPECT_EQ(s.parallel.expert_tp(), 1);
  EXPECT_EQ(s.parallel.expert_data_parallel_size(), 1);
  // The flags' overrides.
  s = parse(moe_text().text(), {{"parallelism.expert_model_parallel_size", "2"},
                                {"parallelism.expert_tensor_parallel_size", "1"}});
  EXPECT_EQ(s.parallel.expert_data_parallel_size(), 2);
}

TEST(ScenarioShipped, MoeScenariosMatchTheirPublishedArchitectures) {
  const Scenario mixtral = load_shipped("mixtral-8x7b-h100-64");
  EXPECT_EQ(mixtral.model.num_moe_experts, 8);
  EXPECT_EQ(mixtral.model.moe_router_topk, 2);
  EXPECT_EQ(mixtral.model.moe_expert_ffn(), 14336);
  EXPECT_EQ(mixtral.parallel.expert_model_parallel_size, 8);
  EXPECT_EQ(mixtral.parallel.expert_data_parallel_size(), 2);  // 1 x 1 x 16 / (1 x 8)
  const Scenario grok = load_shipped("grok1-314b-h100-512");
  EXPECT_EQ(grok.parallel.tensor_model_parallel_size, 4);
  EXPECT_EQ(grok.parallel.pipeline_model_parallel_size, 8);
  EXPECT_EQ(grok.parallel.virtual_pipeline_model_parallel_size, 8);
  EXPECT_EQ(grok.parallel.context_parallel_size, 2);
  EXPECT_EQ(grok.parallel.expert_model_parallel_size, 8);
  EXPECT_EQ(grok.parallel.data_parallel_size, 8);
  EXPECT_EQ(grok.parallel.expert_data_parallel_size(), 2);  // 4 x 2 x 8 / (4 x 8)
  const Scenario qwen = load_shipped("qwen3-30b-a3b-h100-16");
  EXPECT_EQ(qwen.model.head_dim(), 128);
  EXPECT_EQ(qwen.model.num_moe_experts, 128);
  EXPECT_EQ(qwen.model.moe_router_topk, 8);
  EXPECT_EQ(qwen.parallel.expert_tp(), 1);
  EXPECT_EQ(qwen.parallel.expert_data_parallel_size(), 2);  // 4 x 1 x 2 / (1 x 4)
}

TEST(ScenarioMoe, LayerFreqIntegerOrList) {
  ScenarioText t = moe_text();
  t.set("model", "moe_layer_freq", "2");
  EXPECT_EQ(parse(t.text()).model.moe_layer_pattern, (std::vector<int>{1, 0, 1, 0}));
  t.set("model", "moe_layer_freq", "[0, 1, 1, 0]");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.model.moe_layer_pattern, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_FALSE(s.model.is_moe_layer(0));
  EXPECT_TRUE(s.model.is_moe_layer(1));
  // An override may give the list.
  EXPECT_EQ(parse(moe_text().text(), {{"model.moe_layer_freq", "[1,1,0,0]"}})
                .model.moe_layer_pattern,
            (std::vector<int>{1, 1, 0, 0}));

  for (const auto& [value, problem] : std::vector<std::pair<std::string, std::string>>{
           {"[1, 0]", "a list of 2 entries"},
           {"[1, 0, 2, 1]", "entry 2 (layer 2) is '2'; expected 0 (dense) or 1 (MoE)"},
           {"[0, 0, 0, 0]", "has no 1"},
           {"0", "expected an integer f >= 1"},
           {"\"([1]*3+[0]*1)\"", "written as the list"}}) {
    ScenarioText bad = moe_text();
    bad.set("model", "moe_layer_freq", value);
    EXPECT_THAT(error_of(bad), AllOf(HasSubstr(at(bad, "model.moe_layer_freq") +
                                               "model.moe_layer_freq: "),
                                     HasSubstr(problem)))
        << value;
  }
}

TEST(ScenarioMoe, EveryMoeKeyNeedsExperts) {
  for (const auto& [section, key, value] : std::vector<std::array<std::string, 3>>{
           {"model", "moe_router_topk", "2"},
           {"model", "moe_ffn_hidden_size", "128"},
           {"model", "moe_shared_expert_intermediate_size", "128"},
           {"model", "moe_layer_freq", "1"},
           {"model", "moe_expert_capacity_factor", "1.0"},
           {"model", "moe_pad_expert_input_to_capacity", "false"},
           {"model", "moe_token_dispatcher_type", "alltoall"},
           {"model", "moe_router_load_balancing_type", "aux_loss"},
           {"model", "moe_aux_loss_coeff", "0.01"},
           {"model", "moe_grouped_gemm", "true"},
           {"parallelism", "expert_model_parallel_size", "1"},
           {"parallelism", "expert_tensor_parallel_size", "1"}}) {
    ScenarioText t;
    t.set(section, key, value);
    EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, section + "." + key) + section + "." + key),
                                   HasSubstr("needs model.num_moe_experts")))
        << key;
  }
  ScenarioText w;
  w.set("cluster", "what_if", "{moe_load_imbalance: 1.5}");
  EXPECT_THAT(error_of(w), AllOf(HasSubstr("cluster.what_if.moe_load_imbalance: needs "
                                           "model.num_moe_experts")));
  // A Scenario built in code: a setting away from its default.
  Scenario s = parse(ScenarioText().text());
  s.model.moe_grouped_gemm = true;
  try {
    validate_scenario(s, "code");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("code: model.moe_grouped_gemm: needs model.num_moe_experts"));
  }
}

TEST(ScenarioMoe, Rules) {
  struct Case {
    std::vector<std::array<std::string, 3>> keys;
    std::string key, problem;
  };
  const std::vector<Case> cases = {
      {{{"model", "moe_router_topk", "9"}},
       "model.moe_router_topk",
       "9 is outside [1, model.num_moe_experts = 8]"},
      {{{"model", "num_moe_experts", "0"}}, "model.num_moe_experts", "must be >= 1"},
      {{{"model", "moe_expert_capacity_factor", "0"}},
       "model.moe_expert_capacity_factor",
       "must be a finite number > 0 (null = dropless), got 0"},
      {{{"model", "moe_expert_capacity_factor", ".inf"}},
       "model.moe_expert_capacity_factor",
       "expected a finite number > 0"},
      {{{"model", "moe_pad_expert_input_to_capacity", "true"}},
       "model.moe_pad_expert_input_to_capacity",
       "true needs model.moe_expert_capacity_factor"},
      {{{"model", "moe_aux_loss_coeff", "-1"}}, "model.moe_aux_loss_coeff", ">= 0"},
      {{{"model", "moe_token_dispatcher_type", "flex"}},
       "model.moe_token_dispatcher_type",
       "(allowed: alltoall, allgather)"},
      {{{"model", "moe_router_load_balancing_type", "sinkhorn"}},
       "model.moe_router_load_balancing_type",
       "(allowed: aux_loss, none)"},
      {{{"parallelism", "expert_model_parallel_size", "3"},
        {"parallelism", "rank_order", "tp-cp-ep-dp-pp"}},
       "parallelism.expert_model_parallel_size",
       "3 does not divide model.num_moe_experts = 8"},
      {{{"model", "moe_ffn_hidden_size", "100"}, {"parallelism", "expert_tensor_parallel_size", "8"}},
       "parallelism.expert_tensor_parallel_size",
       "expert_tensor_parallel_size = 8 does not divide the routed expert width "
       "model.moe_ffn_hidden_size = 100"},
      {{{"model", "moe_ffn_hidden_size", "101"}},
       "parallelism.tensor_model_parallel_size",
       "tensor_model_parallel_size = 2 (the expert TP size when expert_tensor_parallel_size is "
       "not given) does not divide the routed expert width model.moe_ffn_hidden_size = 101"},
      {{{"model", "moe_shared_expert_intermediate_size", "99"}},
       "parallelism.tensor_model_parallel_size",
       "2 does not divide model.moe_shared_expert_intermediate_size = 99"},
      {{{"parallelism", "expert_tensor_parallel_size", "1"},
        {"parallelism", "expert_model_parallel_size", "8"},
        {"parallelism", "rank_order", "tp-cp-ep-dp-pp"}},
       "parallelism.expert_model_parallel_size",
       "8 x expert_tensor_parallel_size = 1 = 8 does not divide tensor_model_parallel_size x "
       "context_parallel_size x data_parallel_size = 2 x 1 x 2 = 4"},
      {{{"parallelism", "sequence_parallel", "false"}},
       "parallelism.sequence_parallel",
       "must be true for an MoE model with tensor_model_parallel_size = 2 > 1"},
      {{{"parallelism", "expert_model_parallel_size", "2"},
        {"parallelism", "rank_order", "tp-cp-dp-pp"}},
       "parallelism.rank_order",
       "'tp-cp-dp-pp' has no ep while expert_model_parallel_size = 2 > 1"},
      {{{"model", "multi_latent_attention", "true"}},
       "model.multi_latent_attention",
       "true is not supported yet"},
      {{{"cluster", "what_if", "{moe_load_imbalance: 0.9}"}},
       "cluster.what_if.moe_load_imbalance",
       "must be a finite number >= 1"},
  };
  for (const Case& c : cases) {
    ScenarioText t = moe_text();
    for (const auto& [section, key, value] : c.keys) t.set(section, key, value);
    const std::string where = c.key.rfind("cluster.what_if", 0) == 0 ? "" : at(t, c.key);
    EXPECT_THAT(error_of(t), AllOf(HasSubstr(where + c.key + ": "), HasSubstr(c.problem)))
        << c.key << ": " << c.problem;
  }
  // multi_latent_attention is refused in a dense model too.
  ScenarioText mla;
  mla.set("model", "multi_latent_attention", "true");
  EXPECT_THAT(error_of(mla), HasSubstr("model.multi_latent_attention: true is not supported yet"));
}

TEST(ScenarioKvChannels, HeadDimensionApartFromHiddenOverHeads) {
  // Qwen3-30B-A3B: h 2048, 32 heads, 4 query groups, head dimension 128 (a d = 4096 != h).
  ScenarioText t;
  t.set("model", "architecture", "llama")
      .set("model", "hidden_size", "2048")
      .set("model", "num_attention_heads", "32")
      .set("model", "num_query_groups", "4")
      .set("model", "kv_channels", "128");
  const Scenario s = parse(t.text());
  EXPECT_EQ(s.model.head_dim(), 128);
  EXPECT_EQ(s.model.attention_width(), 4096);
  EXPECT_EQ(s.model.qkv_width(), (32 + 2 * 4) * 128);
  EXPECT_EQ(parse(ScenarioText().text()).model.head_dim(), 256 / 8);
  // With kv_channels h need not be a multiple of a; without it, it must.
  t.set("model", "hidden_size", "2050").set("model", "ffn_hidden_size", "4096");
  EXPECT_EQ(parse(t.text()).model.head_dim(), 128);
  t.erase("model", "kv_channels");
  EXPECT_THAT(error_of(t), HasSubstr("model.hidden_size: 2050 is not divisible by"));
  t.set("model", "hidden_size", "2048").set("model", "kv_channels", "0");
  EXPECT_THAT(error_of(t), HasSubstr(at(t, "model.kv_channels") + "model.kv_channels: must be >= 1"));
  // RoPE needs an even head dimension: kv_channels decides it.
  t.set("model", "kv_channels", "127");
  EXPECT_THAT(error_of(t), HasSubstr("rope needs an even head dimension"));
}

}  // namespace
}  // namespace traintwin
