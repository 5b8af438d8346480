// Writing report.html at the end of `simulate --out`, `sweep --out`, `goodput --out` and
// `cluster --out`.
#pragma once

#include <filesystem>
#include <optional>

#include "traces/timeline.hpp"
#include "sim/multi_job.hpp"
#include "viz/goodput_charts.hpp"

namespace traintwin::cli {

/// Writes DIR/report.html from the JSON files in DIR. When the Vega builds are missing (not
/// fetched: scripts/fetch_vega.sh) the JSON outputs stay and a warning on stderr says how to get
/// the report (`traintwin report DIR` afterwards). `announce` prints "wrote DIR/report.html".
/// `timeline`: DIR/timeline.json's events when the caller still has them (not read back).
void write_report_or_warn(const std::filesystem::path& dir, bool announce,
                          std::optional<Timeline> timeline = std::nullopt);

/// Writes DIR/report.html of `goodput --out DIR` (viz/report_page.hpp's write_goodput_report);
/// missing Vega builds leave goodput.json alone with a warning on stderr, as above.
void write_goodput_report_or_warn(const std::filesystem::path& dir, bool announce,
                                  const GoodputPageInput& page);

/// Writes DIR/report.html of `cluster --out DIR` (viz/report_page.hpp's write_cluster_report);
/// missing Vega builds leave cluster.json and timeline.json alone with a warning on stderr.
void write_cluster_report_or_warn(const std::filesystem::path& dir, bool announce,
                                  const ClusterResult& r);

}  // namespace traintwin::cli
