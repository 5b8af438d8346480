// `traintwin export --format chakra` at the command line: one ET file per rank and the comm
// groups, only the ranks asked for with --ranks, and refusals naming the flag or the rank; and
// `simulate --trace chakra` of such an export with --cost-model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>

#include "tests/cli/run_cli.hpp"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using traintwin::testing::CliResult;
using traintwin::testing::run_cli;

const std::string kScenario = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-tiny-brown.yaml";

TEST(ExportCli, WritesOneChakraFilePerRank) {
  const fs::path dir = fs::temp_directory_path() / ("export_cli_" + std::to_string(::getpid()));
  CliResult r = run_cli("export --format chakra " + kScenario + " --out " + dir.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("wrote 8 Chakra ET files"));
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_TRUE(fs::is_regular_file(dir / ("gpt-tiny-brown." + std::to_string(rank) + ".et")));
  }
  EXPECT_TRUE(fs::is_regular_file(dir / "gpt-tiny-brown.comm_groups.json"));
  fs::remove_all(dir);

  r = run_cli("export " + kScenario + " --ranks 0,7 --out " + dir.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("wrote 2 Chakra ET files"));
  EXPECT_FALSE(fs::exists(dir / "gpt-tiny-brown.3.et"));
  fs::remove_all(dir);
}

TEST(ExportCli, RefusesUnknownFormatsAndRanks) {
  const fs::path dir = fs::temp_directory_path() / ("export_cli_bad_" + std::to_string(::getpid()));
  CliResult r = run_cli("export --format et " + kScenario + " --out " + dir.string());
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("--format"));
  r = run_cli("export " + kScenario + " --ranks 0,99 --out " + dir.string());
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("99"));
  fs::remove_all(dir);
}

// `simulate --trace chakra DIR --topology FILE --cost-model`: our export names every compute
// node's kernels, so the cost model prices all of them and says so; without the flag every node
// keeps its duration. --cost-model without --trace is refused.
TEST(ExportCli, SimulateTraceWithCostModelPricesEveryExportedComputeNode) {
  const fs::path dir = fs::temp_directory_path() / ("export_cli_cm_" + std::to_string(::getpid()));
  CliResult r = run_cli("export --format chakra " + kScenario + " --out " + dir.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string topo = std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/dgx-h100-superpod.yaml";
  r = run_cli("simulate --quiet --trace chakra " + dir.string() + " --topology " + topo +
              " --cost-model");
  ASSERT_EQ(r.status, 0) << r.output;
  std::smatch m;
  const std::regex priced(R"((\d+) of (\d+) compute nodes priced by the cost model)");
  ASSERT_TRUE(std::regex_search(r.output, m, priced)) << r.output;
  EXPECT_EQ(m[1].str(), m[2].str());
  EXPECT_NE(m[1].str(), "0");
  r = run_cli("simulate --quiet --trace chakra " + dir.string() + " --topology " + topo);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("compute nodes at their trace durations"));
  r = run_cli("simulate " + kScenario + " --cost-model");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("--cost-model is for --trace"));
  fs::remove_all(dir);
}

}  // namespace
