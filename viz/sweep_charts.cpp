#include "viz/sweep_charts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "sim/scaling_study.hpp"
#include "viz/report_format.hpp"

namespace traintwin {
namespace {

using json = nlohmann::json;

/// "VPP 2, recompute selective, SP on, dist-opt on, DP 4": the dimensions a heatmap cell folds.
std::string folded_phrase(const SweepRecordConfiguration& c) {
  return fmt::format("VPP {}, recompute {}, SP {}, dist-opt {}, DP {}",
                     c.virtual_pipeline_model_parallel_size, to_string(c.recompute_granularity),
                     on_off(c.sequence_parallel), on_off(c.use_distributed_optimizer),
                     c.data_parallel_size);
}

}  // namespace

std::optional<json> sweep_heatmap_spec(const std::vector<SweepRecord>& sweep) {
  struct Cell {
    int64_t n = 0, n_oom = 0;
    std::optional<double> best;
    std::string best_config;
    int64_t best_rank = 0;
    std::optional<double> min_excess_bytes;
  };
  std::map<std::tuple<int64_t, int64_t, int64_t>, Cell> cells;  // (tp, pp, mbs)
  for (const SweepRecord& row : sweep) {
    if (row.status != SweepStatus::kRanked && row.status != SweepStatus::kOutOfMemory) continue;
    const SweepRecordConfiguration& c = row.configuration;
    Cell& cell =
        cells[{c.tensor_model_parallel_size, c.pipeline_model_parallel_size, c.micro_batch_size}];
    ++cell.n;
    if (row.status == SweepStatus::kOutOfMemory) {
      ++cell.n_oom;
      const double excess = row.excess_memory_bytes;
      cell.min_excess_bytes = std::min(cell.min_excess_bytes.value_or(excess), excess);
      continue;
    }
    // A ranked row has metrics (read_sweep_json refuses one without).
    const double tps = row.metrics ? row.metrics->summary.tokens_per_s_per_gpu : 0.0;
    if (!cell.best || tps > *cell.best) {
      cell.best = tps;
      cell.best_config = folded_phrase(c);
      cell.best_rank = row.rank;
    }
  }
  if (cells.empty()) return std::nullopt;

  // Labels are dark on the bright (high) end of viridis, white elsewhere.
  double lo = 0, hi = 0;
  bool first = true;
  for (const auto& [key, cell] : cells) {
    if (!cell.best) continue;
    lo = first ? *cell.best : std::min(lo, *cell.best);
    hi = first ? *cell.best : std::max(hi, *cell.best);
    first = false;
  }
  const double bright = lo + 0.6 * (hi - lo);
  json values = json::array();
  for (const auto& [key, cell] : cells) {
    const auto& [tp, pp, mbs] = key;
    const bool oom = !cell.best.has_value();
    json v = {{"TP", fmt::format("TP {}", tp)},
              {"tp", tp},
              {"PP", pp},
              {"micro_batch_size", mbs},
              {"status", oom ? "oom" : "ranked"},
              {"configurations", cell.n},
              {"oom_configurations", cell.n_oom}};
    if (oom) {
      v["label"] = "OOM";
      v["detail"] = cell.min_excess_bytes
                        ? fmt::format("every configuration OOM; smallest excess {}",
                                      format_gib(*cell.min_excess_bytes))
                        : std::string("every configuration OOM");
    } else {
      v["tokens_per_s_per_gpu"] = *cell.best;
      v["label"] = fmt::format("{:.0f}", *cell.best);
      v["detail"] = fmt::format("best: rank {}, {}", cell.best_rank, cell.best_config);
    }
    values.push_back(std::move(v));
  }

  const json x = {{"field", "micro_batch_size"},
                  {"type", "ordinal"},
                  {"title", "micro-batch size"},
                  {"axis", {{"labelAngle", 0}}}};
  const json y = {
      {"field", "PP"}, {"type", "ordinal"}, {"title", "PP size"}, {"sort", "descending"}};
  const json tooltip = json::array(
      {{{"field", "TP"}},
       {{"field", "PP"}, {"title", "PP"}},
       {{"field", "micro_batch_size"}, {"title", "micro-batch size"}},
       {{"field", "tokens_per_s_per_gpu"}, {"format", ".1f"}, {"title", "best tokens/s/GPU"}},
       {{"field", "detail"}},
       {{"field", "configurations"}},
       {{"field", "oom_configurations"}, {"title", "OOM"}}});
  json heat = {{"name", "heat_cells"},
               {"transform", json::array({{{"filter", "datum.status == 'ranked'"}}})},
               {"mark", {{"type", "rect"}, {"tooltip", true}}},
               {"encoding",
                {{"x", x},
                 {"y", y},
                 {"color",
                  {{"field", "tokens_per_s_per_gpu"},
                   {"type", "quantitative"},
                   {"title", "tokens/s/GPU"},
                   {"scale", {{"scheme", "viridis"}}}}},
                 {"tooltip", tooltip}}}};
  json oom = {{"name", "oom_cells"},
              {"transform", json::array({{{"filter", "datum.status == 'oom'"}}})},
              {"mark",
               {{"type", "rect"},
                {"tooltip", true},
                {"fill", "#d9d9d9"},
                {"stroke", "#b22222"},
                {"strokeWidth", 1.5},
                {"strokeDash", {4, 3}}}},
              {"encoding", {{"x", x}, {"y", y}, {"tooltip", tooltip}}}};
  json labels = {
      {"name", "heat_labels"},
      {"mark", {{"type", "text"}, {"fontSize", 11}}},
      {"encoding",
       {{"x", x},
        {"y", y},
        {"text", {{"field", "label"}}},
        {"color",
         {{"condition",
           json::array({{{"test", "datum.status == 'oom'"}, {"value", "#b22222"}},
                        {{"test", fmt::format("datum.tokens_per_s_per_gpu > {}", bright)},
                         {"value", "#222222"}}})},
          {"value", "white"}}}}}};
  json spec = base_spec("Best tokens/s/GPU over (PP, micro-batch size), one heatmap per TP size");
  spec["data"] = {{"values", values}};
  spec["facet"] = {{"column",
                    {{"field", "TP"},
                     {"type", "nominal"},
                     {"title", nullptr},
                     {"sort", {{"field", "tp"}, {"op", "min"}}},
                     {"header", {{"labelFontWeight", "bold"}, {"labelFontSize", 13}}}}}};
  spec["spec"] = {
      {"width", {{"step", 64}}}, {"height", {{"step", 40}}}, {"layer", {heat, oom, labels}}};
  return spec;
}

std::optional<json> sweep_scaling_spec(const std::vector<SweepRecord>& sweep) {
  if (!is_scaling_study(sweep)) return std::nullopt;
  std::set<std::string> best_layouts;
  for (const ScalingPoint& p : best_per_gpu_count(sweep)) {
    best_layouts.insert(scaling_layout_label(sweep[p.record].configuration));
  }
  json values = json::array();
  for (const SweepRecord& r : sweep) {
    if (r.status != SweepStatus::kRanked || !r.metrics) continue;
    const std::string layout = scaling_layout_label(r.configuration);
    if (!best_layouts.contains(layout)) continue;
    const SimulationSummary& m = r.metrics->summary;
    for (const auto& [metric, value] :
         {std::pair<const char*, double>{"tokens/s/GPU", m.tokens_per_s_per_gpu},
          {"MFU (%)", 100 * m.mfu},
          {"iteration time (s)", m.iteration_time_s}}) {
      values.push_back({{"GPUs", r.configuration.num_gpus},
                        {"layout", layout},
                        {"metric", metric},
                        {"value", value},
                        {"DP", r.configuration.data_parallel_size},
                        {"global_batch_size", r.configuration.global_batch_size}});
    }
  }
  json spec = base_spec("tokens/s/GPU, MFU and iteration time against the GPU count");
  spec["data"] = {{"values", values}};
  spec["facet"] = {{"column",
                    {{"field", "metric"},
                     {"type", "nominal"},
                     {"title", nullptr},
                     {"sort", json::array({"tokens/s/GPU", "MFU (%)", "iteration time (s)"})},
                     {"header", {{"labelFontWeight", "bold"}, {"labelFontSize", 13}}}}}};
  spec["resolve"] = {{"scale", {{"y", "independent"}}}};
  spec["spec"] = {
      {"width", 260},
      {"height", 200},
      {"layer", json::array({{{"name", "scaling_lines"},
                              {"mark", {{"type", "line"}, {"point", true}, {"tooltip", true}}},
                              {"encoding",
                               {{"x",
                                 {{"field", "GPUs"},
                                  {"type", "quantitative"},
                                  {"scale", {{"type", "log"}, {"base", 2}}},
                                  {"axis", {{"title", "GPUs"}}}}},
                                {"y",
                                 {{"field", "value"},
                                  {"type", "quantitative"},
                                  {"title", nullptr},
                                  {"scale", {{"zero", false}}}}},
                                {"color",
                                 {{"field", "layout"},
                                  {"type", "nominal"},
                                  {"legend", {{"orient", "bottom"}, {"columns", 1}}}}},
                                {"tooltip", json::array({{{"field", "GPUs"}},
                                                         {{"field", "metric"}},
                                                         {{"field", "value"}, {"format", ".4~f"}},
                                                         {{"field", "layout"}},
                                                         {{"field", "DP"}},
                                                         {{"field", "global_batch_size"},
                                                          {"title", "global batch"}}})}}}}})}};
  return spec;
}

std::string scaling_table_html(const std::vector<SweepRecord>& sweep) {
  std::string html =
      "<table class=\"ranked\">\n<tr><th>GPUs</th><th>global batch</th><th>iteration time</th>"
      "<th>tokens/s</th><th>tokens/s/GPU</th><th>MFU</th><th>days / 1T tokens</th>"
      "<th>GPU-hours / 1T tokens</th><th>layout</th></tr>\n";
  for (const ScalingPoint& p : best_per_gpu_count(sweep)) {
    const SweepRecord& r = sweep[p.record];
    const SimulationSummary m = r.metrics ? r.metrics->summary : SimulationSummary{};
    const TrainingTime t = training_time(1e12, m.tokens_per_s, p.num_gpus);
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.0f}</td><td>{:.1f}</td><td>{}</td>"
        "<td>{:.1f}</td><td>{:.0f}</td><td>{}</td></tr>\n",
        p.num_gpus, r.configuration.global_batch_size, format_seconds(m.iteration_time_s),
        m.tokens_per_s, m.tokens_per_s_per_gpu, format_percent(m.mfu), t.days, t.gpu_hours,
        escape_html(fmt::format("{} DP {}", scaling_layout_label(r.configuration),
                                r.configuration.data_parallel_size)));
  }
  return html + "</table>\n";
}

