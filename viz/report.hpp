// The HTML report: one self-contained report.html (opens offline from disk) built from the JSON
// files that `traintwin simulate --out DIR` (summary.json, timeline.json) and `traintwin sweep
// --out DIR` (sweep.json) write. Charts are Vega-Lite specs built here with nlohmann::json and
// rendered in the browser by vega-embed; the Vega, Vega-Lite and vega-embed browser builds
// (scripts/fetch_vega.sh puts them into data/vega/) are inlined into the file at report time.
//
//   write_report(dir, vega_dir)          -> DIR/report.html from whatever JSON files DIR holds
//   simulation_sections / sweep_sections -> the report's sections (tables and chart specs)
//   *_spec, gantt_chart                  -> one Vega-Lite spec each, pure functions (tests)
//
// Every chart lives in <div class="chart" id="chart-ID">; the page records script errors, Vega
// warnings and console errors in <ul id="report-errors"> and sets data-report-status on <body>
// to "rendered" (every chart drawn) or "failed", so a headless browser can check it with
// --dump-dom.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "traces/timeline.hpp"

namespace traintwin {

/// The three browser builds the report inlines, as scripts/fetch_vega.sh names them.
inline constexpr const char* kVegaFiles[] = {"vega.min.js", "vega-lite.min.js",
                                             "vega-embed.min.js"};

/// One part of the report: a chart (a Vega-Lite spec) or an HTML block (a table).
struct ReportSection {
  std::string id;     ///< DOM id suffix: a chart is drawn into <div id="chart-ID">
  std::string title;  ///< heading shown above it
  std::string note;   ///< one sentence under the heading: what is shown (and what was left out)
  std::optional<nlohmann::json> spec;  ///< a Vega-Lite spec, or nullopt for an HTML section
  std::string html;                    ///< the HTML of a non-chart section (escaped already)
};

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

/// The parallel layout a summary.json states (its "layout" object), used to map a traced rank
/// to its pipeline stage and TP rank.
struct ReportLayout {
  int64_t tensor_model_parallel_size = 1;
  int64_t context_parallel_size = 1;
  int64_t data_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  std::string rank_order = "tp-cp-dp-pp";  ///< layout.rank_order when present, else Megatron's
  /// Transformer layers of each pipeline stage (summed layout.layers_per_model_chunk); empty
  /// when the summary has none (an older traintwin wrote it).
  std::vector<int64_t> layers_per_stage;
};

/// Reads summary["layout"]; throws Error starting with `origin` when a size is missing.
ReportLayout report_layout(const nlohmann::json& summary, const std::string& origin);

/// The summary table (HTML): scenario, layout, iteration time, tokens/s(/GPU), MFU, HFU,
/// pipeline bubble, exposed communication, memory and cost sources. Throws Error starting with
/// `origin` when a required field of summary.json is missing or has the wrong type.
std::string summary_table_html(const nlohmann::json& summary, const std::string& origin);

/// Stacked horizontal bars: compute, exposed TP/PP/DP communication, pipeline bubble and
/// optimizer time, for the critical rank and for each pipeline stage ("per_stage").
nlohmann::json time_breakdown_spec(const nlohmann::json& summary, const std::string& origin);

/// Stacked bars per pipeline stage of weights, gradients, optimizer state, activations and
/// embedding/logits (GiB), with a rule at the GPU's capacity (gpu_memory_bytes).
nlohmann::json memory_spec(const nlohmann::json& summary, const std::string& origin);

/// Horizontal bars of the busiest links' utilization, coloured by tier (bytes in tooltips);
/// nullopt when summary.json lists no link (e.g. an analytical estimate).
std::optional<nlohmann::json> links_spec(const nlohmann::json& summary, const std::string& origin);

/// Lines of the busiest links' utilization over the iteration (summary.json link_series);
/// nullopt when there is none (an analytical estimate, or no flow).
std::optional<nlohmann::json> link_series_spec(const nlohmann::json& summary, const std::string& origin);

/// An HTML table of link_tiers (links, GB mean/max, utilization mean/p99/max per tier) and the
/// hot links; "" when summary.json has no link_tiers.
std::string link_tiers_html(const nlohmann::json& summary, const std::string& origin);

/// The pipeline schedule of one iteration as a Gantt chart: a vconcat of one chart per pipeline
/// stage (in stage order, sharing the time axis) with one lane per traced rank and stream, bars
/// coloured by category (forward, backward, recompute, comm, optimizer, other) with the
/// micro-batch number on compute bars wide enough to hold it and in every tooltip. Stage k's
/// chart holds one data row per bar; its layers are the marks "gantt_bars_stageK" and
/// "gantt_labels_stageK". Throws Error starting with `origin` (the timeline's file)
/// when an event's rank is outside `layout`.
GanttChart gantt_chart(const Timeline& timeline, const ReportLayout& layout,
                       const std::string& origin, const GanttOptions& options = {});

/// Heatmaps of the best tokens/s/GPU over (PP, micro-batch size), one per TP size, from the rows
/// of sweep.json; other dimensions (VPP, recompute, SP, distributed optimizer) are folded into
/// the cell (its best ranked configuration; the tooltip names it). A cell where every
/// configuration is OOM is drawn grey with "OOM" and the smallest excess (marks "heat_cells",
/// "oom_cells", "heat_labels"); invalid and error rows are left out. nullopt when no row is
/// ranked or OOM.
std::optional<nlohmann::json> sweep_heatmap_spec(const nlohmann::json& sweep,
                                                 const std::string& origin);

/// The ranked table (HTML) of a sweep: the first `max_rows` ranked configurations with their
/// layout and tokens/s/GPU, MFU, iteration time, bubble and peak memory, then a count of the OOM,
/// invalid and error rows.
std::string sweep_table_html(const nlohmann::json& sweep, const std::string& origin,
                             std::size_t max_rows = 50);

/// The sections of a simulation's report: summary table, time breakdown, Gantt chart (when
/// `timeline` is given), memory per stage (a note instead when summary.json predates
/// memory_per_stage), busiest links (when summary.json lists links). `origin` and `timeline_origin`
/// (the files they came from) start the messages of the Errors thrown on missing or mistyped
/// fields.
std::vector<ReportSection> simulation_sections(const nlohmann::json& summary,
                                               const std::string& origin,
                                               const std::optional<Timeline>& timeline,
                                               const std::string& timeline_origin,
                                               const GanttOptions& gantt = {});

/// The sections of a sweep's report: heatmaps and the ranked table.
std::vector<ReportSection> sweep_sections(const nlohmann::json& sweep, const std::string& origin);

/// The whole page: `title`, the sections, and the three scripts of `vega_dir` inlined. Throws
/// Error naming the file when one of kVegaFiles is missing or unreadable in `vega_dir` (and
/// saying to run scripts/fetch_vega.sh).
std::string render_report_html(const std::string& title, const std::vector<ReportSection>& sections,
                               const std::filesystem::path& vega_dir);

/// Builds DIR/report.html from the files DIR holds: summary.json (+ timeline.json when present)
/// for a simulation, sweep.json for a sweep, both when both are there. Returns the path written.
/// `timeline`, when given, stands for DIR/timeline.json (the events its writer was handed, as
/// `simulate --out` keeps them), so the file is not read back. Throws Error naming the file on a
/// missing directory, no summary.json nor sweep.json, malformed JSON or trace, a missing field,
/// missing Vega builds, or a write failure.
std::filesystem::path write_report(const std::filesystem::path& dir,
                                   const std::filesystem::path& vega_dir,
                                   const GanttOptions& gantt = {},
                                   std::optional<Timeline> timeline = std::nullopt);

/// Where the Vega builds are looked for, in order: $TRAINTWIN_VEGA_DIR when set, then
/// data/vega beside the parent of `executable`'s folder (build/traintwin -> data/vega) and the
/// grandparent's (build/tests/x -> data/vega), then ./data/vega.
std::vector<std::filesystem::path> vega_dir_candidates(const std::filesystem::path& executable);

/// The first of vega_dir_candidates() that holds all of kVegaFiles, or nullopt.
std::optional<std::filesystem::path> find_vega_dir(const std::filesystem::path& executable);

}  // namespace traintwin
