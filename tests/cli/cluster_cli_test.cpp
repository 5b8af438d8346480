// `traintwin cluster PLACEMENT`: the shipped example placement (two small jobs sharing the
// leaf-spine cables of a 4-node lab fabric) as text and JSON, and a bad placement's message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/cli/run_cli.hpp"

namespace traintwin {
namespace {

using testing::run_cli;

const std::string kExample = std::string(TRAINTWIN_SOURCE_DIR) + "/placements/two-small-jobs.yaml";

TEST(ClusterCli, ExamplePlacementSlowsBothJobsOnTheirSharedCables) {
  const auto r = run_cli("cluster " + kExample + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j.at("jobs").size(), 2u);
  for (const auto& job : j.at("jobs")) {
    EXPECT_TRUE(job.at("replayed_together").get<bool>());
    EXPECT_EQ(job.at("together_iterations").size(), 10u);
    const auto& alone = job.at("iteration_time_alone");
    const auto& together = job.at("iteration_time_together");
    EXPECT_GT(alone.at("mean_s").get<double>(), 0);
    // Sharing links never speeds a job up; the max is the slowest of its iterations.
    EXPECT_GE(together.at("min_s").get<double>(), alone.at("mean_s").get<double>() * (1 - 1e-12));
    EXPECT_GE(together.at("max_s").get<double>(), together.at("p50_s").get<double>());
    EXPECT_GE(job.at("slowdown").get<double>(), 1.0 - 1e-12);
  }
  // The jobs meet on the leaf-spine cables (and nowhere else: different nodes, NICs, NVLinks).
  bool leaf_spine_shared = false;
  for (const auto& t : j.at("tiers")) {
    if (t.at("tier") == "leaf-spine") leaf_spine_shared = t.at("links_shared").get<int>() > 0;
    if (t.at("tier") == "nic" || t.at("tier") == "nvlink") EXPECT_EQ(t.at("links_shared"), 0);
  }
  EXPECT_TRUE(leaf_spine_shared) << r.output;
  ASSERT_FALSE(j.at("shared_links").empty());
  EXPECT_EQ(j.at("shared_links")[0].at("utilization_per_job").size(), 2u);
  // At least one job is slower for it (b starts 1 ms later and overlaps a's traffic).
  EXPECT_GT(std::max(j["jobs"][0]["slowdown"].get<double>(), j["jobs"][1]["slowdown"].get<double>()),
            1.0 + 1e-6);

  // The busiest shared links over time, per job: both jobs put bytes on them.
  ASSERT_FALSE(j.at("shared_link_series").empty());
  for (const auto& series : j.at("shared_link_series")) {
    ASSERT_EQ(series.at("utilization_per_job").size(), 2u);
    for (const auto& per_job : series.at("utilization_per_job")) {
      double most = 0;
      for (const auto& u : per_job) most = std::max(most, u.get<double>());
      EXPECT_GT(most, 0.1) << series.at("name");
    }
  }

  // --out with stand-in Vega builds (TRAINTWIN_VEGA_DIR), so report.html is written too.
  const std::string out = ::testing::TempDir() + "tt-cluster-out-" + std::to_string(::getpid());
  const std::string vega = out + "-vega";
  std::filesystem::create_directories(vega);
  for (const char* f : {"vega.min.js", "vega-lite.min.js", "vega-embed.min.js"}) {
    std::ofstream(vega + "/" + f) << "// stand-in\n";
  }
  const auto text = traintwin::testing::run_cli_command("TRAINTWIN_VEGA_DIR=" + vega + " " +
                                                        TRAINTWIN_BINARY + " cluster " + kExample +
                                                        " --out " + out);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("wrote " + out + "/report.html"), std::string::npos) << text.output;
  std::ifstream page_file(out + "/report.html");
  const std::string page((std::istreambuf_iterator<char>(page_file)),
                         std::istreambuf_iterator<char>());
  for (const char* id : {"cluster-jobs", "cluster-tiers", "chart-cluster-iterations",
                         "chart-cluster-links"}) {
    EXPECT_NE(page.find(id), std::string::npos) << id;
  }
  std::filesystem::remove_all(vega);
  std::ifstream trace_file(out + "/timeline.json");
  const auto trace = nlohmann::json::parse(trace_file);
  int slices = 0, counters = 0;
  for (const auto& e : trace.at("traceEvents")) {
    slices += e.at("ph") == "X" ? 1 : 0;
    counters += e.at("ph") == "C" ? 1 : 0;
  }
  EXPECT_EQ(slices, 20);  // 2 jobs x 10 iterations
  EXPECT_GT(counters, 0);
  std::ifstream summary_file(out + "/cluster.json");
  EXPECT_EQ(nlohmann::json::parse(summary_file).at("jobs").size(), 2u);
  std::filesystem::remove_all(out);
  EXPECT_NE(text.output.find("iteration time (ms)"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("busiest shared links"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("tiny-b"), std::string::npos);
}

// TP aggregation stays exact when jobs share links: both jobs aggregated (TP 2, one rail per GPU)
// give every rank's replay's iteration times and shared-link loads.
TEST(ClusterCli, TpAggregationAcrossJobsIsExact) {
  const auto agg = run_cli("cluster " + kExample + " --json");
  const auto full = run_cli("cluster " + kExample + " --json --full-replay");
  ASSERT_EQ(agg.status, 0) << agg.output;
  ASSERT_EQ(full.status, 0) << full.output;
  const auto a = nlohmann::json::parse(agg.output), f = nlohmann::json::parse(full.output);
  EXPECT_NE(a.at("reductions").dump().find("TP aggregation"), std::string::npos);
  EXPECT_EQ(f.at("reductions").dump().find("TP aggregation"), std::string::npos);
  for (size_t j = 0; j < 2; ++j) {
    const auto& ia = a["jobs"][j].at("together_iterations");
    const auto& ifull = f["jobs"][j].at("together_iterations");
    ASSERT_EQ(ia.size(), ifull.size());
    for (size_t k = 0; k < ia.size(); ++k) {
      EXPECT_NEAR(ia[k].at("end_s").get<double>(), ifull[k].at("end_s").get<double>(), 1e-12);
    }
  }
  for (size_t t = 0; t < a.at("tiers").size(); ++t) {
    EXPECT_NEAR(a["tiers"][t].at("shared_utilization_total_mean").get<double>(),
                f["tiers"][t].at("shared_utilization_total_mean").get<double>(), 1e-12);
  }
}

TEST(ClusterCli, BadPlacementIsAnErrorNamingTheJobAndKey) {
  const auto r = run_cli("cluster " + std::string(TRAINTWIN_SOURCE_DIR) +
                         "/scenarios/gpt-tiny-brown.yaml");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("gpt-tiny-brown.yaml:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unknown key"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace traintwin