std::string sweep_table_html(const std::vector<SweepRecord>& sweep, size_t max_rows) {
  std::vector<std::pair<int64_t, size_t>> ranked;  // (rank, row index)
  std::map<std::string, int64_t> other;
  for (size_t i = 0; i < sweep.size(); ++i) {
    if (sweep[i].status == SweepStatus::kRanked) {
      ranked.emplace_back(sweep[i].rank, i);
    } else {
      ++other[to_string(sweep[i].status)];
    }
  }
  std::stable_sort(ranked.begin(), ranked.end());
  // The columns of the dimensions the sweep varied, as its terminal table shows them: GPUs,
  // schedule, sharding (zero_label) and the searched pipeline split (--pipeline-split).
  const auto varies = [&](auto&& field) {
    for (const auto& [rank, i] : ranked) {
      if (field(sweep[i].configuration) != field(sweep[ranked.front().second].configuration)) {
        return true;
      }
    }
    return false;
  };
  const bool show_gpus = varies([](const SweepRecordConfiguration& c) { return c.num_gpus; });
  const bool show_schedule =
      varies([](const SweepRecordConfiguration& c) { return c.pipeline_schedule; });
  const bool show_zero = varies([](const SweepRecordConfiguration& c) { return zero_label(c); });
  const bool show_split = std::any_of(ranked.begin(), ranked.end(), [&](const auto& r) {
    return !sweep[r.second].configuration.pipeline_model_parallel_layout.empty();
  });
  std::string html = "<table class=\"ranked\">\n<tr><th>rank</th>";
  if (show_gpus) html += "<th>GPUs</th>";
  html +=
      "<th>TP</th><th>PP</th><th>VPP</th><th>DP</th><th>micro-batch</th><th>recompute</th>"
      "<th>SP</th><th>dist-opt</th>";
  if (show_schedule) html += "<th>schedule</th>";
  if (show_zero) html += "<th>ZeRO</th>";
  html +=
      "<th>tokens/s/GPU</th><th>MFU</th><th>iteration time</th><th>bubble</th>"
      "<th>peak memory</th><th>memory</th>";
  if (show_split) html += "<th>pipeline layout</th>";
  html += "</tr>\n";
  for (size_t k = 0; k < ranked.size() && k < max_rows; ++k) {
    const SweepRecord& row = sweep[ranked[k].second];
    const SweepRecordConfiguration& c = row.configuration;
    const SimulationSummary m = row.metrics ? row.metrics->summary : SimulationSummary{};
    html += fmt::format("<tr><td>{}</td>", ranked[k].first);
    if (show_gpus) html += fmt::format("<td>{}</td>", c.num_gpus);
    html += fmt::format(
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        c.tensor_model_parallel_size, c.pipeline_model_parallel_size,
        c.virtual_pipeline_model_parallel_size, c.data_parallel_size, c.micro_batch_size,
        to_string(c.recompute_granularity), on_off(c.sequence_parallel),
        on_off(c.use_distributed_optimizer));
    if (show_schedule) html += fmt::format("<td>{}</td>", to_string(c.pipeline_schedule));
    if (show_zero) html += fmt::format("<td>{}</td>", escape_html(zero_label(c)));
    html += fmt::format(
        "<td>{:.1f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        m.tokens_per_s_per_gpu, format_percent(m.mfu), format_seconds(m.iteration_time_s),
        format_percent(m.pipeline_bubble_fraction), format_gib(row.peak_memory_bytes),
        row.memory_at_risk ? "at risk" : "fits");
    if (show_split) {
      html += fmt::format("<td>{}</td>", c.pipeline_model_parallel_layout.empty()
                                             ? "the scenario's"
                                             : escape_html(c.pipeline_model_parallel_layout));
    }
    html += "</tr>\n";
  }
  html += "</table>\n";
  std::string counts = fmt::format("{} ranked configuration(s)", ranked.size());
  if (ranked.size() > max_rows) counts += fmt::format(" (the first {} shown)", max_rows);
  for (const auto& [status, n] : other) counts += fmt::format(", {} {}", n, status);
  return fmt::format("<p class=\"counts\">{}.</p>\n", escape_html(counts)) + html;
}

