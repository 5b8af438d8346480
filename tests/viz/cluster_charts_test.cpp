// The shared-cluster part of the report (viz/cluster_charts.hpp): each table and chart against a
// ClusterResult written by hand (two jobs, their iterations, one tier, one shared link over four
// bins), worked out below; and write_cluster_report's page.
#include "viz/cluster_charts.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "viz/report_page.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

/// Job "a" (16 GPUs on 2 nodes): alone 10 ms, together 10, 12.5, 11 ms from t = 0. Job "b"
/// (8 GPUs on 1 node, from 1 ms): alone 20 ms, together 25 and 24 ms. One shared leaf-spine
/// link over 4 bins of 5 ms: a 40/20/0/10 %, b 10/30/50/0 %.
ClusterResult two_jobs() {
  ClusterResult r;
  r.name = "two-jobs";
  r.topology = "dgx-h100-superpod";
  r.num_nodes = 3;
  r.gpus_per_node = 8;
  r.window_s = 0.050;
  const auto job = [](std::string name, int64_t gpus, std::vector<int64_t> nodes, double start_s,
                      double alone_s, std::vector<double> times_s) {
    ClusterJobResult j;
    j.name = std::move(name);
    j.num_gpus = gpus;
    j.nodes = std::move(nodes);
    j.iterations = static_cast<int64_t>(times_s.size());
    j.start_s = start_s;
    j.alone = {alone_s, alone_s, alone_s, alone_s};
    double t = start_s, sum = 0;
    for (double x : times_s) {
      JobIteration it;
      it.start_s = t;
      it.end_s = t + x;
      it.critical.exposed_dp_s = x - alone_s;  // the extra time shows as exposed DP
      j.together_iterations.push_back(it);
      t += x;
      sum += x;
    }
    j.together.mean_s = sum / static_cast<double>(times_s.size());
    std::sort(times_s.begin(), times_s.end());
    const size_t n = times_s.size();
    j.together.min_s = times_s.front();
    j.together.max_s = times_s.back();
    j.together.p50_s = n % 2 ? times_s[n / 2] : (times_s[n / 2 - 1] + times_s[n / 2]) / 2;
    j.slowdown = j.together.mean_s / alone_s;
    j.alone_breakdown.exposed_dp_s = 0.001;
    j.together_breakdown.exposed_dp_s = 0.002;
    return j;
  };
  r.jobs.push_back(job("a", 16, {0, 1}, 0.0, 0.010, {0.010, 0.0125, 0.011}));
  r.jobs.push_back(job("b", 8, {2}, 0.001, 0.020, {0.025, 0.024}));
  TierSharing t;
  t.tier = "leaf-spine";
  t.links = 64;
  t.links_per_job = {4, 2};
  t.links_shared = 1;
  t.shared_utilization_mean = {0.175, 0.225};
  t.shared_total_mean = 0.4;
  t.shared_total_max = 0.5;
  r.tiers.push_back(t);
  SharedLinkSeries s;
  s.name = "leaf0-spine3";
  s.tier = "leaf-spine";
  s.bin_s = 0.005;
  s.utilization = {{0.4, 0.2, 0.0, 0.1}, {0.1, 0.3, 0.5, 0.0}};
  r.shared_series.push_back(s);
  return r;
}

TEST(ClusterCharts, JobsTableHasEachJobsTimesAndSlowdown) {
  const std::string html = cluster_jobs_table_html(two_jobs());
  // a: mean (10 + 12.5 + 11) / 3 = 11.1667 ms, slowdown 1.1167x; b: 24.5 ms, 1.2250x.
  EXPECT_THAT(html, HasSubstr("<td>a</td><td>16</td><td>2</td><td>3</td><td>0.000</td>"
                              "<td>10.000</td><td>11.167</td>"));
  EXPECT_THAT(html, HasSubstr("<td>10.000 / 11.000 / 12.500</td><td>1.1167x</td>"));
  EXPECT_THAT(html, HasSubstr("<td>b</td><td>8</td><td>1</td><td>2</td><td>1.000</td>"
                              "<td>20.000</td><td>24.500</td>"));
  EXPECT_THAT(html, HasSubstr("<td>1.2250x</td><td>1.000 &rarr; 2.000</td>"));
}

TEST(ClusterCharts, TiersTableHasEveryJobsLinksAndTheSharedUtilisation) {
  const std::string html = cluster_tiers_table_html(two_jobs());
  EXPECT_THAT(html, HasSubstr("<th>used by a</th><th>used by b</th><th>shared</th>"));
  EXPECT_THAT(html, HasSubstr("<td>leaf-spine</td><td>64</td><td>4</td><td>2</td><td>1</td>"
                              "<td>17.5</td><td>22.5</td><td>40.0 / 50.0</td>"));
}

