#include "viz/gantt_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/rank_layout.hpp"
#include "viz/report_format.hpp"

namespace traintwin {
namespace {

using json = nlohmann::json;

/// The categories of timeline events, in legend order, and their colours ("wgrad": the W steps
/// of a zero-bubble schedule, traces/op_event.cpp).
const std::vector<std::string>& gantt_categories() {
  static const std::vector<std::string> c = {"forward", "backward",  "wgrad", "recompute",
                                             "comm",    "optimizer", "other"};
  return c;
}
const std::vector<std::string>& gantt_colors() {
  static const std::vector<std::string> c = {"#4c78a8", "#f58518", "#b279a2", "#e45756",
                                             "#72b7b2", "#54a24b", "#9d9d9d"};
  return c;
}

/// Sort position of a stream inside a rank, as traces/timeline.hpp orders threads.
int stream_order(const std::string& stream) {
  static const std::map<std::string, int> order = {{"compute", 0}, {"tp-comm", 1}, {"cp-comm", 2},
                                                   {"pp-comm", 3}, {"dp-comm", 4}, {"ep-comm", 5}};
  const auto it = order.find(stream);
  return it == order.end() ? 6 : it->second;
}

/// The integer arg `key` of an event (micro_batch, model_chunk: op_event() writes them), or -1
/// when the event has none (an op outside any micro-batch, or a trace from another tool).
int64_t int_arg(const TimelineEvent& e, const std::string& key) {
  const auto it = e.args.find(key);
  if (it == e.args.end()) return -1;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return -1;
  }
}

/// The phase arg of an event ("fwd", "bwd", "recompute", ...), or its category when it has none.
std::string phase_of(const TimelineEvent& e) {
  const auto it = e.args.find("phase");
  return it == e.args.end() ? e.category : it->second;
}

}  // namespace

