#include "viz/report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <tuple>
#include <utility>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/posix_file.hpp"
#include "core/rank_layout.hpp"

namespace traintwin {
namespace {

using json = nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// ----- reading JSON with context ----------------------------------------------------------------

/// j[key], or Error "origin: missing key 'path.key'".
const json& at(const json& j, const std::string& key, const std::string& origin,
               const std::string& path = "") {
  const std::string where = path.empty() ? key : path + "." + key;
  if (!j.is_object()) {
    throw Error(fmt::format("{}: '{}' is not an object", origin, path.empty() ? "(top)" : path));
  }
  const auto it = j.find(key);
  if (it == j.end()) throw Error(fmt::format("{}: missing key '{}'", origin, where));
  return *it;
}

double number(const json& j, const std::string& key, const std::string& origin,
              const std::string& path = "") {
  const json& v = at(j, key, origin, path);
  if (!v.is_number()) {
    throw Error(fmt::format("{}: '{}' must be a number, got {}", origin,
                            path.empty() ? key : path + "." + key, v.dump()));
  }
  return v.get<double>();
}

int64_t integer(const json& j, const std::string& key, const std::string& origin,
                const std::string& path = "") {
  const json& v = at(j, key, origin, path);
  if (!v.is_number_integer()) {
    throw Error(fmt::format("{}: '{}' must be an integer, got {}", origin,
                            path.empty() ? key : path + "." + key, v.dump()));
  }
  return v.get<int64_t>();
}

const json& array(const json& j, const std::string& key, const std::string& origin,
                  const std::string& path = "") {
  const json& v = at(j, key, origin, path);
  if (!v.is_array()) {
    throw Error(
        fmt::format("{}: '{}' must be an array", origin, path.empty() ? key : path + "." + key));
  }
  return v;
}

/// j[key] as a display string, or "" when absent or null.
std::string text_of(const json& j, const std::string& key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_boolean()) return it->get<bool>() ? "on" : "off";
  return it->dump();
}

std::string read_file(const std::filesystem::path& path) {
  return read_input_file(path, "report input", kMaxDataFileBytes);
}

json read_json(const std::filesystem::path& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed JSON: {}", path.string(), e.what()));
  }
}

// ----- HTML helpers -----------------------------------------------------------------------------

std::string escape_html(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// Replaces every `from` in `s` by `to`.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

/// JSON text safe inside a <script> element: "</" and "<!--" only occur inside JSON strings,
/// where "<\/" and "<\u0021--" mean the same.
std::string script_safe_json(const json& j) {
  return replace_all(replace_all(j.dump(), "</", "<\\/"), "<!--", "<\\u0021--");
}

/// A library's text safe inside a <script> element ("</script" only occurs in its strings).
std::string script_safe_js(std::string js) {
  for (const char* tag : {"</script", "</SCRIPT", "</Script"}) {
    js = replace_all(js, tag, std::string("<\\/") + (tag + 2));
  }
  return js;
}

std::string format_seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.3f} us", s * 1e6);
}

std::string format_gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / kGiB); }

std::string format_percent(double fraction) { return fmt::format("{:.1f} %", fraction * 100); }

/// A two-column table of (name, value) rows, values escaped here.
std::string key_value_table(const std::vector<std::pair<std::string, std::string>>& rows,
                            const std::string& css_class) {
  std::string html = fmt::format("<table class=\"{}\">\n", css_class);
  for (const auto& [k, v] : rows) {
    html += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", escape_html(k), escape_html(v));
  }
  return html + "</table>\n";
}

// ----- Vega-Lite helpers ------------------------------------------------------------------------

json base_spec(const std::string& description) {
  return {{"$schema", "https://vega.github.io/schema/vega-lite/v5.json"},
          {"description", description},
          {"config", {{"view", {{"stroke", nullptr}}}, {"font", "sans-serif"}}}};
}

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
  static const std::map<std::string, int> order = {
      {"compute", 0}, {"tp-comm", 1}, {"cp-comm", 2}, {"pp-comm", 3}, {"dp-comm", 4},
      {"ep-comm", 5}};
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

// ----- simulation -------------------------------------------------------------------------------

