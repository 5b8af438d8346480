// The simulation's part of the report, from a SummaryDocument (summary.json, read by
// viz/report_data.hpp before this in the flow): the summary table, the time breakdown, memory
// per stage, the link tables and charts, and the sections they make (with the Gantt chart of
// viz/gantt_chart.hpp when a timeline is there). Every function is pure: a spec or HTML from the
// typed document; the fields were checked when the file was read. The page is
// viz/report_page.hpp, next in the flow.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/summary_document.hpp"
#include "traces/timeline.hpp"
#include "viz/gantt_chart.hpp"
#include "viz/report_data.hpp"

namespace traintwin {

/// The summary table (HTML): scenario, layout, pipeline split, iteration time, tokens/s(/GPU),
/// model TFLOPs/s/GPU, MFU, HFU, pipeline bubble, exposed communication, optimizer, what-if knobs
/// and the base run when there, peak memory against the GPU's, and cost sources.
std::string summary_table_html(const SummaryDocument& summary);

/// Stacked horizontal bars (ms): compute, exposed TP/CP/EP/PP/DP communication, pipeline bubble
/// and optimizer time, for the critical rank and for each pipeline stage (per_stage).
nlohmann::json time_breakdown_spec(const SummaryDocument& summary);

/// Stacked bars per pipeline stage of weights, gradients, optimizer state, activations and
/// embedding/logits (GiB), with a rule at the GPU's capacity (gpu_memory_bytes).
nlohmann::json memory_spec(const SummaryDocument& summary);

/// Horizontal bars of the busiest links' utilization, coloured by tier (GB in tooltips);
/// nullopt when the summary lists no link (e.g. an analytical estimate).
std::optional<nlohmann::json> links_spec(const SummaryDocument& summary);

/// Lines of the busiest links' utilization over the iteration (link_series); nullopt when there
/// is none (an analytical estimate, or no flow).
std::optional<nlohmann::json> link_series_spec(const SummaryDocument& summary);

/// An HTML table of link_tiers (links, GB mean/max, utilization mean/p99/max per tier) and the
/// hot links; "" when the summary has no link tier.
std::string link_tiers_html(const SummaryDocument& summary);

/// The sections of a simulation's report: summary table, time breakdown, Gantt chart (when
/// `timeline` is given; `timeline_origin`, its file, starts the Error gantt_chart() throws for a
/// rank outside the layout), memory per stage, links per tier, link series, busiest links (the
/// last three when the summary has them).
std::vector<ReportSection> simulation_sections(const SummaryDocument& summary,
                                               const std::optional<Timeline>& timeline,
                                               const std::string& timeline_origin,
                                               const GanttOptions& gantt = {});

}  // namespace traintwin
