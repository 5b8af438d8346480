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

// --all-gather-comm-size: an export written with the gathered output says so in its metadata, and
// the replay of it reads it so (the same iteration time as the default export's), without the
// flag; the flag contradicting the trace is refused, and so is the flag without --trace.
TEST(ExportCli, AllGatherCommSizeTravelsWithTheTrace) {
  const fs::path in = fs::temp_directory_path() / ("export_cli_in_" + std::to_string(::getpid()));
  const fs::path out = fs::temp_directory_path() / ("export_cli_out_" + std::to_string(::getpid()));
  CliResult r = run_cli("export " + kScenario + " --out " + in.string());
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_cli("export " + kScenario + " --all-gather-comm-size output --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string topo = std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/dgx-h100-superpod.yaml";
  const auto iteration = [](const std::string& text) {
    std::smatch m;
    const std::regex it(R"(iteration time\s+([0-9.]+ \w+))");
    return std::regex_search(text, m, it) ? m[1].str() : std::string("none");
  };
  const CliResult a = run_cli("simulate --quiet --trace chakra " + in.string() + " --topology " + topo);
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_THAT(a.output, HasSubstr("comm_size read as each rank's input (traintwin metadata)"));
  const CliResult b = run_cli("simulate --quiet --trace chakra " + out.string() + " --topology " + topo);
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_THAT(b.output, HasSubstr("comm_size read as each rank's gathered output (traintwin metadata)"));
  EXPECT_NE(iteration(a.output), "none") << a.output;
  EXPECT_EQ(iteration(a.output), iteration(b.output));
  r = run_cli("simulate --quiet --trace chakra " + out.string() + " --topology " + topo +
              " --all-gather-comm-size input");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("not the input that --all-gather-comm-size asks for"));
  r = run_cli("simulate " + kScenario + " --all-gather-comm-size input");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("--all-gather-comm-size is for --trace"));
  r = run_cli("export " + kScenario + " --all-gather-comm-size whole --out " + out.string());
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("--all-gather-comm-size"));
  fs::remove_all(in);
  fs::remove_all(out);
}

}  // namespace
