#include "viz/cluster_charts.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "viz/report_format.hpp"

namespace traintwin {
namespace {

using json = nlohmann::json;

std::string ms(double s) { return fmt::format("{:.3f}", s * 1e3); }

/// "a -> t" of two times in ms.
std::string alone_to_together(double alone_s, double together_s) {
  return fmt::format("{} &rarr; {}", ms(alone_s), ms(together_s));
}

std::string th(const std::string& text) { return "<th>" + escape_html(text) + "</th>"; }
std::string td(const std::string& text) { return "<td>" + escape_html(text) + "</td>"; }

}  // namespace

std::string cluster_jobs_table_html(const ClusterResult& r) {
  std::string html = "<table class=\"ranked\">\n<tr>";
  for (const char* h : {"job", "GPUs", "nodes", "iterations", "start (ms)", "alone (ms)",
                        "together (ms)", "min / p50 / max (ms)", "slowdown",
                        "exposed comm. alone / together (ms)", "sync wait alone / together (ms)",
                        "replayed"}) {
    html += th(h);
  }
  html += "</tr>\n";
  for (const ClusterJobResult& j : r.jobs) {
    const TimeBreakdown& a = j.alone_breakdown;
    const TimeBreakdown& t = j.together_breakdown;
    html += "<tr>" + td(j.name) + td(std::to_string(j.num_gpus)) +
            td(std::to_string(j.nodes.size())) + td(std::to_string(j.iterations)) +
            td(ms(j.start_s)) + td(ms(j.alone.mean_s)) + td(ms(j.together.mean_s)) +
            td(fmt::format("{} / {} / {}", ms(j.together.min_s), ms(j.together.p50_s),
                           ms(j.together.max_s))) +
            td(fmt::format("{:.4f}x", j.slowdown)) +
            // &rarr; is markup: these two cells are built from numbers only.
            "<td>" + alone_to_together(a.exposed_comm_s(), t.exposed_comm_s()) + "</td>" +
            "<td>" + alone_to_together(a.sync_wait_s, t.sync_wait_s) + "</td>" +
            td(j.replayed_together ? "together" : "alone (shares no link)") + "</tr>\n";
  }
  return html + "</table>\n";
}

std::string cluster_tiers_table_html(const ClusterResult& r) {
  std::string html = "<table class=\"ranked\">\n<tr>" + th("tier") + th("links");
  for (const ClusterJobResult& j : r.jobs) html += th("used by " + j.name);
  html += th("shared");
  for (const ClusterJobResult& j : r.jobs) html += th(j.name + " on shared (mean %)");
  html += th("total on shared: mean / max (%)") + "</tr>\n";
  for (const TierSharing& t : r.tiers) {
    html += "<tr>" + td(t.tier) + td(std::to_string(t.links));
    for (int64_t c : t.links_per_job) html += td(std::to_string(c));
    html += td(std::to_string(t.links_shared));
    for (double u : t.shared_utilization_mean) html += td(fmt::format("{:.1f}", 100 * u));
    html += td(fmt::format("{:.1f} / {:.1f}", 100 * t.shared_total_mean,
                           100 * t.shared_total_max)) +
            "</tr>\n";
  }
  return html + "</table>\n";
}

json cluster_iterations_spec(const ClusterResult& r) {
  json rows = json::array();
  std::vector<std::string> jobs;
  for (const ClusterJobResult& j : r.jobs) {
    jobs.push_back(j.name);
    for (size_t k = 0; k < j.together_iterations.size(); ++k) {
      const JobIteration& it = j.together_iterations[k];
      rows.push_back({{"job", j.name},
                      {"iteration", static_cast<int64_t>(k + 1)},
                      {"start_ms", it.start_s * 1e3},
                      {"end_ms", it.end_s * 1e3},
                      {"time_ms", it.time_s() * 1e3},
                      {"alone_ms", j.alone.mean_s * 1e3},
                      {"slowdown", j.alone.mean_s > 0 ? it.time_s() / j.alone.mean_s : 1.0},
                      {"exposed_comm_ms", it.critical.exposed_comm_s() * 1e3}});
    }
  }
  json spec = base_spec("Each job's iterations together, coloured by slowdown");
  spec["width"] = 900;
  spec["height"] = {{"step", 28}};
  spec["data"] = {{"values", rows}};
  spec["name"] = "job_iterations";
  spec["params"] = json::array({{{"name", "iterations_zoom"},
                                 {"select", {{"type", "interval"}, {"encodings", {"x"}}}},
                                 {"bind", "scales"}}});
  spec["mark"] = {{"type", "bar"}, {"tooltip", true}, {"clip", true}, {"stroke", "white"},
                  {"strokeWidth", 0.5}};
  spec["encoding"] = {
      {"x", {{"field", "start_ms"}, {"type", "quantitative"}, {"title", "simulated time (ms)"}}},
      {"x2", {{"field", "end_ms"}}},
      {"y", {{"field", "job"}, {"type", "nominal"}, {"title", nullptr}, {"sort", jobs}}},
      {"color",
       {{"field", "slowdown"},
        {"type", "quantitative"},
        {"title", "slowdown"},
        {"scale", {{"scheme", "orangered"}, {"domainMin", 1.0}}}}},
      {"tooltip",
       json::array({{{"field", "job"}},
                    {{"field", "iteration"}},
                    {{"field", "time_ms"}, {"format", ".3f"}, {"title", "together (ms)"}},
                    {{"field", "alone_ms"}, {"format", ".3f"}, {"title", "alone (ms)"}},
                    {{"field", "slowdown"}, {"format", ".4f"}},
                    {{"field", "exposed_comm_ms"},
                     {"format", ".3f"},
                     {"title", "exposed comm. (ms)"}}})}};
  return spec;
}

json cluster_links_spec(const ClusterResult& r) {
  json rows = json::array();
  std::vector<std::string> links;
  for (const SharedLinkSeries& ls : r.shared_series) {
    links.push_back(ls.name);
    for (size_t j = 0; j < ls.utilization.size() && j < r.jobs.size(); ++j) {
      for (size_t b = 0; b < ls.utilization[j].size(); ++b) {
        rows.push_back({{"link", ls.name},
                        {"tier", ls.tier},
                        {"job", r.jobs[j].name},
                        {"time_ms", static_cast<double>(b) * ls.bin_s * 1e3},
                        {"percent", 100 * ls.utilization[j][b]}});
      }
    }
  }
  json spec = base_spec("The busiest shared links' utilisation per job over time");
  spec["data"] = {{"values", rows}};
  spec["name"] = "link_utilization";
  spec["facet"] = {{"row",
                    {{"field", "link"},
                     {"type", "nominal"},
                     {"title", nullptr},
                     {"sort", links},
                     {"header", {{"labelAngle", 0}, {"labelAlign", "left"}}}}}};
  spec["spec"] = {
      {"width", 800},
      {"height", 90},
      {"mark", {{"type", "area"}, {"interpolate", "step-after"}, {"tooltip", true}}},
      {"encoding",
       {{"x", {{"field", "time_ms"}, {"type", "quantitative"}, {"title", "simulated time (ms)"}}},
        {"y",
         {{"field", "percent"},
          {"type", "quantitative"},
          {"stack", "zero"},
          {"title", "utilisation (%)"}}},
        {"color", {{"field", "job"}, {"type", "nominal"}, {"title", "job"}}},
        {"tooltip",
         json::array({{{"field", "link"}},
                      {{"field", "tier"}},
                      {{"field", "job"}},
                      {{"field", "time_ms"}, {"format", ".3f"}, {"title", "bin from (ms)"}},
                      {{"field", "percent"}, {"format", ".1f"}, {"title", "% of the link"}}})}}}};
  return spec;
}

std::vector<ReportSection> cluster_sections(const ClusterResult& r) {
  std::vector<ReportSection> out;
  std::string reductions;
  for (const std::string& red : r.reductions) reductions += " " + red + ".";
  out.push_back(
      {"cluster-jobs", "Jobs alone and together",
       fmt::format("{} jobs on {} nodes of {} ({} GPUs per node), replayed alone on their nodes "
                   "and together on one fabric (sim/multi_job.hpp); slowdown = mean iteration "
                   "together / alone; exposed communication and sync wait of the critical rank "
                   "per iteration.{}",
                   r.jobs.size(), r.num_nodes, r.topology, r.gpus_per_node, reductions),
       std::nullopt, cluster_jobs_table_html(r)});
  out.push_back({"cluster-tiers", "Links per tier",
                 fmt::format("Links each job's flows use and those two or more jobs share, with "
                             "the shared links' utilisation over the {} ms window (bytes / "
                             "(bandwidth x window)).",
                             ms(r.window_s)),
                 std::nullopt, cluster_tiers_table_html(r)});
  out.push_back({"cluster-iterations", "Iterations together",
                 "Each job's iterations on the shared fabric, each bar one iteration coloured by "
                 "its time over the job's alone iteration; drag to pan, scroll to zoom.",
                 cluster_iterations_spec(r), ""});
  if (!r.shared_series.empty()) {
    out.push_back({"cluster-links", "Shared links over time",
                   fmt::format("The {} busiest links that carry two or more jobs' traffic: each "
                               "job's share of the link per time bin, stacked (the top is the "
                               "link's utilisation). Each flow's bytes are spread evenly over its "
                               "duration, so a bin where flows started or stopped sharing (their "
                               "rates changed) can show more than 100 %.",
                               r.shared_series.size()),
                   cluster_links_spec(r), ""});
  }
  return out;
}

}  // namespace traintwin
