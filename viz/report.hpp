// The HTML report: one self-contained report.html (opens offline from disk) built from the files
// that `traintwin simulate --out DIR` (summary.json, timeline.json) and `traintwin sweep --out
// DIR` (sweep.json) write. Charts are Vega-Lite specs built with nlohmann::json and rendered in
// the browser by vega-embed; the Vega, Vega-Lite and vega-embed browser builds
// (scripts/fetch_vega.sh puts them into data/vega/) are inlined into the file at report time.
//
// The flow, one file per step (this header includes them all):
//   sim/summary_document.hpp, sim/sweep_record.hpp -> the typed files, one writer and one
//                                                     reader each (schema_version checked)
//   viz/report_data.hpp        -> read a run's folder into a ReportInput; a rank's stage
//   viz/simulation_charts.hpp  -> summary table, time breakdown, memory, links: sections
//   viz/gantt_chart.hpp        -> the pipeline schedule of timeline.json
//   viz/sweep_charts.hpp       -> sweep heatmaps and ranked table: sections
//   viz/goodput_charts.hpp     -> `goodput --out`: ETTR against the interval, badput, a run
//   viz/report_page.hpp        -> the page (self-check script, Vega inlined), write_report
//   viz/report_format.hpp      -> the text helpers they share (escaping, units, spec skeleton)
#pragma once

#include "viz/gantt_chart.hpp"
#include "viz/goodput_charts.hpp"
#include "viz/report_data.hpp"
#include "viz/report_format.hpp"
#include "viz/report_page.hpp"
#include "viz/simulation_charts.hpp"
#include "viz/sweep_charts.hpp"