GanttChart gantt_chart(const Timeline& timeline, const ReportLayout& layout,
                       const std::string& origin, const GanttOptions& options) {
  const RankLayout ranks(layout.tensor_model_parallel_size, layout.context_parallel_size,
                         layout.data_parallel_size, layout.pipeline_model_parallel_size,
                         layout.rank_order);
  GanttChart out;
  out.ops = timeline.events.size();
  auto stage_of = [&](int64_t rank) {
    if (rank < 0 || rank >= ranks.world_size()) {
      throw Error(
          fmt::format("{}: rank {} is outside the layout's {} ranks (TP {} x CP {} x "
                      "DP {} x PP {})",
                      origin, rank, ranks.world_size(), layout.tensor_model_parallel_size,
                      layout.context_parallel_size, layout.data_parallel_size,
                      layout.pipeline_model_parallel_size));
    }
    return ranks.coord(rank).pp;
  };

  // The events to draw, by index into timeline.events.
  std::vector<size_t> kept(timeline.events.size());
  for (size_t i = 0; i < kept.size(); ++i) kept[i] = i;
  if (kept.size() > options.max_bars) {
    out.compute_only = true;
    std::map<int64_t, int64_t> rank_of_stage;  // lowest traced rank with TP rank 0 per stage
    for (const TimelineEvent& e : timeline.events) {
      const int64_t stage = stage_of(e.rank);
      if (ranks.coord(e.rank).tp != 0) continue;
      auto [it, inserted] = rank_of_stage.emplace(stage, e.rank);
      if (!inserted) it->second = std::min(it->second, e.rank);
    }
    std::set<int64_t> lanes;
    for (const auto& [stage, rank] : rank_of_stage) lanes.insert(rank);
    kept.clear();
    for (size_t i = 0; i < timeline.events.size(); ++i) {
      const TimelineEvent& e = timeline.events[i];
      if (e.stream == "compute" && lanes.count(e.rank) != 0) kept.push_back(i);
    }
  }
  out.kept_ops = kept.size();

  // Bars: each kept op, or (when still too many) runs of consecutive ops of one block.
  struct Bar {
    size_t first;  // event index of the first op
    double start_s, end_s;
    size_t ops;
    double busy_s;
  };
  std::vector<Bar> bars;
  if (kept.size() > options.max_bars) {
    out.merged = true;
    std::map<std::pair<int64_t, std::string>, std::vector<size_t>> by_lane;
    for (size_t i : kept)
      by_lane[{timeline.events[i].rank, timeline.events[i].stream}].push_back(i);
    for (auto& [lane, idx] : by_lane) {
      std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
        return timeline.events[a].start_s < timeline.events[b].start_s;
      });
      auto block = [&](size_t i) {
        const TimelineEvent& e = timeline.events[i];
        return std::make_tuple(e.category, phase_of(e), int_arg(e, "micro_batch"),
                               int_arg(e, "model_chunk"));
      };
      for (size_t i : idx) {
        const TimelineEvent& e = timeline.events[i];
        if (!bars.empty() && bars.back().first != i &&
            timeline.events[bars.back().first].rank == e.rank &&
            timeline.events[bars.back().first].stream == e.stream &&
            block(bars.back().first) == block(i) && int_arg(e, "micro_batch") >= 0) {
          bars.back().end_s = std::max(bars.back().end_s, e.end_s);
          bars.back().ops += 1;
          bars.back().busy_s += e.end_s - e.start_s;
        } else {
          bars.push_back({i, e.start_s, e.end_s, 1, e.end_s - e.start_s});
        }
      }
    }
  } else {
    for (size_t i : kept) {
      const TimelineEvent& e = timeline.events[i];
      bars.push_back({i, e.start_s, e.end_s, 1, e.end_s - e.start_s});
    }
  }
  out.bars = bars.size();

  double t0 = 0, t1 = 0;
  if (!bars.empty()) {
    t0 = bars.front().start_s;
    t1 = bars.front().end_s;
    for (const Bar& b : bars) {
      t0 = std::min(t0, b.start_s);
      t1 = std::max(t1, b.end_s);
    }
  }
  const double span_s = std::max(t1 - t0, 1e-12);
  const std::set<std::string> known(gantt_categories().begin(), gantt_categories().end());

  std::map<int64_t, json> values_by_stage;  // pipeline stage -> its bars' data rows
  for (const Bar& b : bars) {
    const TimelineEvent& e = timeline.events[b.first];
    const int64_t stage = stage_of(e.rank);
    const int64_t mb = int_arg(e, "micro_batch");
    std::string name = e.name;
    if (b.ops > 1) {
      // "fwd mb3 chunk1 L0 qkv" merged with its block -> "fwd mb3 chunk1 (24 ops)".
      name = phase_of(e) + (mb >= 0 ? fmt::format(" mb{}", mb) : "");
      const int64_t chunk = int_arg(e, "model_chunk");
      if (chunk >= 0) name += fmt::format(" chunk{}", chunk);
      name += fmt::format(" ({} ops)", b.ops);
    }
    json row = {{"stage", stage},
                {"lane", fmt::format("rank {} {}", e.rank, e.stream)},
                {"lane_order", e.rank * 16 + stream_order(e.stream)},
                {"rank", e.rank},
                {"stream", e.stream},
                {"name", name},
                {"category", known.count(e.category) != 0 ? e.category : std::string("other")},
                {"micro_batch", mb >= 0 ? json(mb) : json(nullptr)},
                {"start_ms", (b.start_s - t0) * 1e3},
                {"end_ms", (b.end_s - t0) * 1e3},
                {"mid_ms", (b.start_s + b.end_s - 2 * t0) / 2 * 1e3},
                {"duration_ms", (b.end_s - b.start_s) * 1e3},
                {"busy_ms", b.busy_s * 1e3}};
    // The micro-batch number is drawn on compute bars wide enough for it (>= 0.6 % of the
    // iteration on a 1000-pixel axis: about 6 pixels).
    const bool wide = (b.end_s - b.start_s) / span_s >= 0.006;
    row["label"] = (mb >= 0 && wide && e.stream == "compute") ? std::to_string(mb) : "";
    // Communication details in one tooltip line ("" on compute ops, so no "undefined" shows).
    std::string comm;
    if (auto bytes = e.args.find("bytes"); bytes != e.args.end()) comm = bytes->second + " bytes";
    if (auto algo = e.args.find("algorithm"); algo != e.args.end()) {
      comm += (comm.empty() ? "" : ", ") + algo->second;
    }
    row["comm"] = comm;
    values_by_stage[stage].push_back(std::move(row));
  }

  json tooltip =
      json::array({{{"field", "name"}, {"title", "op"}},
                   {{"field", "micro_batch"}, {"title", "micro-batch"}},
                   {{"field", "lane"}, {"title", "rank / stream"}},
                   {{"field", "category"}},
                   {{"field", "start_ms"}, {"format", ".3f"}, {"title", "start (ms)"}},
                   {{"field", "duration_ms"}, {"format", ".3f"}, {"title", "duration (ms)"}}});
  if (out.merged) {
    tooltip.push_back({{"field", "busy_ms"}, {"format", ".3f"}, {"title", "busy (ms)"}});
  }
  tooltip.push_back({{"field", "comm"}, {"title", "bytes, algorithm"}});

  // One chart per pipeline stage (its own lanes), stacked on a shared time axis. A facet would
  // need independent y scales over two differently filtered sources, which Vega-Lite warns on.
  const json y = {{"field", "lane"},
                  {"type", "nominal"},
                  {"title", nullptr},
                  {"sort", {{"field", "lane_order"}, {"op", "min"}}}};
  json stages = json::array();
  const int64_t last_stage = values_by_stage.empty() ? 0 : values_by_stage.rbegin()->first;
  for (auto& [stage, values] : values_by_stage) {
    // The time axis is labelled under the last stage only; the others keep its grid.
    const json x_axis = stage == last_stage
                            ? json{{"title", "time in the iteration (ms)"}}
                            : json{{"labels", false}, {"ticks", false}, {"title", nullptr}};
    json bar_layer = {{"name", fmt::format("gantt_bars_stage{}", stage)},
                      {"mark", {{"type", "bar"}, {"tooltip", true}, {"height", {{"band", 0.8}}}}},
                      {"encoding",
                       {{"x",
                         {{"field", "start_ms"},
                          {"type", "quantitative"},
                          {"axis", x_axis},
                          {"scale", {{"domain", {0, span_s * 1e3}}, {"nice", false}}}}},
                        {"x2", {{"field", "end_ms"}}},
                        {"y", y},
                        {"color",
                         {{"field", "category"},
                          {"type", "nominal"},
                          {"title", nullptr},
                          {"scale", {{"domain", gantt_categories()}, {"range", gantt_colors()}}},
                          {"legend", {{"orient", "top"}, {"columns", 6}}}}},
                        {"tooltip", tooltip}}}};
    json label_layer = {{"name", fmt::format("gantt_labels_stage{}", stage)},
                        {"transform", json::array({{{"filter", "datum.label != ''"}}})},
                        {"mark",
                         {{"type", "text"},
                          {"fontSize", 9},
                          {"color", "white"},
                          {"align", "center"},
                          {"baseline", "middle"}}},
                        {"encoding",
                         {{"x", {{"field", "mid_ms"}, {"type", "quantitative"}}},
                          {"y", y},
                          {"text", {{"field", "label"}}}}}};
    stages.push_back(
        {{"title",
          {{"text", stage < static_cast<int64_t>(layout.layers_per_stage.size())
                        ? fmt::format("pipeline stage {} ({} layers)", stage,
                                      layout.layers_per_stage[static_cast<size_t>(stage)])
                        : fmt::format("pipeline stage {}", stage)},
           {"anchor", "start"},
           {"fontSize", 12}}},
         {"width", 1000},
         {"height", {{"step", 16}}},
         {"data", {{"values", std::move(values)}}},
         {"layer", {bar_layer, label_layer}}});
  }

  json spec = base_spec("Pipeline schedule of one iteration: a Gantt chart per pipeline stage");
  spec["vconcat"] = std::move(stages);
  spec["spacing"] = 6;
  out.spec = std::move(spec);
  return out;
}

}  // namespace traintwin
