// Tests of the scenario reader: shipped files, defaults, derived values, every validation rule,
// unknown keys, type errors, overrides and parse_override().
#include "core/scenario.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

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
  EXPECT_EQ(s.layers_per_model_chunk(), 6);
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
  EXPECT_EQ(s.layers_per_model_chunk(), 1);
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
  EXPECT_EQ(s.layers_per_model_chunk(), 5);
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
  EXPECT_EQ(s.parallel.rank_order, "tp-cp-dp-pp");
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
  EXPECT_EQ(s.layers_per_model_chunk(), 2);
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
      {"", "nmae"},       {"model", "hiden_size"}, {"parallelism", "expert_model_parallel_size"},
      {"training", "lr"}, {"cluster", "nodes"},
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
                                           "num_attention_heads, ffn_hidden_size, seq_length, "
                                           "vocab_size")));
}

TEST(ScenarioUnknownKeys, UnknownSection) {
  ScenarioText t;
  t.set("optimizer", "lr", "1");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr(at(t, "optimizer") + "optimizer: unknown key"),
                                 HasSubstr("allowed: name, model, parallelism, training, "
                                           "cluster")));
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
                                "overlap_param_gather", "tp_comm_overlap"}) {
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
      {"model", "architecture", "llama", "(allowed: gpt)"},
      {"training", "precision", "fp8", "(allowed: fp32, fp16, bf16)"},
      {"training", "precision", "BF16", "(allowed: fp32, fp16, bf16)"},
      {"training", "recompute_granularity", "partial", "(allowed: none, selective, full)"},
      {"training", "attention_backend", "fused", "(allowed: unfused, flash)"},
      {"cluster", "collective_algorithm", "collnet", "(allowed: auto, ring, tree, nvls)"},
      {"parallelism", "pipeline_schedule", "interleaved", "(allowed: gpipe, 1f1b)"},
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
                                 HasSubstr("pipeline_schedule: 1f1b, got gpipe")));
}

TEST(ScenarioRules, InterleavingNeedsAPipeline) {
  ScenarioText t;
  t.set("parallelism", "pipeline_model_parallel_size", "1")
      .set("parallelism", "virtual_pipeline_model_parallel_size", "2")
      .set("cluster", "num_gpus", "4");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("parallelism.virtual_pipeline_model_parallel_size"),
                                 HasSubstr("pipeline_model_parallel_size > 1, got 1")));
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
                                 HasSubstr("3 does not divide model.seq_length = 128")));
}

TEST(ScenarioRules, RankOrderIsAPermutation) {
  for (const std::string bad :
       {"tp-cp-dp", "tp-tp-dp-pp", "tp-cp-dp-pp-tp", "tp,cp,dp,pp", "TP-CP-DP-PP", "tp-cp-xx-pp"}) {
    ScenarioText t;
    t.set("parallelism", "rank_order", bad);
    SCOPED_TRACE(bad);
    EXPECT_THAT(error_of(t),
                AllOf(HasSubstr(at(t, "parallelism.rank_order") + "parallelism.rank_order"),
                      HasSubstr("not a permutation of tp, cp, dp, pp")));
  }
  for (const std::string good : {"tp-cp-dp-pp", "pp-dp-cp-tp", "tp-pp-dp-cp"}) {
    ScenarioText t;
    t.set("parallelism", "rank_order", good);
    EXPECT_EQ(parse(t.text()).parallel.rank_order, good);
  }
}

TEST(ScenarioRules, RankOrderRejectsExpertParallelism) {
  ScenarioText t;
  t.set("parallelism", "rank_order", "tp-cp-ep-dp-pp");
  EXPECT_THAT(error_of(t), AllOf(HasSubstr("parallelism.rank_order"),
                                 HasSubstr("expert parallelism (ep) is not supported")));
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
  arch.model.architecture = "llama";
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
              HasSubstr("--set: parallelism.context_parallel_size: 3 does not divide"));
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
  EXPECT_EQ(s.layers_per_model_chunk(), 2);
  try {
    load_scenario(kSourceDir / "scenarios" / "gpt3-175b-h100-1024.yaml",
                  {{"parallelism.tensor_model_parallel_size", "4"}});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("gpt3-175b-h100-1024.yaml:"),
                      HasSubstr("parallelism.data_parallel_size: 8 disagrees"), HasSubstr("= 16")));
  }
}

}  // namespace
}  // namespace traintwin
