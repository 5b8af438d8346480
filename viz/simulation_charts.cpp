#include "viz/simulation_charts.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "viz/report_format.hpp"

namespace traintwin {
namespace {

using json = nlohmann::json;

/// "transformer layers per stage (model chunks joined by +): 1+2 / 2+1 (even split)": each
/// stage's layers and how the split was asked for; "" when the layout has no split.
std::string pipeline_split_text(const SummaryLayout& layout) {
  if (layout.layers_per_model_chunk.empty()) return "";
  std::vector<std::string> stages;
  for (const std::vector<int64_t>& chunks : layout.layers_per_model_chunk) {
    stages.push_back(fmt::format("{}", fmt::join(chunks, "+")));
  }
  std::vector<std::string> how;
  if (layout.decoder_first_pipeline_num_layers) {
    how.push_back(fmt::format("decoder_first_pipeline_num_layers {}",
                              *layout.decoder_first_pipeline_num_layers));
  }
  if (layout.decoder_last_pipeline_num_layers) {
    how.push_back(fmt::format("decoder_last_pipeline_num_layers {}",
                              *layout.decoder_last_pipeline_num_layers));
  }
  if (layout.account_for_embedding_in_pipeline_split) {
    how.emplace_back("embedding counted as a layer");
  }
  if (layout.account_for_loss_in_pipeline_split) how.emplace_back("loss counted as a layer");
  return fmt::format(
      "transformer layers per stage (model chunks joined by +): {} ({})", fmt::join(stages, " / "),
      how.empty() ? std::string("even split") : fmt::format("{}", fmt::join(how, ", ")));
}

}  // namespace

std::string summary_table_html(const SummaryDocument& d) {
  const SummaryLayout& layout = d.layout;
  const SimulationSummary& m = d.summary;
  std::vector<std::pair<std::string, std::string>> rows;
  rows.reserve(20);  // also keeps GCC 12's -Warray-bounds false positive on the first insert away
  rows.emplace_back("scenario", d.scenario);
  rows.emplace_back("GPUs", fmt::format("{} x {}", d.num_gpus, d.gpu));
  rows.emplace_back(
      "layout",
      fmt::format("TP {} x CP {} x PP {} x DP {}{}, VPP {}, SP {}",
                  layout.tensor_model_parallel_size, layout.context_parallel_size,
                  layout.pipeline_model_parallel_size, layout.data_parallel_size,
                  layout.experts ? fmt::format(" (experts: EP {} x ETP {} x expert DP {})",
                                               layout.experts->model_parallel_size,
                                               layout.experts->tensor_parallel_size,
                                               layout.experts->data_parallel_size)
                                 : "",
                  layout.virtual_pipeline_model_parallel_size, on_off(layout.sequence_parallel)));
  rows.emplace_back("batch",
                    fmt::format("micro-batch size {}, global batch size {}, {} "
                                "micro-batches, recompute {}",
                                layout.micro_batch_size, layout.global_batch_size,
                                layout.num_micro_batches, to_string(layout.recompute_granularity)));
  if (const std::string split = pipeline_split_text(layout); !split.empty()) {
    rows.emplace_back("pipeline split", split);
  }
  rows.emplace_back("iteration time", format_seconds(m.iteration_time_s));
  rows.emplace_back("tokens/s", fmt::format("{:.0f}", m.tokens_per_s));
  rows.emplace_back("tokens/s/GPU", fmt::format("{:.1f}", m.tokens_per_s_per_gpu));
  rows.emplace_back("model TFLOPs/s/GPU", fmt::format("{:.1f}", m.model_tflops_per_gpu));
  rows.emplace_back("MFU", format_percent(m.mfu));
  rows.emplace_back("HFU", format_percent(m.hfu));
  rows.emplace_back("pipeline bubble", format_percent(m.pipeline_bubble_fraction));
  rows.emplace_back("compute (critical rank)", format_seconds(m.compute_s));
  rows.emplace_back("exposed TP / CP / EP / PP / DP comm",
                    fmt::format("{} / {} / {} / {} / {}", format_seconds(m.exposed_tp_s),
                                format_seconds(m.exposed_cp_s), format_seconds(m.exposed_ep_s),
                                format_seconds(m.exposed_pp_s), format_seconds(m.exposed_dp_s)));
  rows.emplace_back("sync wait (late peers, critical rank)", format_seconds(m.sync_wait_s));
  if (!d.late_peers.empty()) {
    std::string who;
    for (const LatePeer& p : d.late_peers) {
      who += fmt::format("{}rank {} ({}) {}, the largest wait at {}", who.empty() ? "" : ", ",
                         p.rank, to_string(p.group), format_seconds(p.wait_s), p.op);
    }
    rows.emplace_back("late peers", who);
  }
  rows.emplace_back("optimizer", format_seconds(m.optimizer_s));
  // The knobs as compact JSON with sorted keys (nlohmann::json sorts them).
  if (d.what_if) rows.emplace_back("what-if", json(what_if_json(*d.what_if)).dump());
  if (d.base && d.delta_vs_base) {
    rows.emplace_back("base run (no what-if)",
                      fmt::format("{} per iteration, {:.1f} tokens/s/GPU, MFU {}",
                                  format_seconds(d.base->iteration_time_s),
                                  d.base->tokens_per_s_per_gpu, format_percent(d.base->mfu)));
    rows.emplace_back(
        "delta vs base",
        fmt::format("iteration time {:+.1f} %, tokens/s {:+.1f} %, exposed comm {:+.4f} s",
                    100 * d.delta_vs_base->iteration_time_relative,
                    100 * d.delta_vs_base->tokens_per_s_relative,
                    d.delta_vs_base->exposed_comm_delta_s));
  }
  const double peak = m.peak_memory_bytes;
  const double cap = d.gpu_memory_bytes;
  // The summary's verdict counts each stage's reserve on its own GPUs (sim/summary.hpp); a
  // summary.json from before it was recorded has only fits_in_memory.
  const std::string verdict =
      m.memory_verdict.empty()
          ? std::string(m.fits_in_memory ? "fits" : "does not fit")
          : fmt::format("{}, with a reserve of {} for the CUDA context, NCCL buffers, cuBLAS "
                        "workspaces and fragmentation",
                        m.memory_verdict, format_gib(m.memory_reserve_bytes));
  rows.emplace_back("peak memory / GPU memory",
                    fmt::format("{} / {} ({})", format_gib(peak), format_gib(cap), verdict));
  std::string sources;
  for (const auto& [src, frac] : m.cost_sources) {
    sources += fmt::format("{}{} {}", sources.empty() ? "" : ", ", src, format_percent(frac));
  }
  rows.emplace_back("compute time by cost source", sources);
  return key_value_table(rows, "summary");
}

json time_breakdown_spec(const SummaryDocument& d) {
  static const std::vector<std::pair<double TimeBreakdown::*, std::string>> parts = {
      {&TimeBreakdown::compute_s, "compute"},
      {&TimeBreakdown::exposed_tp_s, "exposed TP comm"},
      {&TimeBreakdown::exposed_cp_s, "exposed CP comm"},
      {&TimeBreakdown::exposed_ep_s, "exposed EP comm"},
      {&TimeBreakdown::exposed_pp_s, "exposed PP comm"},
      {&TimeBreakdown::exposed_dp_s, "exposed DP comm"},
      {&TimeBreakdown::bubble_s, "pipeline bubble"},
      {&TimeBreakdown::sync_wait_s, "sync wait (late peer)"},
      {&TimeBreakdown::optimizer_s, "optimizer"}};
  json values = json::array();
  auto add = [&](const TimeBreakdown& b, const std::string& row, int order) {
    for (size_t i = 0; i < parts.size(); ++i) {
      values.push_back({{"row", row},
                        {"row_order", order},
                        {"part", parts[i].second},
                        {"part_order", i},
                        {"ms", b.*parts[i].first * 1e3}});
    }
  };
  add(d.critical_rank, fmt::format("critical path (rank {})", d.critical_rank.rank), 0);
  for (size_t i = 0; i < d.per_stage.size(); ++i) {
    add(d.per_stage[i], fmt::format("stage {} (rank {})", i, d.per_stage[i].rank),
        static_cast<int>(i) + 1);
  }
  std::vector<std::string> domain;
  for (const auto& p : parts) domain.push_back(p.second);
  json spec = base_spec("Time breakdown of one iteration");
  spec["width"] = 900;
  spec["height"] = {{"step", 26}};
  spec["data"] = {{"values", values}};
  spec["mark"] = {{"type", "bar"}, {"tooltip", true}};
  spec["name"] = "breakdown";
  spec["encoding"] = {
      {"y",
       {{"field", "row"},
        {"type", "nominal"},
        {"title", nullptr},
        {"sort", {{"field", "row_order"}, {"op", "min"}}}}},
      {"x",
       {{"field", "ms"},
        {"type", "quantitative"},
        {"stack", "zero"},
        {"title", "time in the iteration (ms)"}}},
      {"color",
       {{"field", "part"},
        {"type", "nominal"},
        {"title", nullptr},
        {"scale",
         {{"domain", domain},
          // One colour per part (nine: the six before repeated, so the bubble read as compute
          // and the sync wait as TP communication).
          {"range", {"#4c78a8", "#f58518", "#72b7b2", "#b279a2", "#bab0ac", "#54a24b",
                     "#e45756", "#eeca3b", "#9d755d"}}}},
        {"legend", {{"orient", "bottom"}, {"columns", 5}}}}},
      {"order", {{"field", "part_order"}, {"type", "quantitative"}}},
      {"tooltip", json::array({{{"field", "row"}, {"title", "rank"}},
                               {{"field", "part"}},
                               {{"field", "ms"}, {"format", ".3f"}, {"title", "ms"}}})}};
  return spec;
}

json memory_spec(const SummaryDocument& d) {
  static const std::vector<std::pair<double StageMemory::*, std::string>> parts = {
      {&StageMemory::weights_bytes, "weights"},
      {&StageMemory::gradients_bytes, "gradients"},
      {&StageMemory::optimizer_bytes, "optimizer state"},
      {&StageMemory::activations_bytes, "activations"},
      {&StageMemory::embedding_and_logits_bytes, "embedding and logits"}};
  const std::vector<StageMemory>& stages = d.memory_per_stage;
  const double capacity = d.gpu_memory_bytes;
  json values = json::array();
  for (const StageMemory& st : stages) {
    const double total = st.total_bytes();
    // The stage's transformer layers in its label (they differ under an uneven split).
    const std::string label = fmt::format("stage {} ({} layers)", st.pp_rank, st.layers);
    for (size_t k = 0; k < parts.size(); ++k) {
      values.push_back({{"stage", label},
                        {"stage_order", st.pp_rank},
                        {"part", parts[k].second},
                        {"part_order", k},
                        {"GiB", st.*parts[k].first / kGiB},
                        {"total_GiB", total / kGiB}});
    }
  }
  std::vector<std::string> domain;
  for (const auto& p : parts) domain.push_back(p.second);
  json bars = {
      {"name", "memory_bars"},
      {"mark", {{"type", "bar"}, {"tooltip", true}}},
      {"encoding",
       {{"x",
         {{"field", "stage"},
          {"type", "nominal"},
          {"title", "pipeline stage"},
          {"sort", {{"field", "stage_order"}, {"op", "min"}}},
          // Slanted: "stage 12 (10 layers)" is wider than a stage's bar.
          {"axis", {{"labelAngle", -30}}}}},
        {"y",
         {{"field", "GiB"},
          {"type", "quantitative"},
          {"stack", "zero"},
          {"title", "memory per GPU (GiB)"}}},
        {"color",
         {{"field", "part"},
          {"type", "nominal"},
          {"title", nullptr},
          {"scale", {{"domain", domain}}},
          {"legend", {{"orient", "bottom"}}}}},
        {"order", {{"field", "part_order"}, {"type", "quantitative"}}},
        {"tooltip",
         json::array(
             {{{"field", "stage"}},
              {{"field", "part"}},
              {{"field", "GiB"}, {"format", ".2f"}},
              {{"field", "total_GiB"}, {"format", ".2f"}, {"title", "stage total GiB"}}})}}}};
  const std::string cap_label = fmt::format("GPU memory {:.1f} GiB", capacity / kGiB);
  json rule = {
      {"name", "memory_capacity"},
      {"data", {{"values", json::array({{{"GiB", capacity / kGiB}, {"label", cap_label}}})}}},
      {"mark",
       {{"type", "rule"}, {"color", "#d62728"}, {"strokeDash", {6, 4}}, {"strokeWidth", 2}}},
      {"encoding", {{"y", {{"field", "GiB"}, {"type", "quantitative"}}}}}};
  json label = {
      {"name", "memory_capacity_label"},
      {"data", rule["data"]},
      {"mark",
       {{"type", "text"},
        {"color", "#d62728"},
        {"align", "left"},
        {"baseline", "bottom"},
        {"x", 4},
        {"dy", -2}}},
      {"encoding",
       {{"y", {{"field", "GiB"}, {"type", "quantitative"}}}, {"text", {{"field", "label"}}}}}};
  json spec = base_spec("Memory per pipeline stage against the GPU's capacity");
  spec["width"] = {{"step", std::max<int64_t>(40, 600 / std::max<int64_t>(1, stages.size()))}};
  spec["height"] = 320;
  spec["data"] = {{"values", values}};
  spec["layer"] = {bars, rule, label};
  return spec;
}

std::optional<json> links_spec(const SummaryDocument& d) {
  const std::vector<LinkLoad>& links = d.busiest_links;
  if (links.empty()) return std::nullopt;
  json values = json::array();
  for (size_t i = 0; i < links.size(); ++i) {
    values.push_back({{"link", links[i].name},
                      {"order", i},
                      {"tier", links[i].tier},
                      {"GB", links[i].bytes / 1e9},
                      {"utilization", links[i].utilization}});
  }
  json spec = base_spec("Busiest links: utilization over the iteration");
  spec["width"] = 700;
  spec["height"] = {{"step", 20}};
  spec["data"] = {{"values", values}};
  spec["name"] = "links";
  spec["mark"] = {{"type", "bar"}, {"tooltip", true}};
  spec["encoding"] = {
      {"y",
       {{"field", "link"},
        {"type", "nominal"},
        {"title", nullptr},
        {"sort", {{"field", "order"}, {"op", "min"}}}}},
      {"x",
       {{"field", "utilization"},
        {"type", "quantitative"},
        {"axis", {{"format", "%"}}},
        {"title", "utilization (busy fraction of the iteration)"}}},
      {"color", {{"field", "tier"}, {"type", "nominal"}, {"legend", {{"orient", "bottom"}}}}},
      {"tooltip", json::array({{{"field", "link"}},
                               {{"field", "tier"}},
                               {{"field", "GB"}, {"format", ".3f"}, {"title", "GB moved"}},
                               {{"field", "utilization"}, {"format", ".1%"}}})}};
  return spec;
}

std::optional<json> link_series_spec(const SummaryDocument& d) {
  if (d.link_series.empty()) return std::nullopt;
  json values = json::array();
  for (const LinkSeries& series : d.link_series) {
    for (size_t b = 0; b < series.utilization.size(); ++b) {
      values.push_back({{"link", series.name},
                        {"tier", series.tier},
                        {"time_ms", (static_cast<double>(b) + 0.5) * series.bin_s * 1e3},
                        {"utilization", series.utilization[b]}});
    }
  }
  json spec = base_spec("Utilization of the busiest links over the iteration");
  spec["width"] = 700;
  spec["height"] = 220;
  spec["data"] = {{"values", values}};
  spec["name"] = "link_series";
  spec["mark"] = {{"type", "line"}, {"interpolate", "step-after"}, {"tooltip", true}};
  spec["encoding"] = {
      {"x",
       {{"field", "time_ms"}, {"type", "quantitative"}, {"title", "time in the iteration (ms)"}}},
      {"y",
       {{"field", "utilization"},
        {"type", "quantitative"},
        {"axis", {{"format", "%"}}},
        {"title", "utilization (mean over each 1 % of the iteration)"}}},
      {"color", {{"field", "link"}, {"type", "nominal"}, {"legend", {{"orient", "bottom"}}}}},
      {"tooltip", json::array({{{"field", "link"}},
                               {{"field", "tier"}},
                               {{"field", "time_ms"}, {"format", ".1f"}},
                               {{"field", "utilization"}, {"format", ".1%"}}})}};
  return spec;
}

std::string link_tiers_html(const SummaryDocument& d) {
  if (d.link_tiers.empty()) return "";
  std::string html =
      "<table class=\"ranked\">\n<tr><th>tier</th><th>links</th><th>GB mean</th><th>GB max</th>"
      "<th>utilization mean</th><th>p99</th><th>max</th></tr>\n";
  for (const TierTraffic& t : d.link_tiers) {
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{}</td><td>{}</td><td>{}</"
        "td></tr>\n",
        escape_html(t.tier), t.links, t.bytes_mean / 1e9, t.bytes_max / 1e9,
        format_percent(t.utilization_mean), format_percent(t.utilization_p99),
        format_percent(t.utilization_max));
  }
  html += "</table>\n";
  if (d.hot_links.empty()) {
    html += "<p>No hot link: every link is below twice its tier's mean utilization.</p>\n";
  } else {
    html += "<p>Hot links (at least twice their tier's mean utilization):</p>\n<ul>\n";
    for (const LinkLoad& l : d.hot_links) {
      html +=
          fmt::format("<li>{} ({}): {} busy, {:.1f}x its tier's mean</li>\n", escape_html(l.name),
                      escape_html(l.tier), format_percent(l.utilization), l.vs_tier_mean);
    }
    html += "</ul>\n";
  }
  return html;
}

