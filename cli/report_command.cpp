// `traintwin report DIR`: rebuilds DIR/report.html from the JSON files in DIR (summary.json and
// timeline.json from `simulate --out`, sweep.json from `sweep --out`).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "core/error.hpp"
#include "viz/report.hpp"

namespace traintwin::cli {
namespace {

struct ReportOptions {
  std::string dir;
  std::string vega_dir;
  std::size_t max_gantt_bars = GanttOptions{}.max_bars;
};

}  // namespace

/// This program's path (Linux: /proc/self/exe), to find data/vega beside the source tree.
static std::filesystem::path own_executable() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe;
}

/// The Vega builds' folder: --vega-dir, else the first of vega_dir_candidates() holding them.
std::filesystem::path resolve_vega_dir(const std::string& flag) {
  if (!flag.empty()) return flag;  // write_report names a missing file in it
  const auto exe = own_executable();
  if (auto found = find_vega_dir(exe)) return *found;
  std::string looked;
  for (const auto& dir : vega_dir_candidates(exe)) {
    looked += fmt::format("{}{}", looked.empty() ? "" : ", ", dir.string());
  }
  throw Error(fmt::format(
      "the report inlines the Vega, Vega-Lite and vega-embed browser builds ({}), which are not "
      "in {}: run scripts/fetch_vega.sh in the source tree (needs npm and the npm registry), or "
      "point TRAINTWIN_VEGA_DIR or --vega-dir at a folder holding them",
      fmt::join(kVegaFiles, ", "), looked));
}


void register_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  auto* cmd = app.add_subcommand(
      "report", "Rebuild DIR/report.html (self-contained, opens offline) from DIR's JSON files");
  cmd->add_option("DIR", o->dir,
                  "Output folder of `traintwin simulate --out` (summary.json, timeline.json) "
                  "and/or `traintwin sweep --out` (sweep.json)")
      ->required();
  cmd->add_option("--vega-dir", o->vega_dir,
                  "Folder with vega.min.js, vega-lite.min.js, vega-embed.min.js (default: "
                  "$TRAINTWIN_VEGA_DIR, else data/vega of the source tree; scripts/fetch_vega.sh "
                  "fetches them)");
  cmd->add_option("--max-gantt-bars", o->max_gantt_bars,
                  "Above this many ops the Gantt chart keeps TP rank 0's compute stream per "
                  "stage, then merges micro-batch blocks")
      ->capture_default_str()
      ->check(positive_number());
  cmd->callback([o] {
    const auto vega_dir = resolve_vega_dir(o->vega_dir);
    GanttOptions gantt;
    gantt.max_bars = o->max_gantt_bars;
    const auto written = write_report(o->dir, vega_dir, gantt);
    fmt::print("wrote {}\n", written.string());
  });
}

}  // namespace traintwin::cli