ReportLayout report_layout(const json& summary, const std::string& origin) {
  const json& l = at(summary, "layout", origin);
  ReportLayout out;
  out.tensor_model_parallel_size = integer(l, "tensor_model_parallel_size", origin, "layout");
  out.pipeline_model_parallel_size = integer(l, "pipeline_model_parallel_size", origin, "layout");
  out.data_parallel_size = integer(l, "data_parallel_size", origin, "layout");
  if (l.contains("context_parallel_size")) {
    out.context_parallel_size = integer(l, "context_parallel_size", origin, "layout");
  }
  if (l.contains("rank_order")) out.rank_order = at(l, "rank_order", origin).get<std::string>();
  if (l.contains("layers_per_model_chunk")) {
    const json& stages = at(l, "layers_per_model_chunk", origin, "layout");
    if (!stages.is_array()) {
      throw Error(fmt::format("{}: 'layout.layers_per_model_chunk' must be an array, got {}",
                              origin, stages.dump()));
    }
    for (const json& chunks : stages) {
      int64_t total = 0;
      for (const json& n : chunks) {
        if (!n.is_number_integer()) {
          throw Error(fmt::format("{}: 'layout.layers_per_model_chunk' must hold arrays of "
                                  "integers, got {}",
                                  origin, chunks.dump()));
        }
        total += n.get<int64_t>();
      }
      out.layers_per_stage.push_back(total);
    }
  }
  return out;
}

namespace {

/// "15 layers (chunks 1+2+2+...)" style text of a stage's layers from layout.layers_per_model_chunk;
/// "" when the summary has no such field.
std::string pipeline_split_text(const json& layout) {
  if (!layout.contains("layers_per_model_chunk")) return "";
  std::vector<std::string> stages;
  for (const json& chunks : layout["layers_per_model_chunk"]) {
    std::vector<std::string> parts;
    for (const json& n : chunks) parts.push_back(n.dump());
    stages.push_back(fmt::format("{}", fmt::join(parts, "+")));
  }
  std::vector<std::string> how;
  if (layout.contains("decoder_first_pipeline_num_layers") &&
      !layout["decoder_first_pipeline_num_layers"].is_null()) {
    how.push_back("decoder_first_pipeline_num_layers " +
                  layout["decoder_first_pipeline_num_layers"].dump());
  }
  if (layout.contains("decoder_last_pipeline_num_layers") &&
      !layout["decoder_last_pipeline_num_layers"].is_null()) {
    how.push_back("decoder_last_pipeline_num_layers " +
                  layout["decoder_last_pipeline_num_layers"].dump());
  }
  if (layout.value("account_for_embedding_in_pipeline_split", false)) {
    how.emplace_back("embedding counted as a layer");
  }
  if (layout.value("account_for_loss_in_pipeline_split", false)) {
    how.emplace_back("loss counted as a layer");
  }
  return fmt::format("transformer layers per stage (model chunks joined by +): {} ({})",
                     fmt::join(stages, " / "),
                     how.empty() ? std::string("even split") : fmt::format("{}", fmt::join(how, ", ")));
}

}  // namespace

