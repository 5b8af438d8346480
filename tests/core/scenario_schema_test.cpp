// Tests of the scenario schema table (core/scenario_schema.hpp), the enums' name tables
// (core/scenario_enum_names.hpp) and the key reference generated from them
// (core/scenario_reference.hpp), including that scenarios/README.md holds the current reference.
#include "core/scenario_schema.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/scenario_enum_names.hpp"
#include "core/scenario_reference.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using scenario_schema::KeySpec;
using scenario_schema::ValueType;

const fs::path kSourceDir = TRAINTWIN_SOURCE_DIR;

/// The whole file (core/input_file.hpp's reader: a missing or oversized file throws).
std::string read_text(const fs::path& path) {
  return read_input_file(path, "test file", kMaxConfigFileBytes);
}

TEST(ScenarioSchema, ReadmeKeyReferenceIsCurrent) {
  const fs::path readme = kSourceDir / "scenarios" / "README.md";
  const std::string text = read_text(readme);
  ASSERT_FALSE(text.empty()) << readme;
  EXPECT_EQ(with_key_reference(text), text)
      << "scenarios/README.md's key reference is stale; regenerate it with "
         "build/traintwin keys --readme scenarios/README.md";
}

TEST(ScenarioSchema, WithKeyReferenceReplacesOnlyTheMarkedSection) {
  const std::string begin = std::string(kReferenceBegin) + "\n";
  const std::string end = std::string(kReferenceEnd) + "\n";
  const std::string stale = "# Title\n\n" + begin + "| old | table |\n" + end + "after\n";
  const std::string fresh = with_key_reference(stale);
  EXPECT_NE(fresh, stale);  // a stale section is detected
  EXPECT_EQ(fresh, "# Title\n\n" + begin + scenario_key_reference() + end + "after\n");
  EXPECT_EQ(with_key_reference(fresh), fresh);
  EXPECT_THROW(with_key_reference("# no markers\n"), InvalidArgument);
  EXPECT_THROW(with_key_reference(begin + "no end\n"), InvalidArgument);
}

