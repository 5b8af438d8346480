// `traintwin goodput` at the command line: the JSON report's figures hold together (ETTR in
// (0, 1), Daly's interval from its own costs, the sweep around it), the scenario's
// cluster.reliability reaches it, and bad flags end as errors naming the flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/goodput.hpp"
#include "tests/cli/run_cli.hpp"

namespace {

using ::testing::HasSubstr;
using traintwin::testing::CliResult;
using traintwin::testing::run_cli;

const std::string kScenario =
    std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt3-175b-h100-1024.yaml";

/// `traintwin <args>` with stand-in Vega builds (TRAINTWIN_VEGA_DIR), so that `goodput --out`
/// writes report.html instead of warning on stderr (which run_cli mixes into the output).
CliResult run_cli_with_vega(const std::string& args) {
  const std::string vega = ::testing::TempDir() + "goodput_vega";
  std::filesystem::create_directories(vega);
  for (const char* f : {"vega.min.js", "vega-lite.min.js", "vega-embed.min.js"}) {
    std::ofstream(vega + "/" + f) << "// stand-in\n";
  }
  return traintwin::testing::run_cli_command("TRAINTWIN_VEGA_DIR=" + vega + " " + TRAINTWIN_BINARY +
                                             " " + args);
}

TEST(GoodputCli, JsonReportHoldsTogether) {
  const CliResult r =
      run_cli("goodput " + kScenario + " --iteration-time 8 --runs 5 --days 10 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["gpus"], 1024);
  EXPECT_EQ(j["nodes"], 128);  // 8 GPUs per node
  EXPECT_EQ(j["iteration_source"], "given");
  const double mtbf = j["costs"]["mtbf_s"], stall = j["costs"]["save_stall_s"];
  EXPECT_NEAR(j["daly_interval_s"].get<double>(), traintwin::daly_interval_s(stall, mtbf), 1e-6);
  EXPECT_NEAR(j["chosen"]["interval_s"].get<double>(),
              std::max(1.0, std::round(j["daly_interval_s"].get<double>() / 8)) * 8, 1e-9);
  EXPECT_EQ(j["sweep"].size(), 9u);
  const double ettr = j["chosen"]["mean_ettr"];
  EXPECT_GT(ettr, 0.5);
  EXPECT_LT(ettr, 1.0);
  EXPECT_GE(j["best_mean_ettr"].get<double>(), ettr - 1e-12);  // Daly's is one of the sweep's
  // Kokolis et al.'s closed form at the chosen interval, from the report's own costs.
  const auto& c = j["costs"];
  const double nodes = 128;
  EXPECT_NEAR(j["kokolis_ettr"].get<double>(),
              traintwin::kokolis_expected_ettr(
                  128, 86400.0 / (mtbf * nodes), j["chosen"]["interval_s"].get<double>(),
                  c["detection_s"].get<double>() + c["restart_s"].get<double>() +
                      c["restore_s"].get<double>(),
                  stall),
              1e-12);
  EXPECT_NEAR(j["kokolis_ettr"].get<double>(), ettr, 0.05);
}

// --out writes goodput.json: the report and every run of the chosen interval, each run's wall
// time the sum of its useful time and badput, and report.html with the goodput charts (here with
// stand-in Vega builds); an output path under a file fails before any work. The text report
// prints Kokolis et al.'s ETTR beside the Monte Carlo's.
TEST(GoodputCli, OutWritesEveryRunAndTheReport) {
  const std::string dir = ::testing::TempDir() + "goodput_out";
  const CliResult r = run_cli_with_vega("goodput " + kScenario +
                                        " --iteration-time 8 --runs 4 --days 3 --out " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("wrote " + dir + "/goodput.json"));
  EXPECT_THAT(r.output, HasSubstr("wrote " + dir + "/report.html"));
  EXPECT_THAT(r.output, HasSubstr("; Kokolis et al. closed form "));
  std::ifstream page(dir + "/report.html");
  const std::string html((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  EXPECT_THAT(html, HasSubstr("chart-goodput-timeline"));
  EXPECT_THAT(html, HasSubstr("chart-goodput-badput"));
  std::ifstream in(dir + "/goodput.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["chosen_runs"].size(), 4u);
  for (const auto& run : j["chosen_runs"]) {
    double badput = 0;
    for (const auto& [cause, seconds] : run["badput_s"].items()) badput += seconds.get<double>();
    EXPECT_NEAR(run["useful_s"].get<double>() + badput, run["wall_s"].get<double>(),
                1e-6 * 3 * 86400);
  }
  const CliResult bad =
      run_cli("goodput " + kScenario + " --iteration-time 8 --out " + kScenario + "/x");
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.output, HasSubstr("--out"));
}

TEST(GoodputCli, ScenarioReliabilityAndBadFlags) {
  const CliResult fewer = run_cli("goodput " + kScenario +
                                  " --iteration-time 8 --runs 3 --days 5 --json"
                                  " --set cluster.reliability.failure_rates.gpu=100");
  ASSERT_EQ(fewer.status, 0) << fewer.output;
  const CliResult base =
      run_cli("goodput " + kScenario + " --iteration-time 8 --runs 3 --days 5 --json");
  ASSERT_EQ(base.status, 0) << base.output;
  EXPECT_LT(nlohmann::json::parse(fewer.output)["costs"]["mtbf_s"].get<double>(),
            nlohmann::json::parse(base.output)["costs"]["mtbf_s"].get<double>() / 10);

  const CliResult interval =
      run_cli("goodput " + kScenario + " --iteration-time 8 --days 1 --checkpoint-interval 2000");
  EXPECT_NE(interval.status, 0);
  EXPECT_THAT(interval.output,
              HasSubstr("--checkpoint-interval: 2000 min is longer than the run (1 days)"));
  const CliResult word =
      run_cli("goodput " + kScenario + " --iteration-time 8 --checkpoint-interval often");
  EXPECT_NE(word.status, 0);
  EXPECT_THAT(word.output, HasSubstr("expected auto or a number of minutes > 0, got 'often'"));
  const CliResult spares = run_cli("goodput " + kScenario +
                                   " --iteration-time 8 --set cluster.reliability.spare_nodes=500");
  EXPECT_NE(spares.status, 0);
  EXPECT_THAT(spares.output, HasSubstr("cluster.reliability.spare_nodes: must be in [0, 128]"));
}

// Degraded, not down: with stragglers and flapping links on, the tiny scenario's states are each
// replayed once (the healthy iteration is the command's own replay), the straggler state is
// slower, and the report and goodput.json carry the two new badput causes with percentiles.
TEST(GoodputCli, DegradedStatesAreReplayedAndCharged) {
  const std::string tiny = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-tiny-brown.yaml";
  const std::string dir = ::testing::TempDir() + "goodput_degraded";
  const CliResult r =
      run_cli_with_vega("goodput " + tiny + " --runs 5 --days 5 --json --out " + dir +
                        " --set cluster.reliability.spare_nodes=1"
                        " --set cluster.reliability.straggler_rate_per_1000_node_days=20000"
                        " --set cluster.reliability.link_flap_rate_per_1000_node_days=20000");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["iteration_source"], "replay");
  EXPECT_EQ(j["degraded"]["replays"], 2);  // straggler, link_flap; the healthy one in process
  ASSERT_EQ(j["degraded"]["kinds"].size(), 2u);
  const auto& straggler = j["degraded"]["kinds"][0];
  EXPECT_EQ(straggler["kind"], "straggler");
  EXPECT_GT(straggler["iteration_s"].get<double>(), 1.05 * j["iteration_s"].get<double>());
  const auto& share = j["chosen"]["badput_share"];
  EXPECT_GT(share["straggler_slowdown"].get<double>(), 0.05);
  EXPECT_TRUE(share.contains("degraded_links"));
  const auto& p = j["chosen"]["badput_share_percentiles"]["straggler_slowdown"];
  EXPECT_LE(p["p10"].get<double>(), p["p90"].get<double>());
  std::ifstream in(dir + "/goodput.json");
  const nlohmann::json file = nlohmann::json::parse(in);
  EXPECT_TRUE(file["chosen_runs"][0]["badput_s"].contains("straggler_slowdown"));

  const CliResult text =
      run_cli("goodput " + tiny + " --runs 2 --days 1 --iteration-time 2" +
              " --set cluster.reliability.spare_nodes=1"
              " --set cluster.reliability.straggler_rate_per_1000_node_days=100");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("degraded   straggler: 100 per 1000 node-days"));
  EXPECT_THAT(text.output, HasSubstr("straggler slowdown"));
  EXPECT_THAT(text.output, HasSubstr("degraded links"));
}

}  // namespace
