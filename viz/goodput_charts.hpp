// The goodput part of the report (`traintwin goodput --out DIR`): from what sim/goodput.hpp
// returns (a GoodputReport and one recorded run, GoodputRunTrace), the headline table, ETTR
// against the checkpoint interval, badput by cause as stacked bars, and one sampled run as its
// useful progress and as a timeline of compute, saves, failures and restarts. Pure functions of
// those structs; the page is viz/report_page.hpp (write_goodput_report()), next in the flow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/goodput.hpp"
#include "viz/report_data.hpp"

namespace traintwin {

/// What the goodput report is drawn from.
struct GoodputPageInput {
  std::string scenario;  ///< its name, for the title and table
  GoodputJob job;
  GoodputHorizon horizon;
  int64_t runs = 0;   ///< Monte Carlo runs per interval
  uint64_t seed = 0;  ///< of the first run
  GoodputReport report;
  GoodputRunTrace sampled;  ///< the run of `seed` at the chosen interval, recorded
};

/// The headline table (HTML): scenario, GPUs and nodes, horizon, iteration, job MTBF, save stall
/// and restart costs, Young's, Daly's, the chosen and the best interval, ETTR p10/p50/p90 and
/// mean, Kokolis et al.'s ETTR, and the sampled run's ETTR, failures and saves.
std::string goodput_table_html(const GoodputPageInput& in);

/// ETTR against the checkpoint interval (minutes, log axis): the sweep's mean ETTR (marks
/// "ettr_mean", one point per swept interval; its values `interval_min`, `mean_ettr` in %), its
/// p10-p90 band over the runs ("ettr_band"), rules at Young's and Daly's intervals
/// ("interval_rules") and the best interval found ("best_interval").
nlohmann::json goodput_interval_spec(const GoodputReport& report);

/// Badput by cause at the chosen interval as stacked horizontal bars, in % of the wall time:
/// the mean over the runs (GoodputAtInterval::mean_badput_share) and the sampled run (its badput
/// over its wall time); one row per (bar, cause) in Badput::kCauses' order (fields `bar`,
/// `cause`, `percent`, and `hours` for the sampled run). Each bar sums to its total badput
/// (1 - ETTR). Marks "badput_bars".
nlohmann::json goodput_badput_spec(const GoodputPageInput& in);

/// The sampled run's useful progress (hours) against the wall clock (days): a point where the
/// line bends, at every failure (before and after the progress it threw away), at the end of
/// every restart phase and at the run's end (saves and slowdowns, a few % of the slope, are
/// between points); marks "progress_line" and "failure_points", and "ideal_line" (dashed: every
/// wall second useful, ETTR 1; the gap to it is the badput).
nlohmann::json goodput_progress_spec(const GoodputRunTrace& sampled);

/// The sampled run as a timeline: lanes "compute" (healthy, straggler, degraded links; the
/// stretches a failure threw away in their own colour), "checkpoint save" and "restart"
/// (detection, waiting for a spare, restart, restore), one bar per event (marks
/// "timeline_bars"; fields `lane`, `kind`, `start_h`, `end_h`), and a rule per failure and
/// planned interruption ("timeline_interruptions"); the x axis pans and zooms. At most
/// `max_events` events are drawn: the first ones, a window from the run's start
/// (GoodputTimeline says how far).
struct GoodputTimeline {
  nlohmann::json spec;
  std::size_t events = 0;   ///< of the run
  std::size_t drawn = 0;    ///< of them, drawn (the first `drawn`)
  double window_end_s = 0;  ///< wall time the drawn events cover, from 0
  /// The x axis's first view, from 0 (pan and zoom reach the rest of the window): to the end of
  /// the restart after the third failure, or window_end_s with fewer failures.
  double view_end_s = 0;
};
GoodputTimeline goodput_timeline(const GoodputRunTrace& sampled, std::size_t max_events = 4000);

/// The sections of a goodput report: table, ETTR against the interval, badput, progress and
/// timeline of the sampled run.
std::vector<ReportSection> goodput_sections(const GoodputPageInput& in);

}  // namespace traintwin