std::string summary_table_html(const json& summary, const std::string& origin) {
  const json& layout = at(summary, "layout", origin);
  const json& exposed = at(summary, "exposed_comm_s", origin);
  std::vector<std::pair<std::string, std::string>> rows;
  rows.reserve(20);  // also keeps GCC 12's -Warray-bounds false positive on the first insert away
  rows.emplace_back("scenario", text_of(summary, "scenario"));
  rows.emplace_back("GPUs",
                    fmt::format("{} x {}", text_of(summary, "num_gpus"), text_of(summary, "gpu")));
  rows.emplace_back("layout", fmt::format("TP {} x CP {} x PP {} x DP {}, VPP {}, SP {}",
                                          text_of(layout, "tensor_model_parallel_size"),
                                          text_of(layout, "context_parallel_size"),
                                          text_of(layout, "pipeline_model_parallel_size"),
                                          text_of(layout, "data_parallel_size"),
                                          text_of(layout, "virtual_pipeline_model_parallel_size"),
                                          text_of(layout, "sequence_parallel")));
  rows.emplace_back(
      "batch",
      fmt::format("micro-batch size {}, global batch size {}, {} "
                  "micro-batches, recompute {}",
                  text_of(layout, "micro_batch_size"), text_of(layout, "global_batch_size"),
                  text_of(layout, "num_micro_batches"), text_of(layout, "recompute_granularity")));
  if (const std::string split = pipeline_split_text(layout); !split.empty()) {
    rows.emplace_back("pipeline split", split);
  }
  if (summary.contains("mode")) rows.emplace_back("mode", text_of(summary, "mode"));
  rows.emplace_back("iteration time", format_seconds(number(summary, "iteration_time_s", origin)));
  rows.emplace_back("tokens/s", fmt::format("{:.0f}", number(summary, "tokens_per_s", origin)));
  rows.emplace_back("tokens/s/GPU",
                    fmt::format("{:.1f}", number(summary, "tokens_per_s_per_gpu", origin)));
  if (summary.contains("model_tflops_per_gpu")) {
    rows.emplace_back("model TFLOPs/s/GPU",
                      fmt::format("{:.1f}", number(summary, "model_tflops_per_gpu", origin)));
  }
  rows.emplace_back("MFU", format_percent(number(summary, "mfu", origin)));
  rows.emplace_back("HFU", format_percent(number(summary, "hfu", origin)));
  rows.emplace_back("pipeline bubble",
                    format_percent(number(summary, "pipeline_bubble_fraction", origin)));
  rows.emplace_back("compute (critical rank)",
                    format_seconds(number(summary, "compute_s", origin)));
  rows.emplace_back(
      "exposed TP / CP / EP / PP / DP comm",
      fmt::format("{} / {} / {} / {} / {}",
                  format_seconds(number(exposed, "tp", origin, "exposed_comm_s")),
                  format_seconds(number(exposed, "cp", origin, "exposed_comm_s")),
                  format_seconds(number(exposed, "ep", origin, "exposed_comm_s")),
                  format_seconds(number(exposed, "pp", origin, "exposed_comm_s")),
                  format_seconds(number(exposed, "dp", origin, "exposed_comm_s"))));
  rows.emplace_back("optimizer", format_seconds(number(summary, "optimizer_s", origin)));
  if (summary.contains("what_if")) rows.emplace_back("what-if", summary["what_if"].dump());
  if (summary.contains("base") && summary.contains("delta_vs_base")) {
    const json& base = summary["base"];
    const json& delta = summary["delta_vs_base"];
    rows.emplace_back(
        "base run (no what-if)",
        fmt::format("{} per iteration, {:.1f} tokens/s/GPU, MFU {}",
                    format_seconds(number(base, "iteration_time_s", origin, "base")),
                    number(base, "tokens_per_s_per_gpu", origin, "base"),
                    format_percent(number(base, "mfu", origin, "base"))));
    rows.emplace_back(
        "delta vs base",
        fmt::format("iteration time {:+.1f} %, tokens/s {:+.1f} %, exposed comm {:+.4f} s",
                    100 * number(delta, "iteration_time_relative", origin, "delta_vs_base"),
                    100 * number(delta, "tokens_per_s_relative", origin, "delta_vs_base"),
                    number(delta, "exposed_comm_delta_s", origin, "delta_vs_base")));
  }
  if (summary.contains("peak_memory_bytes") && summary.contains("gpu_memory_bytes")) {
    const double peak = number(summary, "peak_memory_bytes", origin);
    const double cap = number(summary, "gpu_memory_bytes", origin);
    rows.emplace_back("peak memory / GPU memory",
                      fmt::format("{} / {} ({})", format_gib(peak), format_gib(cap),
                                  peak <= cap ? "fits" : "does not fit"));
  }
  if (summary.contains("cost_sources") && summary["cost_sources"].is_object()) {
    std::string s;
    for (const auto& [src, frac] : summary["cost_sources"].items()) {
      if (!frac.is_number()) continue;
      s += fmt::format("{}{} {}", s.empty() ? "" : ", ", src, format_percent(frac.get<double>()));
    }
    rows.emplace_back("compute time by cost source", s);
  }
  return key_value_table(rows, "summary");
}

