#include "cli/report_output.hpp"

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "viz/report.hpp"

namespace traintwin::cli {

void write_report_or_warn(const std::filesystem::path& dir, bool announce,
                          std::optional<Timeline> timeline) {
  std::filesystem::path vega;
  try {
    vega = resolve_vega_dir("");
  } catch (const Error& e) {
    fmt::print(stderr, "traintwin: warning: no report.html: {}; then run `traintwin report {}`\n",
               e.what(), dir.string());
    return;
  }
  const auto written = write_report(dir, vega, {}, std::move(timeline));
  if (announce) fmt::print("wrote {}\n", written.string());
}

namespace {
/// The Vega builds' folder, or nullopt after a warning on stderr saying how to get them.
std::optional<std::filesystem::path> vega_or_warn() {
  try {
    return resolve_vega_dir("");
  } catch (const Error& e) {
    fmt::print(stderr, "traintwin: warning: no report.html: {}\n", e.what());
    return std::nullopt;
  }
}
}  // namespace

void write_goodput_report_or_warn(const std::filesystem::path& dir, bool announce,
                                  const GoodputPageInput& page) {
  const std::optional<std::filesystem::path> vega = vega_or_warn();
  if (!vega) return;
  const auto written = write_goodput_report(dir, *vega, page);
  if (announce) fmt::print("wrote {}\n", written.string());
}

void write_cluster_report_or_warn(const std::filesystem::path& dir, bool announce,
                                  const ClusterResult& r) {
  const std::optional<std::filesystem::path> vega = vega_or_warn();
  if (!vega) return;
  const auto written = write_cluster_report(dir, *vega, r);
  if (announce) fmt::print("wrote {}\n", written.string());
}

}  // namespace traintwin::cli
