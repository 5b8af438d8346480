// The shared-cluster part of the report (`traintwin cluster PLACEMENT --out DIR`, issue 29 item
// 1): from what sim/multi_job.hpp returns (a ClusterResult), the per-job table (iteration time
// alone and together, slowdown, exposed communication), the per-tier sharing table, a timeline of
// every job's iterations together coloured by their slowdown, and the busiest shared links'
// utilisation per job over the window. Pure functions of the result; the page is
// viz/report_page.hpp (write_cluster_report()), next in the flow.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/multi_job.hpp"
#include "viz/report_data.hpp"

namespace traintwin {

/// The per-job table (HTML): job, GPUs and nodes, iterations, start, iteration time alone and
/// together (mean, and min / p50 / max), slowdown (together mean / alone), exposed communication
/// of the critical rank alone and together (mean), and whether it was replayed together or shares
/// no link (its alone iteration laid end to end). Times in ms.
std::string cluster_jobs_table_html(const ClusterResult& r);

/// The per-tier table (HTML): links of the tier, links each job uses, links shared by two or more
/// jobs, each job's mean utilisation of the shared links and their total's mean and max (%).
std::string cluster_tiers_table_html(const ClusterResult& r);

/// Every job's iterations together as bars on one lane per job (marks "job_iterations"; fields
/// `job`, `iteration` (1-based), `start_ms`, `end_ms`, `time_ms`, `alone_ms`, `slowdown` =
/// time_ms / alone_ms, `exposed_comm_ms` of the critical rank), coloured by slowdown; x pans and
/// zooms. One row per JobIteration of every job.
nlohmann::json cluster_iterations_spec(const ClusterResult& r);

/// The busiest shared links' utilisation over the window (ClusterResult::shared_series), one
/// chart row per link, each job's share stacked (marks "link_utilization"; fields `link`, `tier`,
/// `job`, `time_ms` (bin start), `percent` = 100 x the job's bytes in the bin / (bandwidth x bin
/// width)). One row per (link, job, bin); the stacked total is the link's utilisation in the bin,
/// up to the even spreading of each flow's bytes over its duration (sim/multi_job.hpp), which can
/// put a bin above 100 % where sharing changed the flows' rates inside it.
nlohmann::json cluster_links_spec(const ClusterResult& r);

/// The sections of the cluster report: the jobs table, the tiers table, the iteration timeline
/// and, when any link is shared, the shared links' utilisation.
std::vector<ReportSection> cluster_sections(const ClusterResult& r);

}  // namespace traintwin