json time_breakdown_spec(const json& summary, const std::string& origin) {
  static const std::vector<std::pair<std::string, std::string>> parts = {
      {"compute_s", "compute"},
      {"exposed_tp_s", "exposed TP comm"},
      {"exposed_cp_s", "exposed CP comm"},
      {"exposed_ep_s", "exposed EP comm"},
      {"exposed_pp_s", "exposed PP comm"},
      {"exposed_dp_s", "exposed DP comm"},
      {"bubble_s", "pipeline bubble"},
      {"optimizer_s", "optimizer"}};
  json values = json::array();
  auto add = [&](const json& b, const std::string& row, int order, const std::string& path) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const double s = number(b, parts[i].first, origin, path);
      values.push_back({{"row", row},
                        {"row_order", order},
                        {"part", parts[i].second},
                        {"part_order", i},
                        {"ms", s * 1e3}});
    }
  };
  const json& critical = at(summary, "critical_rank", origin);
  add(critical, fmt::format("critical path (rank {})", text_of(critical, "rank")), 0,
      "critical_rank");
  if (summary.contains("per_stage")) {
    const json& stages = array(summary, "per_stage", origin);
    for (size_t i = 0; i < stages.size(); ++i) {
      add(stages[i], fmt::format("stage {} (rank {})", i, text_of(stages[i], "rank")),
          static_cast<int>(i) + 1, fmt::format("per_stage[{}]", i));
    }
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
          {"range", {"#4c78a8", "#f58518", "#72b7b2", "#b279a2", "#bab0ac", "#54a24b"}}}},
        {"legend", {{"orient", "bottom"}, {"columns", 6}}}}},
      {"order", {{"field", "part_order"}, {"type", "quantitative"}}},
      {"tooltip", json::array({{{"field", "row"}, {"title", "rank"}},
                               {{"field", "part"}},
                               {{"field", "ms"}, {"format", ".3f"}, {"title", "ms"}}})}};
  return spec;
}

