// Per-link traffic of a replay, summarised so that it tells something at 1024+ GPUs: per tier
// (NVLink, NIC, leaf-spine, spine-core) the max, mean and p99 utilisation and bytes over every
// link of the tier (idle links included), the links that are hot relative to their tier, and the
// utilisation over the iteration of the busiest links.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace traintwin {

/// Bytes a link carried, and its utilization over the iteration.
struct LinkLoad {
  std::string name;
  std::string tier;
  double bytes = 0;
  double bandwidth_Bps = 0;  ///< per direction
  double utilization = 0;    ///< bytes / (bandwidth x iteration time)
  double vs_tier_mean = 0;   ///< utilization / its tier's mean utilization (0 when the mean is 0)
};

/// One tier's links.
struct TierTraffic {
  std::string tier;
  int64_t links = 0;  ///< every link of the tier on the platform, idle ones included
  double bytes_total = 0, bytes_mean = 0, bytes_max = 0;
  double utilization_mean = 0, utilization_p99 = 0, utilization_max = 0;
};

/// A link's utilization over the iteration, in equal time bins.
struct LinkSeries {
  std::string name;
  std::string tier;
  double bin_s = 0;                ///< width of a bin
  std::vector<double> utilization;  ///< per bin: bytes in the bin / (bandwidth x bin_s)
};

/// The tiers of `links` (every link of the platform with its bytes and utilization), in the
/// order nvlink, nic, leaf-spine, spine-core, then others by name; links of tier "loopback" are
/// left out. p99 is the nearest-rank percentile (the ceil(0.99 n)-th smallest utilization).
std::vector<TierTraffic> tier_traffic(const std::vector<LinkLoad>& links);

/// The links hot relative to their tier: utilization at least `factor` x the tier's mean (and
/// > 0), most above their tier first (ties: by name), at most `top`; vs_tier_mean filled in.
/// When every link of a tier carries the same load, none of them is hot.
std::vector<LinkLoad> hot_links(const std::vector<LinkLoad>& links,
                                const std::vector<TierTraffic>& tiers, double factor = 2.0,
                                size_t top = 10);

/// A flow's sending rate over time, piecewise constant: `rate_Bps` from `t_s` (seconds of
/// simulated time) until the next step or the flow's end; 0 before the first step (its route
/// latency, or a wait in SimGrid's solver). sim/flow_network.hpp records them.
struct RateStep {
  double t_s = 0;
  double rate_Bps = 0;
};

/// Adds the bytes a flow sent, as its rate `steps` (ordered by t_s) say, until `end_s` to
/// `series` (bins of series.bin_s from 0) as utilization of a link of `bandwidth_Bps`: each bin
/// gets exactly the integral of the rate over the bin, so the flows that share the link (their
/// rates summing to at most its bandwidth, as max-min gives them) never fill a bin above 1. Bytes
/// sent outside [0, bins x bin_s) are left out.
void add_to_series(LinkSeries& series, double bandwidth_Bps, std::span<const RateStep> steps,
                   double end_s);

}  // namespace traintwin