std::vector<ReportSection> sweep_sections(const std::vector<SweepRecord>& sweep) {
  std::vector<ReportSection> out;
  if (auto heat = sweep_heatmap_spec(sweep)) {
    out.push_back({"heatmap", "Sweep: tokens/s/GPU",
                   "Best tokens/s/GPU of each (PP, micro-batch size) per TP size over the other "
                   "swept dimensions; grey dashed cells marked OOM do not fit in GPU memory.",
                   *heat, ""});
  }
  if (auto scaling = sweep_scaling_spec(sweep)) {
    out.push_back({"scaling", "Scaling: throughput, MFU and iteration time against GPUs",
                   "Each line is a layout that is the best at some GPU count, at every GPU count "
                   "where it ranked (DP and the global batch follow the GPU count).",
                   *scaling, ""});
    out.push_back({"scaling-table", "Scaling: the best layout per GPU count",
                   "Days and GPU-hours to train 10^12 tokens at each count's best throughput (a "
                   "budget of B trillion tokens takes B times as long; sweep --train-tokens "
                   "prints them for a budget).",
                   std::nullopt, scaling_table_html(sweep)});
  }
  out.push_back({"ranked", "Sweep: ranked configurations", "Ranked by tokens/s.", std::nullopt,
                 sweep_table_html(sweep)});
  return out;
}

}  // namespace traintwin