TEST(ScenarioSchema, ReferenceHasOneRowPerKeyUnderItsSection) {
  const std::string ref = scenario_key_reference();
  size_t rows = 0;
  for (size_t at = ref.find("\n| `"); at != std::string::npos; at = ref.find("\n| `", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, scenario_schema::scenario_keys().size());
  // A row of each kind: required, a unit, a derived default, enum values, a flag.
  EXPECT_THAT(ref, HasSubstr("| `num_layers` | integer (layers) | **required** | >= 1 |  |"));
  EXPECT_THAT(ref, HasSubstr("| `tensor_model_parallel_size` | integer (GPUs) | 1 | >= 1 | "
                             "`--tensor-model-parallel-size` |"));
  EXPECT_THAT(ref, HasSubstr("| `ffn_hidden_size` | integer | 4 x hidden_size |"));
  EXPECT_THAT(ref, HasSubstr("| `recompute_granularity` | enum | none | `none`, `selective`, "
                             "`full` | `--recompute-granularity` |"));
  EXPECT_THAT(ref, HasSubstr("| `adam_eps` | number | 1e-08 | > 0 | `--adam-eps` |"));
  // Sections in the file's order, the nested mappings of what_if after cluster's keys.
  const size_t model = ref.find("### `model`");
  const size_t straggler = ref.find("### `cluster.what_if.straggler`");
  const size_t data = ref.find("### `data`");
  EXPECT_LT(ref.find("### Top level"), model);
  EXPECT_LT(model, ref.find("### `parallelism`"));
  EXPECT_LT(ref.find("### `cluster`"), straggler);
  EXPECT_LT(straggler, data);
  EXPECT_NE(data, std::string::npos);
}

TEST(ScenarioSchema, KeysOfEachMapping) {
  using scenario_schema::keys_of;
  EXPECT_THAT(keys_of(""),
              ElementsAre("name", "model", "parallelism", "training", "cluster", "data"));
  EXPECT_THAT(keys_of("cluster"), ElementsAre("topology", "num_gpus", "collective_algorithm",
                                              "what_if", "reliability"));
  EXPECT_THAT(
      keys_of("cluster.reliability.failure_rates"),
      ElementsAre("gpu", "hbm", "nic", "network", "cpu", "host", "software", "sdc", "other"));
  EXPECT_TRUE(scenario_schema::is_nested_mapping("cluster.reliability.weibull_shapes"));
  EXPECT_THAT(keys_of("cluster.what_if.straggler"), ElementsAre("rank", "compute_scale"));
  EXPECT_THAT(keys_of("data"), ElementsAre("data_path", "split", "vocab_file", "merge_file"));
  EXPECT_TRUE(keys_of("model.num_layers").empty());  // a value, not a mapping
  EXPECT_TRUE(keys_of("nonsense").empty());
  EXPECT_EQ(keys_of("model").size(), 28u);  // with moe_permute_fusion
  EXPECT_EQ(keys_of("parallelism").size(), 18u);  // with scatter_gather_tensors_in_pipeline
  EXPECT_EQ(keys_of("training").size(), 46u);  // with gradient_accumulation_fusion
  EXPECT_TRUE(scenario_schema::is_section("training"));
  EXPECT_FALSE(scenario_schema::is_section("name"));
  EXPECT_TRUE(scenario_schema::is_nested_mapping("cluster.what_if.degraded_link"));
  EXPECT_FALSE(scenario_schema::is_nested_mapping("cluster"));
  EXPECT_THROW(scenario_schema::key("model.nonsense"), InvalidArgument);
}

TEST(ScenarioSchema, PathsAndFlagsAreUnique) {
  std::set<std::string> paths;
  std::set<std::string_view> flags;
  for (const KeySpec& k : scenario_schema::scenario_keys()) {
    EXPECT_TRUE(paths.insert(k.path()).second) << k.path();
    EXPECT_FALSE(k.doc.empty()) << k.path();
    if (k.type == ValueType::kEnum) {
      EXPECT_FALSE(k.values.empty()) << k.path();
    }
    if (k.flag.empty()) continue;
    EXPECT_TRUE(flags.insert(k.flag).second) << k.flag;
    EXPECT_EQ(k.flag.substr(0, 2), "--") << k.path();
    EXPECT_NE(k.type, ValueType::kMapping) << k.path();
  }
  // The 57 flags the command line had before the table, --pipeline-schedule, Megatron-FSDP's 2,
  // --num-distributed-optimizer-instances (HSDP), --pipeline-model-parallel-layout and CPU
  // offload's 4 (--optimizer-cpu-offload, --optimizer-offload-fraction, --cpu-offloading,
  // --cpu-offloading-num-layers), --cross-entropy-loss-fusion and --moe-permute-fusion.
  EXPECT_EQ(flags.size(), 68u);
}

TEST(ScenarioSchema, DefaultsComeFromTheMembersOrTheirWords) {
  using scenario_schema::default_of;
  using scenario_schema::key;
  EXPECT_EQ(default_of(key("parallelism.tensor_model_parallel_size")), "1");
  EXPECT_EQ(default_of(key("parallelism.rank_order")), "tp-cp-ep-dp-pp");
  EXPECT_EQ(default_of(key("parallelism.sequence_parallel")), "false");
  EXPECT_EQ(default_of(key("parallelism.pipeline_schedule")), "1f1b");
  EXPECT_EQ(default_of(key("training.fp8_format")), "none");
  EXPECT_EQ(default_of(key("training.fp8_recipe")), "delayed");
  EXPECT_EQ(default_of(key("training.weight_decay")), "0.01");
  EXPECT_EQ(default_of(key("training.train_iters")), "none");
  EXPECT_EQ(default_of(key("training.micro_batch_size")), "");  // required
  EXPECT_EQ(default_of(key("model.rotary_base")), "10000");
  EXPECT_EQ(default_of(key("model.moe_router_topk")), "2");
  EXPECT_EQ(default_of(key("data.split")), "969,30,1");
  EXPECT_EQ(default_of(key("model.num_query_groups")), "num_attention_heads");
}

TEST(ScenarioSchema, EnumFieldsReadAndWriteByName) {
  const scenario_schema::EnumField& f =
      std::get<scenario_schema::EnumField>(scenario_schema::key("training.fp8_format").bind);
  Scenario s;
  EXPECT_EQ(f.get(s), "");  // optional, none
  EXPECT_TRUE(f.set(s, "e4m3"));
  EXPECT_EQ(s.training.fp8_format, Fp8Format::kE4m3);
  EXPECT_EQ(f.get(s), "e4m3");
  EXPECT_FALSE(f.set(s, "e5m2"));
  EXPECT_EQ(s.training.fp8_format, Fp8Format::kE4m3);  // untouched
}

template <typename E>
void expect_round_trip() {
  for (const auto& [value, name] : EnumNames<E>::table.entries) {
    EXPECT_EQ(to_string(value), name);
    EXPECT_EQ(EnumNames<E>::table.parse(name), value) << name;
  }
  EXPECT_EQ(EnumNames<E>::table.parse("nonsense"), std::nullopt);
}

TEST(ScenarioEnumNames, EveryNameRoundTripsThroughToString) {
  expect_round_trip<Precision>();
  expect_round_trip<Float32MatmulPrecision>();
  expect_round_trip<RecomputeGranularity>();
  expect_round_trip<AttentionBackend>();
  expect_round_trip<PipelineScheduleKind>();
  expect_round_trip<LrDecayStyle>();
  expect_round_trip<Normalization>();
  expect_round_trip<Activation>();
  expect_round_trip<PositionEmbedding>();
  expect_round_trip<Fp8Format>();
  expect_round_trip<Fp8Recipe>();
  expect_round_trip<CpCommType>();
  expect_round_trip<MoeTokenDispatcher>();
  expect_round_trip<MoeLoadBalancing>();
  EXPECT_EQ(std::string(to_string(static_cast<Activation>(7))), "?");
  EXPECT_THAT(kEnumNames<Fp8Recipe>, ElementsAre("delayed", "tensorwise", "blockwise", "mxfp8"));
}

}  // namespace
}  // namespace traintwin
