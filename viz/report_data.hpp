// What the report is built from: the typed documents of a run's folder (summary.json as a
// SummaryDocument, sweep.json as SweepRecords, timeline.json as a Timeline), read once by the
// readers next to their writers (sim/summary_document.hpp, sim/sweep_record.hpp), and the
// mapping of a traced rank to its pipeline stage (ReportLayout). No chart reads a JSON key: a
// field renamed in those structs breaks the build, not the page.
//
// Next in the flow: the charts (viz/simulation_charts.hpp, viz/gantt_chart.hpp,
// viz/sweep_charts.hpp) turn these into ReportSections; viz/report_page.hpp assembles the page.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/summary_document.hpp"
#include "sim/sweep_record.hpp"
#include "traces/timeline.hpp"

namespace traintwin {

/// One part of the report: a chart (a Vega-Lite spec) or an HTML block (a table).
struct ReportSection {
  std::string id;     ///< DOM id suffix: a chart is drawn into <div id="chart-ID">
  std::string title;  ///< heading shown above it
  std::string note;   ///< one sentence under the heading: what is shown (and what was left out)
  std::optional<nlohmann::json> spec;  ///< a Vega-Lite spec, or nullopt for an HTML section
  std::string html;                    ///< the HTML of a non-chart section (escaped already)
};

/// The parallel layout of a run as the Gantt chart needs it: the sizes that map a traced rank
/// to its pipeline stage and TP rank (core/rank_layout.hpp), and each stage's layers.
struct ReportLayout {
  int64_t tensor_model_parallel_size = 1;
  int64_t context_parallel_size = 1;
  int64_t data_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  std::string rank_order = "tp-cp-dp-pp";  ///< summary.json's layout.rank_order
  /// Transformer layers of each pipeline stage (its model chunks summed).
  std::vector<int64_t> layers_per_stage;
};

/// The Gantt chart's layout from a summary's layout.
ReportLayout report_layout(const SummaryLayout& layout);

/// What a run's folder holds for the report, read and checked.
struct ReportInput {
  std::optional<SummaryDocument> summary;  ///< DIR/summary.json (simulate --out)
  std::optional<Timeline> timeline;        ///< DIR/timeline.json, when there with summary.json
  std::optional<std::vector<SweepRecord>> sweep;              ///< DIR/sweep.json (sweep --out)
  std::string summary_origin, timeline_origin, sweep_origin;  ///< the files' paths, for errors
};

/// The parsed JSON text of `path`. Throws Error naming the file when it cannot be read or is
/// malformed ("PATH: malformed JSON: ...").
nlohmann::ordered_json read_json_file(const std::filesystem::path& path);

/// Reads `dir`: summary.json (read_summary_json) and, with it, timeline.json (unless `timeline`
/// is given: the events its writer was handed, as `simulate --out` keeps them), and sweep.json
/// (read_sweep_json). Throws Error naming the file on a missing directory, neither summary.json
/// nor sweep.json, malformed JSON or trace, an unknown schema_version, or a missing or mistyped
/// field.
ReportInput read_report_input(const std::filesystem::path& dir,
                              std::optional<Timeline> timeline = std::nullopt);

}  // namespace traintwin
