// The goodput part of the report (viz/goodput_charts.hpp): each chart's data against the
// numbers of the report it draws (a real Monte Carlo of a small job): the interval sweep, the
// badput bars summing to the badput total, the sampled run's timeline being its recorded events,
// and write_goodput_report's page.
#include "viz/goodput_charts.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "viz/report_page.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr double kHour = 3600.0;
constexpr double kDay = 86400.0;

/// A 64-node job with the default (Llama 3) failure rates raised 20-fold, so that 5 days hold
/// about 24 failures, a 78 s synchronous save, planned interruptions and few spares: its report
/// over 5 days (8 runs, seed 3) and the sampled run of seed 3.
const GoodputPageInput& page() {
  static const GoodputPageInput in = [] {
    GoodputPageInput p;
    p.scenario = "test-64-nodes";
    GoodputJob& job = p.job;
    job.iteration_s = 7;
    job.tokens_per_iteration = 4e6;
    job.nodes = 64;
    job.gpus = 512;
    job.checkpoint_bytes = 2e12;
    job.reliability = default_reliability();
    for (auto& [name, f] : job.reliability.failures) f.rate_per_1000_node_days *= 20;
    job.reliability.planned_interruptions_per_1000_node_days = 30;
    job.reliability.storage_write_GBps_per_node = 0.4;  // 2e12 / (64 x 0.4 GB/s) = 78 s
    job.reliability.spare_nodes = 6;                    // about 5 nodes in repair: some waits
    p.horizon = GoodputHorizon{5 * kDay, 0};
    p.runs = 8;
    p.seed = 3;
    p.report = run_goodput(job, 0, p.horizon, p.runs, p.seed);
    p.sampled = trace_goodput_run(job, p.report.chosen.interval_s, p.horizon, p.seed);
    return p;
  }();
  return in;
}

/// The layer of `spec` named `name`.
const json& layer(const json& spec, const std::string& name) {
  for (const json& l : spec.at("layer")) {
    if (l.value("name", "") == name) return l;
  }
  throw std::runtime_error("no layer " + name);
}

// The page's sampled run is the Monte Carlo's first run (seed 3) at the chosen interval, and it
// has what the timeline is for: failures, planned interruptions, saves, lost work.
TEST(GoodputCharts, TheSampledRunIsTheMonteCarlosFirst) {
  const GoodputPageInput& in = page();
  const GoodputRun& first = in.report.chosen.runs.at(0);
  EXPECT_EQ(in.sampled.run.wall_s, first.wall_s);
  EXPECT_EQ(in.sampled.run.useful_s, first.useful_s);
  EXPECT_EQ(in.sampled.run.failures, first.failures);
  EXPECT_EQ(in.sampled.run.badput.total(), first.badput.total());
  EXPECT_GT(first.failures, 10);
  EXPECT_GT(first.planned, 0);
}

// ETTR against the interval: one point per swept interval with its mean ETTR and p10/p90 (in %),
// the Young and Daly rules at the report's intervals, and the best point at the best found.
TEST(GoodputCharts, IntervalChartIsTheSweep) {
  const GoodputReport& r = page().report;
  const json spec = goodput_interval_spec(r);
  const json& mean = layer(spec, "ettr_mean").at("data").at("values");
  const json& band = layer(spec, "ettr_band").at("data").at("values");
  ASSERT_EQ(mean.size(), r.sweep.size());
  ASSERT_EQ(r.sweep.size(), 9u);
  for (size_t i = 0; i < r.sweep.size(); ++i) {
    EXPECT_DOUBLE_EQ(mean[i]["interval_min"].get<double>(), r.sweep[i].interval_s / 60);
    EXPECT_DOUBLE_EQ(mean[i]["mean_ettr"].get<double>(), 100 * r.sweep[i].mean_ettr);
    EXPECT_DOUBLE_EQ(band[i]["p10"].get<double>(), 100 * r.sweep[i].ettr.p10);
    EXPECT_DOUBLE_EQ(band[i]["p90"].get<double>(), 100 * r.sweep[i].ettr.p90);
    EXPECT_LE(band[i]["p10"].get<double>(), band[i]["p90"].get<double>());
  }
  const json& rules = layer(spec, "interval_rules").at("data").at("values");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0]["label"], "Young");
  EXPECT_DOUBLE_EQ(rules[0]["interval_min"].get<double>(), r.young_s / 60);
  EXPECT_EQ(rules[1]["label"], "Daly");
  EXPECT_DOUBLE_EQ(rules[1]["interval_min"].get<double>(), r.daly_s / 60);
  const json& best = layer(spec, "best_interval").at("data").at("values");
  ASSERT_EQ(best.size(), 1u);
  EXPECT_DOUBLE_EQ(best[0]["interval_min"].get<double>(), r.best_interval_s / 60);
  EXPECT_DOUBLE_EQ(best[0]["mean_ettr"].get<double>(), 100 * r.best_mean_ettr);
  // The best point is the sweep's highest mean.
  double highest = 0;
  for (const json& p : mean) highest = std::max(highest, p["mean_ettr"].get<double>());
  EXPECT_DOUBLE_EQ(best[0]["mean_ettr"].get<double>(), highest);
}

