// The sweep's part of the report, from the typed rows of sweep.json (SweepRecord, read by
// viz/report_data.hpp before this in the flow): heatmaps of the best tokens/s/GPU over
// (PP, micro-batch size) per TP size, for a scaling study (sim/scaling_study.hpp) tokens/s/GPU,
// MFU and iteration time against GPUs with the time to train a trillion tokens, the ranked
// table, and the sections they make. Pure functions of the records; the page is
// viz/report_page.hpp, next in the flow.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/sweep_record.hpp"
#include "viz/report_data.hpp"

namespace traintwin {

/// Heatmaps of the best tokens/s/GPU over (PP, micro-batch size), one per TP size; other
/// dimensions (VPP, recompute, SP, distributed optimizer, DP) are folded into the cell (its best
/// ranked configuration; the tooltip names it). A cell where every configuration is OOM is drawn
/// grey with "OOM" and the smallest excess (marks "heat_cells", "oom_cells", "heat_labels");
/// invalid and error rows are left out. nullopt when no row is ranked or OOM.
std::optional<nlohmann::json> sweep_heatmap_spec(const std::vector<SweepRecord>& sweep);

/// A scaling study's charts: tokens/s/GPU, MFU (%) and iteration time (s) against the GPU
/// count (log2 axis), one line per layout that is the best at some GPU count (all its ranked
/// GPU counts; marks "scaling_lines"); nullopt unless is_scaling_study(sweep).
std::optional<nlohmann::json> sweep_scaling_spec(const std::vector<SweepRecord>& sweep);

/// A scaling study's table (HTML): per GPU count its best layout, global batch, iteration
/// time, tokens/s, tokens/s/GPU, MFU, and the days and GPU-hours to train 10^12 tokens at that
/// throughput (training_time(); a budget of B trillion tokens takes B times as long).
std::string scaling_table_html(const std::vector<SweepRecord>& sweep);

/// The ranked table (HTML) of a sweep: the first `max_rows` ranked configurations with their
/// layout and tokens/s/GPU, MFU, iteration time, bubble, peak memory and its verdict ("fits" or
/// "at risk"), after a count of the ranked rows and of the OOM, invalid and error ones. Columns
/// for the GPUs, the schedule and the sharding (zero_label) when the ranked rows differ in them,
/// and the pipeline layout when some row has a searched split (sweep --pipeline-split).
std::string sweep_table_html(const std::vector<SweepRecord>& sweep, std::size_t max_rows = 50);

/// The sections of a sweep's report: heatmaps (when there are any), the scaling charts and table
/// (a scaling study only) and the ranked table.
std::vector<ReportSection> sweep_sections(const std::vector<SweepRecord>& sweep);

}  // namespace traintwin
