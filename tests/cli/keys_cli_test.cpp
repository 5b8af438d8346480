// Tests of `traintwin keys` (the generated scenario key reference) and of the Megatron-LM flags
// that the scenario-reading subcommands take from the schema (core/scenario_schema.hpp).
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "core/input_file.hpp"
#include "core/scenario_reference.hpp"
#include "core/scenario_schema.hpp"
#include "run_cli.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_cli;

/// The whole file (core/input_file.hpp's reader: a missing or oversized file throws).
std::string read_text(const fs::path& path) {
  return read_input_file(path, "test file", kMaxConfigFileBytes);
}

TEST(KeysCli, PrintsTheReference) {
  const auto r = run_cli("keys");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, scenario_key_reference());
}

TEST(KeysCli, ReadmeIsRewrittenBetweenItsMarkers) {
  const fs::path dir =
      fs::temp_directory_path() / ("traintwin_keys_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path readme = dir / "README.md";
  const std::string stale = "intro\n" + std::string(kReferenceBegin) + "\nold\n" +
                            std::string(kReferenceEnd) + "\noutro\n";
  std::ofstream(readme) << stale;
  const auto first = run_cli("keys --readme " + readme.string());
  EXPECT_EQ(first.status, 0) << first.output;
  EXPECT_THAT(first.output, HasSubstr("key reference updated"));
  EXPECT_EQ(read_text(readme), with_key_reference(stale));
  const auto second = run_cli("keys --readme " + readme.string());
  EXPECT_THAT(second.output, HasSubstr("up to date"));

  std::ofstream(readme) << "no markers\n";
  const auto bad = run_cli("keys --readme " + readme.string());
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.output, HasSubstr("BEGIN key reference"));
  EXPECT_EQ(read_text(readme), "no markers\n");  // untouched
  fs::remove_all(dir);
}

TEST(KeysCli, EverySchemaFlagIsAScenarioFlag) {
  const auto help = run_cli("summary --help");
  ASSERT_EQ(help.status, 0) << help.output;
  for (const auto& k : scenario_schema::scenario_keys()) {
    if (k.flag.empty()) continue;
    // The flag as a whole word: "--lr" is not found inside "--lr-decay-style".
    const std::regex word("\\s" + std::string(k.flag) + "(\\s|$)");
    EXPECT_TRUE(std::regex_search(help.output, word)) << k.flag << " for " << k.path();
  }
}

TEST(KeysCli, SchemaFlagsReachTheirKeys) {
  const std::string tiny = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/moe-tiny-brown.yaml";
  // A number (shortest round trip), an enum, an integer list and a switch, each as its key.
  const auto ok = run_cli("summary " + tiny +
                          " --adam-eps 1e-8 --lr-decay-style cosine --moe-grouped-gemm "
                          "--split 90,10");
  EXPECT_EQ(ok.status, 0) << ok.output;
  const auto bad_enum = run_cli("summary " + tiny + " --lr-decay-style exponential");
  EXPECT_NE(bad_enum.status, 0);
  EXPECT_THAT(bad_enum.output, AllOf(HasSubstr("--lr-decay-style"), HasSubstr("cosine")));
  const auto range = run_cli("summary " + tiny + " --adam-beta1 1");
  EXPECT_EQ(range.status, 2);
  EXPECT_THAT(range.output, AllOf(HasSubstr("--set: training.adam_beta1"),
                                  HasSubstr("in [0, 1) (Adam's first-moment decay)")));
  const auto twice = run_cli("summary " + tiny + " --seed 3 --set training.seed=4");
  EXPECT_EQ(twice.status, 2);
  EXPECT_THAT(twice.output, AllOf(HasSubstr("training.seed"), HasSubstr("given twice")));
}

// The Megatron-FSDP keys show in `summary`'s training line with the ZeRO stage they give.
TEST(KeysCli, SummaryNamesTheFsdpShardingStrategy) {
  const std::string llama =
      std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/llama3.1-70b-h100-64.yaml";
  const auto plain = run_cli("summary " + llama);
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_THAT(plain.output, Not(HasSubstr("Megatron-FSDP")));
  const auto fsdp = run_cli("summary " + llama +
                            " --set training.use_distributed_optimizer=true"
                            " --set training.use_megatron_fsdp=true"
                            " --set training.data_parallel_sharding_strategy=optim_grads_params");
  ASSERT_EQ(fsdp.status, 0) << fsdp.output;
  EXPECT_THAT(fsdp.output, HasSubstr("distributed optimizer on, Megatron-FSDP optim_grads_params "
                                     "(ZeRO-3), overlap grad reduce"));
  const auto kept = run_cli("summary " + llama +
                            " --set training.use_distributed_optimizer=true"
                            " --set training.use_megatron_fsdp=true"
                            " --set training.data_parallel_sharding_strategy=optim_grads_params"
                            " --set training.reshard_after_forward=false"
                            " --set training.fsdp_prefetch_depth=2");
  ASSERT_EQ(kept.status, 0) << kept.output;
  EXPECT_THAT(kept.output, HasSubstr("Megatron-FSDP optim_grads_params (ZeRO-3) reshard after "
                                     "forward off, prefetch depth 2, overlap grad reduce"));
}

}  // namespace
}  // namespace traintwin
