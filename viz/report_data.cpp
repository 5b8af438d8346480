#include "viz/report_data.hpp"

#include <fmt/format.h>

#include <fstream>
#include <utility>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace traintwin {

ReportLayout report_layout(const SummaryLayout& layout) {
  ReportLayout out;
  out.tensor_model_parallel_size = layout.tensor_model_parallel_size;
  out.context_parallel_size = layout.context_parallel_size;
  out.data_parallel_size = layout.data_parallel_size;
  out.pipeline_model_parallel_size = layout.pipeline_model_parallel_size;
  out.rank_order = layout.rank_order;
  out.layers_per_stage = layout.layers_per_stage();
  return out;
}

nlohmann::ordered_json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_input_file(path, "report input", kMaxDataFileBytes);
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: malformed JSON: {}", path.string(), e.what()));
  }
}

ReportInput read_report_input(const std::filesystem::path& dir, std::optional<Timeline> timeline) {
  if (!std::filesystem::is_directory(dir)) {
    throw Error(fmt::format("{}: not a directory", dir.string()));
  }
  ReportInput in;
  const auto summary_path = dir / "summary.json";
  const auto timeline_path = dir / "timeline.json";
  const auto sweep_path = dir / "sweep.json";
  in.summary_origin = summary_path.string();
  in.timeline_origin = timeline_path.string();
  in.sweep_origin = sweep_path.string();
  const bool has_summary = std::filesystem::is_regular_file(summary_path);
  const bool has_sweep = std::filesystem::is_regular_file(sweep_path);
  if (!has_summary && !has_sweep) {
    const bool goodput = std::filesystem::is_regular_file(dir / "goodput.json");
    throw Error(fmt::format(
        "{}: holds neither summary.json (traintwin simulate --out) nor "
        "sweep.json (traintwin sweep --out): nothing to report{}",
        dir.string(),
        goodput ? " (its goodput.json has no events of the sampled run: `traintwin goodput "
                  "--out` writes its report.html itself; run it again)"
                : ""));
  }
  if (has_summary) {
    in.summary = read_summary_json(read_json_file(summary_path), in.summary_origin);
    if (!timeline && std::filesystem::is_regular_file(timeline_path)) {
      std::ifstream file(timeline_path);
      if (!file) throw Error(fmt::format("{}: cannot open for reading", in.timeline_origin));
      timeline = read_chrome_trace(file, in.timeline_origin);
    }
    in.timeline = std::move(timeline);
  }
  if (has_sweep) in.sweep = read_sweep_json(read_json_file(sweep_path), in.sweep_origin);
  return in;
}

}  // namespace traintwin