// Badput: one row per cause and bar; each cause is the report's figure, and each bar sums to its
// badput total: 1 - ETTR (mean over the runs, and the sampled run's).
TEST(GoodputCharts, BadputBarsSumToTheBadputTotal) {
  const GoodputPageInput& in = page();
  const json spec = goodput_badput_spec(in);
  EXPECT_EQ(spec["name"], "badput_bars");
  const json& values = spec.at("data").at("values");
  ASSERT_EQ(values.size(), 2 * Badput::kCauses.size());
  const auto mean = in.report.chosen.mean_badput_share.values();
  const auto sampled = in.sampled.run.badput.values();
  double mean_sum = 0, sampled_sum = 0, sampled_hours = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const json& v = values[i];
    const size_t c = i % Badput::kCauses.size();
    EXPECT_EQ(v["cause_order"].get<size_t>(), c);
    if (i < Badput::kCauses.size()) {
      EXPECT_EQ(v["bar"], "mean of 8 runs");
      EXPECT_DOUBLE_EQ(v["percent"].get<double>(), 100 * mean[c]);
      mean_sum += v["percent"].get<double>();
    } else {
      EXPECT_EQ(v["bar"], "sampled run (seed 3)");
      EXPECT_DOUBLE_EQ(v["hours"].get<double>(), sampled[c] / kHour);
      sampled_sum += v["percent"].get<double>();
      sampled_hours += v["hours"].get<double>();
    }
  }
  EXPECT_NEAR(mean_sum, 100 * in.report.chosen.mean_badput_share.total(), 1e-9);
  EXPECT_NEAR(mean_sum, 100 * (1 - in.report.chosen.mean_ettr), 1e-6);
  EXPECT_NEAR(sampled_sum, 100 * (1 - in.sampled.run.ettr()), 1e-6);
  EXPECT_NEAR(sampled_hours, in.sampled.run.badput.total() / kHour, 1e-9);
  EXPECT_GT(mean[1], 0);  // lost progress is there
}

// The timeline is the sampled run's events: a bar per event that lasts, in order, in its lane,
// lost compute in its own colour, a rule per failure and planned interruption.
TEST(GoodputCharts, TimelineIsTheRecordedEventsOfTheSeededRun) {
  const GoodputRunTrace& t = page().sampled;
  const GoodputTimeline g = goodput_timeline(t, 1000000);
  EXPECT_EQ(g.events, t.events.size());
  EXPECT_EQ(g.drawn, t.events.size());
  EXPECT_DOUBLE_EQ(g.window_end_s, t.run.wall_s);
  const json& bars = layer(g.spec, "timeline_bars").at("data").at("values");
  const json& rules = layer(g.spec, "timeline_interruptions").at("data").at("values");
  size_t b = 0, r = 0, lost = 0;
  int64_t failures = 0, planned = 0;
  for (const GoodputEvent& e : t.events) {
    if (e.phase == GoodputPhase::kFailure || e.phase == GoodputPhase::kPlannedInterruption) {
      ASSERT_LT(r, rules.size());
      EXPECT_DOUBLE_EQ(rules[r]["at_h"].get<double>(), e.start_s / kHour);
      const bool failure = e.phase == GoodputPhase::kFailure;
      EXPECT_EQ(rules[r]["kind"], failure ? "failure" : "planned interruption");
      failures += failure;
      planned += !failure;
      ++r;
      continue;
    }
    ASSERT_LT(b, bars.size());
    const json& bar = bars[b++];
    EXPECT_DOUBLE_EQ(bar["start_h"].get<double>(), e.start_s / kHour);
    EXPECT_DOUBLE_EQ(bar["end_h"].get<double>(), e.end_s / kHour);
    EXPECT_EQ(bar["lane"], is_compute(e.phase)                        ? "compute"
                           : e.phase == GoodputPhase::kCheckpointSave ? "checkpoint save"
                                                                      : "restart");
    if (e.lost) {
      EXPECT_EQ(bar["kind"], "compute, lost at a failure");
      ++lost;
    }
  }
  EXPECT_EQ(b, bars.size());
  EXPECT_EQ(r, rules.size());
  EXPECT_EQ(failures, t.run.failures);
  EXPECT_EQ(planned, t.run.planned);
  EXPECT_GT(lost, 0u);
  // The first view reaches past the third failure and its restart, within the window.
  double third_failure_s = 0;
  int seen = 0;
  for (const GoodputEvent& e : t.events) {
    if (e.phase == GoodputPhase::kFailure && ++seen == 3) third_failure_s = e.start_s;
  }
  EXPECT_GT(g.view_end_s, third_failure_s);
  EXPECT_LT(g.view_end_s, g.window_end_s);
  const json& domain = layer(g.spec, "timeline_bars")["encoding"]["x"]["scale"]["domain"];
  EXPECT_DOUBLE_EQ(domain[1].get<double>(), g.view_end_s / kHour);

  // A window: the first 50 events only, and the note's figures.
  const GoodputTimeline w = goodput_timeline(t, 50);
  EXPECT_EQ(w.drawn, 50u);
  EXPECT_DOUBLE_EQ(w.window_end_s, t.events[49].end_s);
  const size_t shown = layer(w.spec, "timeline_bars")["data"]["values"].size() +
                       layer(w.spec, "timeline_interruptions")["data"]["values"].size();
  EXPECT_EQ(shown, 50u);
}

