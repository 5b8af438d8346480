// The pipeline schedule of one iteration as a Gantt chart: the timeline of a run
// (timeline.json, traces/timeline.hpp) drawn per pipeline stage, a lane per traced rank and
// stream, with the reductions that keep a large timeline drawable. The stage of a rank comes
// from ReportLayout (viz/report_data.hpp, before this in the flow); viz/simulation_charts.hpp
// puts the chart into the simulation's sections, next in the flow.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "traces/timeline.hpp"
#include "viz/report_data.hpp"

namespace traintwin {

/// How the Gantt chart reduces a large timeline so that the browser can still draw it.
struct GanttOptions {
  /// At most this many bars are drawn one per op. Above it, only the compute stream of the
  /// lowest traced rank with TP rank 0 of each pipeline stage is kept; if that is still above
  /// it, consecutive ops of the same micro-batch, phase and chunk on a stream are merged into
  /// one bar (a "fwd mb3 chunk1" block).
  std::size_t max_bars = 10000;
};

/// The Gantt chart of one iteration and what it kept.
struct GanttChart {
  nlohmann::json spec;        ///< Vega-Lite spec: a chart per pipeline stage, a lane per stream
  std::size_t ops = 0;        ///< ops in the timeline
  std::size_t kept_ops = 0;   ///< ops on the lanes drawn
  std::size_t bars = 0;       ///< bars drawn (== kept_ops unless ops were merged into blocks)
  bool compute_only = false;  ///< true when only TP rank 0's compute stream was kept
  bool merged = false;        ///< true when ops were merged into micro-batch blocks
};

/// The pipeline schedule of one iteration as a Gantt chart: a vconcat of one chart per pipeline
/// stage (in stage order, sharing the time axis) with one lane per traced rank and stream, bars
/// coloured by category (forward, backward, recompute, comm, optimizer, other) with the
/// micro-batch number on compute bars wide enough to hold it and in every tooltip. Stage k's
/// chart holds one data row per bar; its layers are the marks "gantt_bars_stageK" and
/// "gantt_labels_stageK". The micro-batch, phase and chunk come from each event's args
/// (micro_batch, phase, model_chunk), never from its name. Throws Error starting with `origin`
/// (the timeline's file) when an event's rank is outside `layout`.
GanttChart gantt_chart(const Timeline& timeline, const ReportLayout& layout,
                       const std::string& origin, const GanttOptions& options = {});

}  // namespace traintwin