std::vector<ReportSection> simulation_sections(const SummaryDocument& summary,
                                               const std::optional<Timeline>& timeline,
                                               const std::string& timeline_origin,
                                               const GanttOptions& gantt) {
  std::vector<ReportSection> out;
  out.push_back({"summary", "Summary", "One training iteration, replayed.", std::nullopt,
                 summary_table_html(summary)});
  out.push_back({"breakdown", "Time breakdown",
                 "Where the iteration's time goes on the critical rank and on each pipeline "
                 "stage: compute, communication not hidden behind compute, pipeline bubble, "
                 "optimizer step.",
                 time_breakdown_spec(summary), ""});
  if (timeline) {
    const GanttChart g =
        gantt_chart(*timeline, report_layout(summary.layout), timeline_origin, gantt);
    std::string note = fmt::format("{} op(s) of the traced ranks", g.ops);
    if (g.compute_only) {
      note += fmt::format(
          "; more than {} bars, so only the compute stream of TP rank 0 of each "
          "stage is drawn ({} ops)",
          gantt.max_bars, g.kept_ops);
    }
    if (g.merged) {
      note += fmt::format(", merged into {} micro-batch blocks", g.bars);
    } else {
      note += fmt::format(", one bar each ({} bars)", g.bars);
    }
    note += ". Numbers on bars are micro-batches; hover for the op.";
    out.push_back({"gantt", "Pipeline schedule", note, g.spec, ""});
  }
  out.push_back({"memory", "Memory per pipeline stage",
                 "Per GPU of each stage (activations at the schedule's in-flight peak); the "
                 "red rule is the GPU's memory.",
                 memory_spec(summary), ""});
  const std::string tiers = link_tiers_html(summary);
  if (!tiers.empty()) {
    out.push_back({"link-tiers", "Links per tier",
                   "Every link of each tier, idle ones included (flows only: collectives inside "
                   "a node take closed forms and are not counted on NVLink links).",
                   std::nullopt, tiers});
  }
  if (auto series = link_series_spec(summary)) {
    out.push_back({"link-series", "Busiest links over the iteration",
                   "Utilization of the five busiest links in 100 time bins (each flow's bytes "
                   "spread evenly over its lifetime).",
                   *series, ""});
  }
  if (auto links = links_spec(summary)) {
    out.push_back({"links", "Busiest links",
                   "The most loaded links of the simulated network over the iteration.", *links,
                   ""});
  }
  return out;
}

}  // namespace traintwin