json memory_spec(const json& summary, const std::string& origin) {
  static const std::vector<std::pair<std::string, std::string>> parts = {
      {"weights_bytes", "weights"},
      {"gradients_bytes", "gradients"},
      {"optimizer_bytes", "optimizer state"},
      {"activations_bytes", "activations"},
      {"embedding_and_logits_bytes", "embedding and logits"}};
  const json& stages = array(summary, "memory_per_stage", origin);
  const double capacity = number(summary, "gpu_memory_bytes", origin);
  json values = json::array();
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string path = fmt::format("memory_per_stage[{}]", i);
    const int64_t stage = integer(stages[i], "pp_rank", origin, path);
    const double total = number(stages[i], "total_bytes", origin, path);
    // The stage's transformer layers in its label (they differ under an uneven split).
    const std::string label =
        stages[i].contains("layers")
            ? fmt::format("stage {} ({} layers)", stage, integer(stages[i], "layers", origin, path))
            : fmt::format("stage {}", stage);
    for (size_t k = 0; k < parts.size(); ++k) {
      values.push_back({{"stage", label},
                        {"stage_order", stage},
                        {"part", parts[k].second},
                        {"part_order", k},
                        {"GiB", number(stages[i], parts[k].first, origin, path) / kGiB},
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
          {"axis", {{"labelAngle", 0}}}}},
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

std::optional<json> links_spec(const json& summary, const std::string& origin) {
  if (!summary.contains("busiest_links")) return std::nullopt;
  const json& links = array(summary, "busiest_links", origin);
  if (links.empty()) return std::nullopt;
  json values = json::array();
  for (size_t i = 0; i < links.size(); ++i) {
    const std::string path = fmt::format("busiest_links[{}]", i);
    values.push_back({{"link", at(links[i], "name", origin, path).get<std::string>()},
                      {"order", i},
                      {"tier", text_of(links[i], "tier")},
                      {"GB", number(links[i], "bytes", origin, path) / 1e9},
                      {"utilization", number(links[i], "utilization", origin, path)}});
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

std::optional<json> link_series_spec(const json& summary, const std::string& origin) {
  if (!summary.contains("link_series")) return std::nullopt;
  const json& series = array(summary, "link_series", origin);
  if (series.empty()) return std::nullopt;
  json values = json::array();
  for (size_t i = 0; i < series.size(); ++i) {
    const std::string path = fmt::format("link_series[{}]", i);
    const std::string name = at(series[i], "name", origin, path).get<std::string>();
    const double bin_s = number(series[i], "bin_s", origin, path);
    const json& u = array(series[i], "utilization", origin, path);
    for (size_t b = 0; b < u.size(); ++b) {
      if (!u[b].is_number()) {
        throw Error(fmt::format("{}: '{}.utilization[{}]' must be a number", origin, path, b));
      }
      values.push_back({{"link", name},
                        {"tier", text_of(series[i], "tier")},
                        {"time_ms", (static_cast<double>(b) + 0.5) * bin_s * 1e3},
                        {"utilization", u[b].get<double>()}});
    }
  }
  json spec = base_spec("Utilization of the busiest links over the iteration");
  spec["width"] = 700;
  spec["height"] = 220;
  spec["data"] = {{"values", values}};
  spec["name"] = "link_series";
  spec["mark"] = {{"type", "line"}, {"interpolate", "step-after"}, {"tooltip", true}};
  spec["encoding"] = {
      {"x", {{"field", "time_ms"}, {"type", "quantitative"}, {"title", "time in the iteration (ms)"}}},
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

std::string link_tiers_html(const json& summary, const std::string& origin) {
  if (!summary.contains("link_tiers")) return "";
  const json& tiers = array(summary, "link_tiers", origin);
  if (tiers.empty()) return "";
  std::string html =
      "<table class=\"ranked\">\n<tr><th>tier</th><th>links</th><th>GB mean</th><th>GB max</th>"
      "<th>utilization mean</th><th>p99</th><th>max</th></tr>\n";
  for (size_t i = 0; i < tiers.size(); ++i) {
    const std::string path = fmt::format("link_tiers[{}]", i);
    const json& t = tiers[i];
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        escape_html(text_of(t, "tier")), escape_html(text_of(t, "links")),
        number(t, "bytes_mean", origin, path) / 1e9, number(t, "bytes_max", origin, path) / 1e9,
        format_percent(number(t, "utilization_mean", origin, path)),
        format_percent(number(t, "utilization_p99", origin, path)),
        format_percent(number(t, "utilization_max", origin, path)));
  }
  html += "</table>\n";
  const json empty = json::array();
  const json& hot = summary.contains("hot_links") ? array(summary, "hot_links", origin) : empty;
  if (hot.empty()) {
    html += "<p>No hot link: every link is below twice its tier's mean utilization.</p>\n";
  } else {
    html += "<p>Hot links (at least twice their tier's mean utilization):</p>\n<ul>\n";
    for (size_t i = 0; i < hot.size(); ++i) {
      const std::string path = fmt::format("hot_links[{}]", i);
      html += fmt::format("<li>{} ({}): {} busy, {:.1f}x its tier's mean</li>\n",
                          escape_html(text_of(hot[i], "name")), escape_html(text_of(hot[i], "tier")),
                          format_percent(number(hot[i], "utilization", origin, path)),
                          number(hot[i], "vs_tier_mean", origin, path));
    }
    html += "</ul>\n";
  }
  return html;
}

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
    stages.push_back({{"title",
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

// ----- sweep ------------------------------------------------------------------------------------

namespace {

/// A sweep row's configuration ("configuration", or "config" in older files).
const json& sweep_config(const json& row, const std::string& origin, const std::string& path) {
  if (row.contains("configuration")) return at(row, "configuration", origin, path);
  return at(row, "config", origin, path);
}

/// "VPP 2, recompute selective, SP on, dist-opt on": the dimensions a heatmap cell folds.
std::string folded_phrase(const json& c) {
  return fmt::format("VPP {}, recompute {}, SP {}, dist-opt {}, DP {}",
                     text_of(c, "virtual_pipeline_model_parallel_size"),
                     text_of(c, "recompute_granularity"), text_of(c, "sequence_parallel"),
                     text_of(c, "use_distributed_optimizer"), text_of(c, "data_parallel_size"));
}

}  // namespace

std::optional<json> sweep_heatmap_spec(const json& sweep, const std::string& origin) {
  if (!sweep.is_array()) throw Error(fmt::format("{}: must be a JSON array of rows", origin));
  struct Cell {
    int64_t n = 0, n_oom = 0;
    std::optional<double> best;
    std::string best_config;
    int64_t best_rank = 0;
    std::optional<double> min_excess_bytes;
  };
  std::map<std::tuple<int64_t, int64_t, int64_t>, Cell> cells;  // (tp, pp, mbs)
  for (size_t i = 0; i < sweep.size(); ++i) {
    const std::string path = fmt::format("[{}]", i);
    const json& row = sweep[i];
    const std::string status = at(row, "status", origin, path).get<std::string>();
    if (status != "ranked" && status != "oom") continue;
    const json& c = sweep_config(row, origin, path);
    const std::string cpath = path + ".configuration";
    Cell& cell = cells[{integer(c, "tensor_model_parallel_size", origin, cpath),
                        integer(c, "pipeline_model_parallel_size", origin, cpath),
                        integer(c, "micro_batch_size", origin, cpath)}];
    ++cell.n;
    if (status == "oom") {
      ++cell.n_oom;
      if (row.contains("memory") && row["memory"].contains("excess_bytes")) {
        const double excess = number(row["memory"], "excess_bytes", origin, path + ".memory");
        cell.min_excess_bytes = std::min(cell.min_excess_bytes.value_or(excess), excess);
      }
      continue;
    }
    const double tps =
        number(at(row, "metrics", origin, path), "tokens_per_s_per_gpu", origin, path + ".metrics");
    if (!cell.best || tps > *cell.best) {
      cell.best = tps;
      cell.best_config = folded_phrase(c);
      cell.best_rank =
          row.contains("rank") && row["rank"].is_number_integer() ? row["rank"].get<int64_t>() : 0;
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

std::string sweep_table_html(const json& sweep, const std::string& origin, size_t max_rows) {
  if (!sweep.is_array()) throw Error(fmt::format("{}: must be a JSON array of rows", origin));
  std::vector<std::pair<int64_t, size_t>> ranked;  // (rank, row index)
  std::map<std::string, int64_t> other;
  for (size_t i = 0; i < sweep.size(); ++i) {
    const std::string path = fmt::format("[{}]", i);
    const std::string status = at(sweep[i], "status", origin, path).get<std::string>();
    if (status == "ranked") {
      ranked.emplace_back(integer(sweep[i], "rank", origin, path), i);
    } else {
      ++other[status];
    }
  }
  std::stable_sort(ranked.begin(), ranked.end());
  std::string html =
      "<table class=\"ranked\">\n<tr><th>rank</th><th>TP</th><th>PP</th><th>VPP</th><th>DP</th>"
      "<th>micro-batch</th><th>recompute</th><th>SP</th><th>dist-opt</th><th>tokens/s/GPU</th>"
      "<th>MFU</th><th>iteration time</th><th>bubble</th><th>peak memory</th></tr>\n";
  for (size_t k = 0; k < ranked.size() && k < max_rows; ++k) {
    const size_t i = ranked[k].second;
    const std::string path = fmt::format("[{}]", i);
    const json& row = sweep[i];
    const json& c = sweep_config(row, origin, path);
    const json& m = at(row, "metrics", origin, path);
    const std::string mpath = path + ".metrics";
    std::string peak;
    if (row.contains("memory") && row["memory"].contains("peak_bytes")) {
      peak = format_gib(number(row["memory"], "peak_bytes", origin, path + ".memory"));
    }
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{:.1f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        ranked[k].first, escape_html(text_of(c, "tensor_model_parallel_size")),
        escape_html(text_of(c, "pipeline_model_parallel_size")),
        escape_html(text_of(c, "virtual_pipeline_model_parallel_size")),
        escape_html(text_of(c, "data_parallel_size")), escape_html(text_of(c, "micro_batch_size")),
        escape_html(text_of(c, "recompute_granularity")),
        escape_html(text_of(c, "sequence_parallel")),
        escape_html(text_of(c, "use_distributed_optimizer")),
        number(m, "tokens_per_s_per_gpu", origin, mpath),
        m.contains("mfu") ? format_percent(number(m, "mfu", origin, mpath)) : "",
        m.contains("iteration_time_s")
            ? format_seconds(number(m, "iteration_time_s", origin, mpath))
            : "",
        m.contains("pipeline_bubble_fraction")
            ? format_percent(number(m, "pipeline_bubble_fraction", origin, mpath))
            : "",
        peak);
  }
  html += "</table>\n";
  std::string counts = fmt::format("{} ranked configuration(s)", ranked.size());
  if (ranked.size() > max_rows) counts += fmt::format(" (the first {} shown)", max_rows);
  for (const auto& [status, n] : other) counts += fmt::format(", {} {}", n, status);
  return fmt::format("<p class=\"counts\">{}.</p>\n", escape_html(counts)) + html;
}

// ----- the page ---------------------------------------------------------------------------------

std::vector<ReportSection> simulation_sections(const json& summary, const std::string& origin,
                                               const std::optional<Timeline>& timeline,
                                               const std::string& timeline_origin,
                                               const GanttOptions& gantt) {
  std::vector<ReportSection> out;
  out.push_back({"summary", "Summary", "One training iteration, replayed.", std::nullopt,
                 summary_table_html(summary, origin)});
  out.push_back({"breakdown", "Time breakdown",
                 "Where the iteration's time goes on the critical rank and on each pipeline "
                 "stage: compute, communication not hidden behind compute, pipeline bubble, "
                 "optimizer step.",
                 time_breakdown_spec(summary, origin), ""});
  if (timeline) {
    const GanttChart g =
        gantt_chart(*timeline, report_layout(summary, origin), timeline_origin, gantt);
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
  if (summary.contains("memory_per_stage")) {
    out.push_back({"memory", "Memory per pipeline stage",
                   "Per GPU of each stage (activations at the schedule's in-flight peak); the "
                   "red rule is the GPU's memory.",
                   memory_spec(summary, origin), ""});
  } else {
    out.push_back({"memory", "Memory per pipeline stage",
                   "This summary.json has no memory_per_stage (an older traintwin wrote it): "
                   "simulate again to see it.",
                   std::nullopt, ""});
  }
  const std::string tiers = link_tiers_html(summary, origin);
  if (!tiers.empty()) {
    out.push_back({"link-tiers", "Links per tier",
                   "Every link of each tier, idle ones included (flows only: collectives inside "
                   "a node take closed forms and are not counted on NVLink links).",
                   std::nullopt, tiers});
  }
  if (auto series = link_series_spec(summary, origin)) {
    out.push_back({"link-series", "Busiest links over the iteration",
                   "Utilization of the five busiest links in 100 time bins (each flow's bytes "
                   "spread evenly over its lifetime).",
                   *series, ""});
  }
  if (auto links = links_spec(summary, origin)) {
    out.push_back({"links", "Busiest links",
                   "The most loaded links of the simulated network over the iteration.", *links,
                   ""});
  }
  return out;
}

std::vector<ReportSection> sweep_sections(const json& sweep, const std::string& origin) {
  std::vector<ReportSection> out;
  if (auto heat = sweep_heatmap_spec(sweep, origin)) {
    out.push_back({"heatmap", "Sweep: tokens/s/GPU",
                   "Best tokens/s/GPU of each (PP, micro-batch size) per TP size over the other "
                   "swept dimensions; grey dashed cells marked OOM do not fit in GPU memory.",
                   *heat, ""});
  }
  out.push_back({"ranked", "Sweep: ranked configurations", "Ranked by tokens/s.", std::nullopt,
                 sweep_table_html(sweep, origin)});
  return out;
}

std::string render_report_html(const std::string& title, const std::vector<ReportSection>& sections,
                               const std::filesystem::path& vega_dir) {
  std::string scripts;
  for (const char* name : kVegaFiles) {
    const std::filesystem::path file = vega_dir / name;
    if (!std::filesystem::is_regular_file(file)) {
      throw Error(
          fmt::format("{}: not found (the report inlines Vega's browser builds: run "
                      "scripts/fetch_vega.sh, which needs npm)",
                      file.string()));
    }
    scripts += "<script>\n" + script_safe_js(read_file(file)) + "\n</script>\n";
  }
  json specs = json::object();
  std::string body;
  for (const ReportSection& s : sections) {
    body += fmt::format("<section id=\"section-{}\">\n<h2>{}</h2>\n<p class=\"note\">{}</p>\n",
                        escape_html(s.id), escape_html(s.title), escape_html(s.note));
    if (s.spec) {
      body += fmt::format("<div class=\"chart\" id=\"chart-{}\"></div>\n", escape_html(s.id));
      specs[s.id] = *s.spec;
    } else {
      body += s.html;
    }
    body += "</section>\n";
  }
  std::string html = R"(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>)" + escape_html(title) +
                     R"(</title>
<style>
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; }
p.note { color: #555; font-size: 13px; max-width: 1100px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
table.summary th { background: #f3f3f3; }
table.ranked td { text-align: right; } table.ranked th { background: #f3f3f3; }
#report-errors { color: #b22222; }
</style>
<script>
// Collects script errors, failed charts, Vega warnings and console errors into the page, so
// that a headless browser's --dump-dom shows them.
window.reportProblem = function (kind, message) {
  var list = document.getElementById('report-errors');
  if (!list) {
    (window.pendingProblems = window.pendingProblems || []).push([kind, message]);
    return;
  }
  var item = document.createElement('li');
  item.className = 'report-problem';
  item.textContent = kind + ': ' + message;
  list.appendChild(item);
  list.hidden = false;
};
window.addEventListener('error', function (e) {
  window.reportProblem('error', (e.message || String(e.error)) + ' (' + (e.filename || '') +
                                ':' + (e.lineno || '') + ')');
});
window.addEventListener('unhandledrejection', function (e) {
  window.reportProblem('unhandled rejection', String(e.reason));
});
(function () {
  var error = console.error, warn = console.warn;
  var join = function (args) { return Array.prototype.join.call(args, ' '); };
  console.error = function () {
    window.reportProblem('console.error', join(arguments));
    error.apply(console, arguments);
  };
  console.warn = function () {
    window.reportProblem('console.warn', join(arguments));
    warn.apply(console, arguments);
  };
})();
</script>
)" + scripts + R"(</head>
<body data-report-status="loading">
<h1>)" + escape_html(title) +
                     R"(</h1>
<ul id="report-errors" hidden></ul>
)" + body + R"(<script type="application/json" id="report-specs">)" +
                     script_safe_json(specs) +
                     R"(</script>
<script>
(function () {
  (window.pendingProblems || []).forEach(function (p) { window.reportProblem(p[0], p[1]); });
  var specs = JSON.parse(document.getElementById('report-specs').textContent);
  var ids = Object.keys(specs);
  var done = ids.map(function (id) {
    var el = document.getElementById('chart-' + id);
    return vegaEmbed(el, specs[id], {renderer: 'svg', actions: false,
                                     logLevel: vega.Warn})
      .then(function (result) { el.setAttribute('data-rendered', 'true'); return true; })
      .catch(function (e) { window.reportProblem('chart ' + id, String(e)); return false; });
  });
  Promise.all(done).then(function (ok) {
    document.body.setAttribute('data-report-status',
                               ok.every(function (x) { return x; }) ? 'rendered' : 'failed');
  });
})();
</script>
</body>
</html>
)";
  return html;
}

std::filesystem::path write_report(const std::filesystem::path& dir,
                                   const std::filesystem::path& vega_dir,
                                   const GanttOptions& gantt, std::optional<Timeline> timeline) {
  if (!std::filesystem::is_directory(dir)) {
    throw Error(fmt::format("{}: not a directory", dir.string()));
  }
  const auto summary_path = dir / "summary.json";
  const auto timeline_path = dir / "timeline.json";
  const auto sweep_path = dir / "sweep.json";
  const bool has_summary = std::filesystem::is_regular_file(summary_path);
  const bool has_sweep = std::filesystem::is_regular_file(sweep_path);
  if (!has_summary && !has_sweep) {
    throw Error(
        fmt::format("{}: holds neither summary.json (traintwin simulate --out) nor "
                    "sweep.json (traintwin sweep --out): nothing to report",
                    dir.string()));
  }
  std::vector<ReportSection> sections;
  std::string title = "traintwin report";
  if (has_summary) {
    const json summary = read_json(summary_path);
    if (!timeline && std::filesystem::is_regular_file(timeline_path)) {
      std::ifstream in(timeline_path);
      if (!in) throw Error(fmt::format("{}: cannot open for reading", timeline_path.string()));
      timeline = read_chrome_trace(in, timeline_path.string());
    }
    auto s = simulation_sections(summary, summary_path.string(), timeline, timeline_path.string(),
                                 gantt);
    sections.insert(sections.end(), s.begin(), s.end());
    const std::string scenario = text_of(summary, "scenario");
    if (!scenario.empty()) title += ": " + scenario;
  }
  if (has_sweep) {
    const json sweep = read_json(sweep_path);
    auto s = sweep_sections(sweep, sweep_path.string());
    sections.insert(sections.end(), s.begin(), s.end());
    if (!has_summary) title += ": sweep";
  }
  const std::string html = render_report_html(title, sections, vega_dir);
  const auto out_path = dir / "report.html";
  AtomicFile out(out_path);  // never follows a planted temporary; "no space left" names it
  out.write(html);
  out.commit();
  return out_path;
}

std::vector<std::filesystem::path> vega_dir_candidates(const std::filesystem::path& executable) {
  std::vector<std::filesystem::path> out;
  if (const char* env = std::getenv("TRAINTWIN_VEGA_DIR"); env != nullptr && *env != '\0') {
    out.emplace_back(env);
  }
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::weakly_canonical(executable, ec);
  if (ec) exe = executable;
  const std::filesystem::path bin_dir = exe.parent_path();
  if (!bin_dir.empty()) {
    out.push_back(bin_dir.parent_path() / "data" / "vega");
    out.push_back(bin_dir.parent_path().parent_path() / "data" / "vega");
  }
  out.push_back(std::filesystem::path("data") / "vega");
  return out;
}

std::optional<std::filesystem::path> find_vega_dir(const std::filesystem::path& executable) {
  for (const auto& dir : vega_dir_candidates(executable)) {
    const bool complete =
        std::all_of(std::begin(kVegaFiles), std::end(kVegaFiles),
                    [&](const char* f) { return std::filesystem::is_regular_file(dir / f); });
    if (complete) return dir;
  }
  return std::nullopt;
}

}  // namespace traintwin