TEST(ClusterCharts, IterationBarsAreEveryIterationWithItsSlowdown) {
  const ClusterResult r = two_jobs();
  const json spec = cluster_iterations_spec(r);
  EXPECT_EQ(spec["name"], "job_iterations");
  const json& rows = spec["data"]["values"];
  ASSERT_EQ(rows.size(), 5u);  // 3 of a, 2 of b
  // a's second iteration: 10 to 22.5 ms, 12.5 / 10 = 1.25x, 2.5 ms more exposed DP.
  EXPECT_EQ(rows[1]["job"], "a");
  EXPECT_EQ(rows[1]["iteration"], 2);
  EXPECT_NEAR(rows[1]["start_ms"].get<double>(), 10.0, 1e-9);
  EXPECT_NEAR(rows[1]["end_ms"].get<double>(), 22.5, 1e-9);
  EXPECT_NEAR(rows[1]["slowdown"].get<double>(), 1.25, 1e-12);
  EXPECT_NEAR(rows[1]["exposed_comm_ms"].get<double>(), 2.5, 1e-9);
  // b's first: from its start at 1 ms to 26 ms, 25 / 20 = 1.25x; its second 1.2x.
  EXPECT_EQ(rows[3]["job"], "b");
  EXPECT_NEAR(rows[3]["start_ms"].get<double>(), 1.0, 1e-9);
  EXPECT_NEAR(rows[3]["end_ms"].get<double>(), 26.0, 1e-9);
  EXPECT_NEAR(rows[4]["slowdown"].get<double>(), 1.2, 1e-12);
  EXPECT_EQ(spec["encoding"]["y"]["sort"], json({"a", "b"}));
}

TEST(ClusterCharts, LinkRowsStackToTheLinksUtilisationInEachBin) {
  const json spec = cluster_links_spec(two_jobs());
  EXPECT_EQ(spec["name"], "link_utilization");
  const json& rows = spec["data"]["values"];
  ASSERT_EQ(rows.size(), 8u);  // 1 link x 2 jobs x 4 bins
  std::map<double, double> total;  // bin start (ms) -> stacked %
  for (const json& row : rows) {
    EXPECT_EQ(row["link"], "leaf0-spine3");
    total[row["time_ms"].get<double>()] += row["percent"].get<double>();
  }
  ASSERT_EQ(total.size(), 4u);
  const double expected[] = {50, 50, 50, 10};  // a + b per bin
  int b = 0;
  for (const auto& [t_ms, percent] : total) {
    EXPECT_NEAR(t_ms, 5.0 * b, 1e-9);
    EXPECT_NEAR(percent, expected[b], 1e-9) << "bin " << b;
    ++b;
  }
  EXPECT_EQ(spec["spec"]["encoding"]["y"]["stack"], "zero");
}

// The page: both tables, the timeline and, only with a shared link, the link chart; written
// atomically with the Vega builds inlined.
TEST(ClusterCharts, PageHasEverySectionAndLeavesOutTheLinkChartWithoutSharedLinks) {
  ClusterResult r = two_jobs();
  std::vector<ReportSection> sections = cluster_sections(r);
  ASSERT_EQ(sections.size(), 4u);
  EXPECT_EQ(sections[3].id, "cluster-links");
  r.shared_series.clear();
  sections = cluster_sections(r);
  ASSERT_EQ(sections.size(), 3u);
  EXPECT_EQ(sections[2].id, "cluster-iterations");

  r = two_jobs();
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("traintwin_cluster_page_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "vega");
  for (const char* f : kVegaFiles) std::ofstream(dir / "vega" / f) << "// stand-in " << f << "\n";
  const fs::path written = write_cluster_report(dir, dir / "vega", r);
  EXPECT_EQ(written, dir / "report.html");
  std::ifstream file(written);
  std::stringstream html;
  html << file.rdbuf();
  for (const char* id : {"cluster-jobs", "cluster-tiers", "chart-cluster-iterations",
                         "chart-cluster-links"}) {
    EXPECT_THAT(html.str(), HasSubstr(id));
  }
  EXPECT_THAT(html.str(), HasSubstr("traintwin cluster: two-jobs"));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);  // report.html, no temporary left behind
  EXPECT_THROW(write_cluster_report(dir, dir / "no-vega", r), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace traintwin
