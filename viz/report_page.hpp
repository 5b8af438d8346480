// The report's page: the HTML that holds the sections (viz/simulation_charts.hpp,
// viz/sweep_charts.hpp, viz/goodput_charts.hpp, viz/cluster_charts.hpp, before this in the flow), the self-check script, the inlined Vega,
// Vega-Lite and vega-embed browser builds (scripts/fetch_vega.sh puts them into data/vega/), and
// write_report(), which reads a run's folder (viz/report_data.hpp) and writes DIR/report.html.
// The end of the flow: `traintwin report` (cli/report_command.cpp) calls write_report().
//
// Every chart lives in <div class="chart" id="chart-ID">; the page records script errors, Vega
// warnings and console errors in <ul id="report-errors"> and sets data-report-status on <body>
// to "rendered" (every chart drawn) or "failed", so a headless browser can check it with
// --dump-dom.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "traces/timeline.hpp"
#include "viz/cluster_charts.hpp"
#include "viz/gantt_chart.hpp"
#include "viz/goodput_charts.hpp"
#include "viz/report_data.hpp"

namespace traintwin {

/// The three browser builds the report inlines, as scripts/fetch_vega.sh names them.
inline constexpr const char* kVegaFiles[] = {"vega.min.js", "vega-lite.min.js",
                                             "vega-embed.min.js"};

/// The whole page: `title`, the sections, and the three scripts of `vega_dir` inlined. Throws
/// Error naming the file when one of kVegaFiles is missing or unreadable in `vega_dir` (and
/// saying to run scripts/fetch_vega.sh).
std::string render_report_html(const std::string& title, const std::vector<ReportSection>& sections,
                               const std::filesystem::path& vega_dir);

/// Builds DIR/report.html from the files DIR holds (read_report_input): summary.json (+
/// timeline.json when present) for a simulation, sweep.json for a sweep, both when both are
/// there. Returns the path written. `timeline`, when given, stands for DIR/timeline.json (the
/// events its writer was handed, as `simulate --out` keeps them), so the file is not read back.
/// Throws Error naming the file on a missing directory, no summary.json nor sweep.json,
/// malformed JSON or trace, an unknown schema_version, a missing or mistyped field, missing Vega
/// builds, or a write failure.
std::filesystem::path write_report(const std::filesystem::path& dir,
                                   const std::filesystem::path& vega_dir,
                                   const GanttOptions& gantt = {},
                                   std::optional<Timeline> timeline = std::nullopt);

/// Writes DIR/report.html (whole or not at all) for `traintwin goodput --out DIR`: the goodput
/// sections (viz/goodput_charts.hpp) of `in`, titled by its scenario. Returns the path written.
/// Throws Error on missing Vega builds (as render_report_html) or a write failure.
std::filesystem::path write_goodput_report(const std::filesystem::path& dir,
                                           const std::filesystem::path& vega_dir,
                                           const GoodputPageInput& in);

/// Writes DIR/report.html (whole or not at all) for `traintwin cluster --out DIR`: the cluster
/// sections (viz/cluster_charts.hpp) of `r`, titled by its placement. Returns the path written.
/// Throws Error on missing Vega builds (as render_report_html) or a write failure.
std::filesystem::path write_cluster_report(const std::filesystem::path& dir,
                                           const std::filesystem::path& vega_dir,
                                           const ClusterResult& r);

/// Where the Vega builds are looked for, in order: $TRAINTWIN_VEGA_DIR when set, then
/// data/vega beside the parent of `executable`'s folder (build/traintwin -> data/vega) and the
/// grandparent's (build/tests/x -> data/vega), then ./data/vega.
std::vector<std::filesystem::path> vega_dir_candidates(const std::filesystem::path& executable);

/// The first of vega_dir_candidates() that holds all of kVegaFiles, or nullopt.
std::optional<std::filesystem::path> find_vega_dir(const std::filesystem::path& executable);

}  // namespace traintwin