// The progress line: from (0, 0) to (wall, useful), a red point per failure at the progress it
// had, dropping by the progress lost there; the drops add up to the run's lost progress. The
// dashed line ends at (wall, wall): ETTR 1.
TEST(GoodputCharts, ProgressLineDropsAtEachFailureByTheLostProgress) {
  const GoodputRunTrace& t = page().sampled;
  const json spec = goodput_progress_spec(t);
  const json& line = layer(spec, "progress_line")["data"]["values"];
  const json& failures = layer(spec, "failure_points")["data"]["values"];
  EXPECT_EQ(line.front()["day"], 0.0);
  EXPECT_NEAR(line.back()["day"].get<double>(), t.run.wall_s / kDay, 1e-12);
  EXPECT_NEAR(line.back()["progress_h"].get<double>(), t.run.useful_s / kHour, 1e-9);
  const json& ideal = layer(spec, "ideal_line")["data"]["values"];
  EXPECT_NEAR(ideal[1]["progress_h"].get<double>(), t.run.wall_s / kHour, 1e-9);  // ETTR 1
  ASSERT_EQ(static_cast<int64_t>(failures.size()), t.run.failures);
  double lost_h = 0;
  for (const json& f : failures) lost_h += f["lost_h"].get<double>();
  EXPECT_NEAR(lost_h, t.run.badput.lost_progress_s / kHour, 1e-6);
  for (size_t i = 1; i < line.size(); ++i) {
    EXPECT_GE(line[i]["day"].get<double>(), line[i - 1]["day"].get<double>());
  }
}

// The table and the page: headline numbers (Kokolis et al.'s ETTR beside the Monte Carlo's),
// every section, written atomically into DIR/report.html with the Vega builds inlined.
TEST(GoodputCharts, PageHasEverySectionAndTheHeadlineNumbers) {
  const GoodputPageInput& in = page();
  const std::string table = goodput_table_html(in);
  EXPECT_THAT(table, HasSubstr("test-64-nodes"));
  EXPECT_THAT(table, HasSubstr("512 GPUs on 64 nodes"));
  EXPECT_THAT(table, HasSubstr("Kokolis et al. closed form"));
  EXPECT_THAT(table, HasSubstr(fmt::format("{:.1f} %", 100 * in.report.kokolis_ettr)));
  EXPECT_THAT(table, HasSubstr(fmt::format("mean {:.1f} %", 100 * in.report.chosen.mean_ettr)));

  const fs::path dir =
      fs::path(::testing::TempDir()) / ("traintwin_goodput_page_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "vega");
  for (const char* f : kVegaFiles) std::ofstream(dir / "vega" / f) << "// stand-in " << f << "\n";
  const fs::path written = write_goodput_report(dir, dir / "vega", in);
  EXPECT_EQ(written, dir / "report.html");
  std::ifstream file(written);
  std::stringstream html;
  html << file.rdbuf();
  for (const char* id : {"goodput-summary", "chart-goodput-interval", "chart-goodput-badput",
                         "chart-goodput-progress", "chart-goodput-timeline"}) {
    EXPECT_THAT(html.str(), HasSubstr(id));
  }
  EXPECT_THAT(html.str(), HasSubstr("// stand-in vega-embed.min.js"));
  EXPECT_THAT(html.str(), HasSubstr("traintwin goodput: test-64-nodes"));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);  // report.html, no temporary left behind
  EXPECT_THROW(write_goodput_report(dir, dir / "no-vega", in), Error);
}

}  // namespace
}  // namespace traintwin
