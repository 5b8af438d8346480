#include "viz/goodput_charts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "viz/report_format.hpp"

namespace traintwin {
namespace {

using json = nlohmann::json;

constexpr double kHour = 3600.0;
constexpr double kDay = 86400.0;

/// The causes as the report labels them, in Badput::kCauses' order.
constexpr std::array<const char*, Badput::kCauses.size()> kCauseLabels = {
    "checkpoint save", "lost progress", "detection",          "waiting for a spare",
    "restart",         "restore",       "straggler slowdown", "degraded links"};

std::string minutes_text(double s) { return fmt::format("{:.1f} min", s / 60.0); }

/// The timeline's lane and label of an event.
std::pair<const char*, const char*> lane_and_kind(const GoodputEvent& e) {
  switch (e.phase) {
    case GoodputPhase::kCompute:
      return {"compute", e.lost ? "compute, lost at a failure" : "compute"};
    case GoodputPhase::kStraggler:
      return {"compute", e.lost ? "compute, lost at a failure" : "straggler slowdown"};
    case GoodputPhase::kDegradedLinks:
      return {"compute", e.lost ? "compute, lost at a failure" : "degraded links"};
    case GoodputPhase::kCheckpointSave:
      return {"checkpoint save", "checkpoint save"};
    case GoodputPhase::kDetection:
      return {"restart", "detection"};
    case GoodputPhase::kSpareWait:
      return {"restart", "waiting for a spare"};
    case GoodputPhase::kRestart:
      return {"restart", "restart"};
    case GoodputPhase::kRestore:
      return {"restart", "restore"};
    case GoodputPhase::kFailure:
      return {"", "failure"};
    case GoodputPhase::kPlannedInterruption:
      return {"", "planned interruption"};
  }
  return {"", ""};
}

bool is_instant(GoodputPhase p) {
  return p == GoodputPhase::kFailure || p == GoodputPhase::kPlannedInterruption;
}

}  // namespace

std::string goodput_table_html(const GoodputPageInput& in) {
  const GoodputReport& r = in.report;
  const GoodputCosts& c = r.costs;
  const GoodputAtInterval& a = r.chosen;
  const GoodputRun& s = in.sampled.run;
  const std::string horizon =
      in.horizon.wall_s > 0
          ? fmt::format("{:.1f} days of wall time", in.horizon.wall_s / kDay)
          : fmt::format("until {:.1f} h of work is saved", in.horizon.work_s / kHour);
  return key_value_table(
      {{"scenario", in.scenario},
       {"job", fmt::format("{} GPUs on {} nodes", in.job.gpus, in.job.nodes)},
       {"run", fmt::format("{}, {} runs per interval (seeds {} to {})", horizon, in.runs, in.seed,
                           in.seed + static_cast<uint64_t>(std::max<int64_t>(in.runs, 1) - 1))},
       {"iteration", format_seconds(in.job.iteration_s)},
       {"job MTBF (unexpected failures)", fmt::format("{:.2f} h", c.mtbf_s / kHour)},
       {"checkpoint save stall / load",
        fmt::format("{} / {}", format_seconds(c.save_stall_s), format_seconds(c.restore_s))},
       {"restart after a failure",
        fmt::format("detection {} + re-queue, start and communicator {} + load",
                    format_seconds(c.detection_s), format_seconds(c.restart_s))},
       {"checkpoint interval",
        fmt::format("Young {}, Daly {}, simulated every {}, best of the "
                    "sweep {}",
                    minutes_text(r.young_s), minutes_text(r.daly_s), minutes_text(a.interval_s),
                    minutes_text(r.best_interval_s))},
       {"ETTR (Monte Carlo)", fmt::format("p10 {}, p50 {}, p90 {}, mean {}",
                                          format_percent(a.ettr.p10), format_percent(a.ettr.p50),
                                          format_percent(a.ettr.p90), format_percent(a.mean_ettr))},
       {"ETTR (Kokolis et al. closed form)", format_percent(r.kokolis_ettr)},
       {"best interval's mean ETTR", format_percent(r.best_mean_ettr)},
       {"sampled run (seed " + std::to_string(in.sampled.seed) + ")",
        fmt::format("ETTR {}, {} failures, {} planned interruptions, {} checkpoints",
                    format_percent(s.ettr()), s.failures, s.planned, s.checkpoints)}},
      "summary");
}

json goodput_interval_spec(const GoodputReport& report) {
  json points = json::array();
  for (const GoodputAtInterval& at : report.sweep) {
    points.push_back({{"interval_min", at.interval_s / 60.0},
                      {"mean_ettr", 100.0 * at.mean_ettr},
                      {"p10", 100.0 * at.ettr.p10},
                      {"p50", 100.0 * at.ettr.p50},
                      {"p90", 100.0 * at.ettr.p90}});
  }
  const json rules = json::array({{{"label", "Young"}, {"interval_min", report.young_s / 60.0}},
                                  {{"label", "Daly"}, {"interval_min", report.daly_s / 60.0}}});
  const json best = json::array({{{"label", "best found"},
                                  {"interval_min", report.best_interval_s / 60.0},
                                  {"mean_ettr", 100.0 * report.best_mean_ettr}}});
  const json x = {{"field", "interval_min"},
                  {"type", "quantitative"},
                  {"scale", {{"type", "log"}, {"nice", false}}},
                  {"title", "checkpoint interval (minutes of training between saves)"}};
  const json y_title = "ETTR (%)";
  json spec = base_spec("ETTR against the checkpoint interval");
  spec["width"] = 800;
  spec["height"] = 300;
  spec["layer"] = json::array(
      {{{"name", "ettr_band"},
        {"data", {{"values", points}}},
        {"mark", {{"type", "area"}, {"opacity", 0.2}, {"color", "#4c78a8"}}},
        {"encoding",
         {{"x", x},
          {"y",
           {{"field", "p10"},
            {"type", "quantitative"},
            {"title", y_title},
            {"scale", {{"zero", false}}}}},
          {"y2", {{"field", "p90"}}}}}},
       {{"name", "ettr_mean"},
        {"data", {{"values", points}}},
        {"mark", {{"type", "line"}, {"point", true}, {"tooltip", true}, {"color", "#4c78a8"}}},
        {"encoding",
         {{"x", x},
          {"y", {{"field", "mean_ettr"}, {"type", "quantitative"}, {"title", y_title}}},
          {"tooltip",
           json::array({{{"field", "interval_min"}, {"format", ".1f"}, {"title", "interval (min)"}},
                        {{"field", "mean_ettr"}, {"format", ".2f"}, {"title", "mean ETTR (%)"}},
                        {{"field", "p10"}, {"format", ".2f"}, {"title", "p10 (%)"}},
                        {{"field", "p90"}, {"format", ".2f"}, {"title", "p90 (%)"}}})}}}},
       {{"name", "interval_rules"},
        {"data", {{"values", rules}}},
        {"mark", {{"type", "rule"}, {"strokeDash", {5, 4}}, {"tooltip", true}}},
        {"encoding",
         {{"x", x},
          {"color",
           {{"field", "label"},
            {"type", "nominal"},
            {"title", nullptr},
            {"scale", {{"domain", {"Young", "Daly"}}, {"range", {"#9d755d", "#54a24b"}}}},
            {"legend", {{"orient", "bottom"}}}}},
          {"tooltip",
           json::array(
               {{{"field", "label"}},
                {{"field", "interval_min"}, {"format", ".1f"}, {"title", "interval (min)"}}})}}}},
       {{"name", "best_interval"},
        {"data", {{"values", best}}},
        {"mark",
         {{"type", "point"},
          {"filled", true},
          {"size", 140},
          {"color", "#e45756"},
          {"tooltip", true}}},
        {"encoding",
         {{"x", x},
          {"y", {{"field", "mean_ettr"}, {"type", "quantitative"}}},
          {"tooltip",
           json::array(
               {{{"field", "label"}},
                {{"field", "interval_min"}, {"format", ".1f"}, {"title", "interval (min)"}},
                {{"field", "mean_ettr"}, {"format", ".2f"}, {"title", "mean ETTR (%)"}}})}}}}});
  return spec;
}

json goodput_badput_spec(const GoodputPageInput& in) {
  const GoodputAtInterval& a = in.report.chosen;
  const GoodputRun& s = in.sampled.run;
  const std::string mean_bar = fmt::format(
      "mean of {} runs", a.runs.empty() ? in.runs : static_cast<int64_t>(a.runs.size()));
  const std::string sampled_bar = fmt::format("sampled run (seed {})", in.sampled.seed);
  json values = json::array();
  const auto mean = a.mean_badput_share.values();
  const auto seconds = s.badput.values();
  for (size_t i = 0; i < mean.size(); ++i) {
    values.push_back({{"bar", mean_bar},
                      {"bar_order", 0},
                      {"cause", kCauseLabels[i]},
                      {"cause_order", i},
                      {"percent", 100.0 * mean[i]}});
  }
  for (size_t i = 0; i < seconds.size(); ++i) {
    values.push_back({{"bar", sampled_bar},
                      {"bar_order", 1},
                      {"cause", kCauseLabels[i]},
                      {"cause_order", i},
                      {"percent", s.wall_s > 0 ? 100.0 * seconds[i] / s.wall_s : 0.0},
                      {"hours", seconds[i] / kHour}});
  }
  std::vector<std::string> domain(kCauseLabels.begin(), kCauseLabels.end());
  json spec = base_spec("Badput by cause at the chosen checkpoint interval");
  spec["width"] = 800;
  spec["height"] = {{"step", 30}};
  spec["data"] = {{"values", values}};
  spec["name"] = "badput_bars";
  spec["mark"] = {{"type", "bar"}, {"tooltip", true}};
  spec["encoding"] = {
      {"y",
       {{"field", "bar"},
        {"type", "nominal"},
        {"title", nullptr},
        {"sort", {{"field", "bar_order"}, {"op", "min"}}}}},
      {"x",
       {{"field", "percent"},
        {"type", "quantitative"},
        {"stack", "zero"},
        {"title", "badput (% of the wall time)"}}},
      {"color",
       {{"field", "cause"},
        {"type", "nominal"},
        {"title", nullptr},
        {"scale",
         {{"domain", domain},
          {"range",
           {"#4c78a8", "#e45756", "#f58518", "#bab0ac", "#72b7b2", "#54a24b", "#b279a2",
            "#9d755d"}}}},
        {"legend", {{"orient", "bottom"}, {"columns", 4}}}}},
      {"order", {{"field", "cause_order"}, {"type", "quantitative"}}},
      {"tooltip", json::array({{{"field", "bar"}, {"title", "of"}},
                               {{"field", "cause"}},
                               {{"field", "percent"}, {"format", ".2f"}, {"title", "% of wall"}},
                               {{"field", "hours"}, {"format", ".1f"}, {"title", "hours"}}})}};
  return spec;
}

json goodput_progress_spec(const GoodputRunTrace& sampled) {
  json line = json::array({{{"day", 0.0}, {"progress_h", 0.0}}});
  json failures = json::array();
  double before = 0;  // progress at the start of the event
  auto point = [&](double t_s, double progress_s) {
    line.push_back({{"day", t_s / kDay}, {"progress_h", progress_s / kHour}});
  };
  for (const GoodputEvent& e : sampled.events) {
    switch (e.phase) {
      case GoodputPhase::kFailure:
        point(e.start_s, before);
        point(e.start_s, e.progress_s);
        failures.push_back({{"day", e.start_s / kDay},
                            {"progress_h", before / kHour},
                            {"lost_h", (before - e.progress_s) / kHour}});
        break;
      case GoodputPhase::kPlannedInterruption:
      case GoodputPhase::kDetection:
      case GoodputPhase::kSpareWait:
      case GoodputPhase::kRestart:
      case GoodputPhase::kRestore:
        point(e.start_s, before);
        point(e.end_s, e.progress_s);
        break;
      default:
        break;
    }
    before = e.progress_s;
  }
  if (!sampled.events.empty()) point(sampled.events.back().end_s, sampled.events.back().progress_s);
  const json x = {{"field", "day"}, {"type", "quantitative"}, {"title", "wall clock (days)"}};
  const json y = {{"field", "progress_h"},
                  {"type", "quantitative"},
                  {"title", "useful progress (hours of training)"}};
  json spec = base_spec("Useful progress of the sampled run against the wall clock");
  spec["width"] = 800;
  spec["height"] = 260;
  const double wall_s = sampled.events.empty() ? 0.0 : sampled.events.back().end_s;
  const json ideal = json::array({{{"day", 0.0}, {"progress_h", 0.0}},
                                  {{"day", wall_s / kDay}, {"progress_h", wall_s / kHour}}});
  spec["layer"] = json::array(
      {{{"name", "ideal_line"},
        {"data", {{"values", ideal}}},
        {"mark", {{"type", "line"}, {"color", "#9d9d9d"}, {"strokeDash", {6, 4}}}},
        {"encoding", {{"x", x}, {"y", y}}}},
       {{"name", "progress_line"},
        {"data", {{"values", line}}},
        {"mark", {{"type", "line"}, {"color", "#4c78a8"}, {"strokeWidth", 1.5}}},
        {"encoding", {{"x", x}, {"y", y}}}},
       {{"name", "failure_points"},
        {"data", {{"values", failures}}},
        {"mark",
         {{"type", "point"},
          {"color", "#e45756"},
          {"size", 6},
          {"opacity", 0.5},
          {"tooltip", true}}},
        {"encoding",
         {{"x", x},
          {"y", y},
          {"tooltip",
           json::array(
               {{{"field", "day"}, {"format", ".3f"}, {"title", "day"}},
                {{"field", "lost_h"}, {"format", ".2f"}, {"title", "progress lost (h)"}}})}}}}});
  return spec;
}

GoodputTimeline goodput_timeline(const GoodputRunTrace& sampled, std::size_t max_events) {
  GoodputTimeline out;
  out.events = sampled.events.size();
  out.drawn = std::min(out.events, std::max<std::size_t>(max_events, 1));
  out.window_end_s = out.drawn > 0 ? sampled.events[out.drawn - 1].end_s : 0.0;
  // The first view: up to the end of the restart after the third failure (a few stretches of
  // compute, saves and restarts wide enough to see), or the whole window.
  out.view_end_s = out.window_end_s;
  int failures = 0;
  for (std::size_t i = 0; i < out.drawn; ++i) {
    const GoodputEvent& e = sampled.events[i];
    if (e.phase == GoodputPhase::kFailure) ++failures;
    if (failures >= 3 && is_compute(e.phase)) {
      out.view_end_s = std::min(out.window_end_s, 1.05 * e.start_s);
      break;
    }
  }
  json bars = json::array();
  json instants = json::array();
  for (std::size_t i = 0; i < out.drawn; ++i) {
    const GoodputEvent& e = sampled.events[i];
    const auto [lane, kind] = lane_and_kind(e);
    if (is_instant(e.phase)) {
      instants.push_back({{"kind", kind}, {"at_h", e.start_s / kHour}});
      continue;
    }
    bars.push_back({{"lane", lane},
                    {"kind", kind},
                    {"start_h", e.start_s / kHour},
                    {"end_h", e.end_s / kHour},
                    {"duration_s", e.end_s - e.start_s},
                    {"progress_h", e.progress_s / kHour}});
  }
  const json x = {{"field", "start_h"},
                  {"type", "quantitative"},
                  {"title", "wall clock (hours)"},
                  {"scale", {{"domain", {0.0, out.view_end_s / kHour}}}}};
  const std::vector<std::string> lanes = {"compute", "checkpoint save", "restart"};
  json spec = base_spec("One sampled run: compute, checkpoint saves, failures and restarts");
  spec["width"] = 900;
  spec["height"] = 150;
  spec["layer"] = json::array(
      {{{"name", "timeline_bars"},
        {"data", {{"values", bars}}},
        {"params", json::array({{{"name", "timeline_zoom"},
                                 {"select", {{"type", "interval"}, {"encodings", {"x"}}}},
                                 {"bind", "scales"}}})},
        {"mark", {{"type", "bar"}, {"tooltip", true}, {"clip", true}}},
        {"encoding",
         {{"x", x},
          {"x2", {{"field", "end_h"}}},
          {"y", {{"field", "lane"}, {"type", "nominal"}, {"title", nullptr}, {"sort", lanes}}},
          {"color",
           {{"field", "kind"},
            {"type", "nominal"},
            {"title", nullptr},
            {"scale",
             {{"domain",
               {"compute", "compute, lost at a failure", "straggler slowdown", "degraded links",
                "checkpoint save", "detection", "waiting for a spare", "restart", "restore"}},
              {"range",
               {"#4c78a8", "#ff9da6", "#b279a2", "#9d755d", "#f58518", "#eeca3b", "#bab0ac",
                "#72b7b2", "#54a24b"}}}},
            {"legend", {{"orient", "bottom"}, {"columns", 5}}}}},
          {"tooltip",
           json::array({{{"field", "kind"}},
                        {{"field", "start_h"}, {"format", ".3f"}, {"title", "from (h)"}},
                        {{"field", "end_h"}, {"format", ".3f"}, {"title", "to (h)"}},
                        {{"field", "duration_s"}, {"format", ".1f"}, {"title", "seconds"}},
                        {{"field", "progress_h"},
                         {"format", ".3f"},
                         {"title", "progress at its end (h)"}}})}}}},
       {{"name", "timeline_interruptions"},
        {"data", {{"values", instants}}},
        {"mark", {{"type", "rule"}, {"strokeWidth", 1.5}, {"tooltip", true}, {"clip", true}}},
        {"encoding",
         {{"x", {{"field", "at_h"}, {"type", "quantitative"}}},
          {"color",
           {{"field", "kind"},
            {"type", "nominal"},
            {"title", nullptr},
            {"scale",
             {{"domain", {"failure", "planned interruption"}}, {"range", {"#d62728", "#ff7f0e"}}}},
            {"legend", {{"orient", "right"}}}}},
          {"tooltip",
           json::array({{{"field", "kind"}},
                        {{"field", "at_h"}, {"format", ".3f"}, {"title", "at (h)"}}})}}}}});
  spec["resolve"] = {{"scale", {{"color", "independent"}}}};
  out.spec = std::move(spec);
  return out;
}

std::vector<ReportSection> goodput_sections(const GoodputPageInput& in) {
  const GoodputReport& r = in.report;
  std::vector<ReportSection> out;
  out.push_back({"goodput-summary", "Goodput",
                 "The whole run under failures, checkpoints and restarts (a seeded Monte Carlo, "
                 "sim/goodput.hpp); ETTR = useful training time / wall time.",
                 std::nullopt, goodput_table_html(in)});
  out.push_back(
      {"goodput-interval", "ETTR against the checkpoint interval",
       fmt::format("Mean ETTR over the same {} seeds at each swept interval (Daly's x 2^(k/2)), "
                   "with its p10-p90 band; dashed rules at Young's ({}) and Daly's ({}) "
                   "intervals, the red point the best found ({}, mean ETTR {}).",
                   in.runs, minutes_text(r.young_s), minutes_text(r.daly_s),
                   minutes_text(r.best_interval_s), format_percent(r.best_mean_ettr)),
       goodput_interval_spec(r), ""});
  out.push_back(
      {"goodput-badput", "Badput by cause",
       fmt::format("At the simulated interval ({}): where the wall time not spent on "
                   "useful training went, mean over the runs (total {}) and in the "
                   "sampled run (total {}).",
                   minutes_text(r.chosen.interval_s),
                   format_percent(r.chosen.mean_badput_share.total()),
                   format_percent(in.sampled.run.wall_s > 0
                                      ? in.sampled.run.badput.total() / in.sampled.run.wall_s
                                      : 0.0)),
       goodput_badput_spec(in), ""});
  out.push_back(
      {"goodput-progress", "Sampled run: useful progress",
       fmt::format(
           "Seed {} at the simulated interval: {} failures (red points; the "
           "drop is the progress since the last durable checkpoint), {} planned "
           "interruptions; flat stretches are detection, restart and load; the dashed line is "
           "ETTR 1 (the gap to it is the badput).",
           in.sampled.seed, in.sampled.run.failures, in.sampled.run.planned),
       goodput_progress_spec(in.sampled), ""});
  const GoodputTimeline t = goodput_timeline(in.sampled);
  std::string note = fmt::format("The same run, event by event: ");
  if (t.drawn < t.events) {
    note += fmt::format("its first {} of {} events, the first {:.1f} h of {:.1f} days", t.drawn,
                        t.events, t.window_end_s / kHour, in.sampled.run.wall_s / kDay);
  } else {
    note += fmt::format("all {} events", t.events);
  }
  note += fmt::format(
      "; shown from the start to the restart after the third failure ({:.1f} h): drag to pan, "
      "scroll to zoom (a save of a few seconds needs zooming in).",
      t.view_end_s / kHour);
  out.push_back({"goodput-timeline", "Sampled run: timeline", note, t.spec, ""});
  return out;
}

}  // namespace traintwin
