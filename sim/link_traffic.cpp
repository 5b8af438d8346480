#include "sim/link_traffic.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace traintwin {
namespace {

int tier_order(const std::string& tier) {
  static const std::map<std::string, int> order = {
      {"nvlink", 0}, {"nic", 1}, {"leaf-spine", 2}, {"spine-core", 3}};
  const auto it = order.find(tier);
  return it == order.end() ? 4 : it->second;
}

}  // namespace

std::vector<TierTraffic> tier_traffic(const std::vector<LinkLoad>& links) {
  std::map<std::pair<int, std::string>, std::vector<const LinkLoad*>> by_tier;
  for (const LinkLoad& l : links) {
    if (l.tier == "loopback") continue;
    by_tier[{tier_order(l.tier), l.tier}].push_back(&l);
  }
  std::vector<TierTraffic> out;
  for (const auto& [key, ls] : by_tier) {
    TierTraffic t;
    t.tier = key.second;
    t.links = static_cast<int64_t>(ls.size());
    std::vector<double> util;
    for (const LinkLoad* l : ls) {
      t.bytes_total += l->bytes;
      t.bytes_max = std::max(t.bytes_max, l->bytes);
      t.utilization_mean += l->utilization;
      t.utilization_max = std::max(t.utilization_max, l->utilization);
      util.push_back(l->utilization);
    }
    const auto n = static_cast<double>(ls.size());
    t.bytes_mean = t.bytes_total / n;
    t.utilization_mean /= n;
    std::sort(util.begin(), util.end());
    const auto rank = static_cast<size_t>(std::ceil(0.99 * n));
    t.utilization_p99 = util[std::max<size_t>(rank, 1) - 1];
    out.push_back(t);
  }
  return out;
}

std::vector<LinkLoad> hot_links(const std::vector<LinkLoad>& links,
                                const std::vector<TierTraffic>& tiers, double factor, size_t top) {
  std::map<std::string, double> mean;
  for (const TierTraffic& t : tiers) mean[t.tier] = t.utilization_mean;
  std::vector<LinkLoad> hot;
  for (const LinkLoad& l : links) {
    const auto it = mean.find(l.tier);
    if (it == mean.end() || !(it->second > 0) || !(l.utilization > 0)) continue;
    // A relative margin so that links equal to their mean up to rounding are never "hot".
    if (l.utilization < factor * it->second * (1 + 1e-9)) continue;
    LinkLoad h = l;
    h.vs_tier_mean = l.utilization / it->second;
    hot.push_back(h);
  }
  std::sort(hot.begin(), hot.end(), [](const LinkLoad& a, const LinkLoad& b) {
    return a.vs_tier_mean != b.vs_tier_mean ? a.vs_tier_mean > b.vs_tier_mean : a.name < b.name;
  });
  if (hot.size() > top) hot.resize(top);
  return hot;
}

void add_to_series(LinkSeries& series, double bandwidth_Bps, std::span<const RateStep> steps,
                   double end_s) {
  if (series.utilization.empty() || !(series.bin_s > 0) || !(bandwidth_Bps > 0)) return;
  const auto bins = static_cast<int64_t>(series.utilization.size());
  const double capacity = bandwidth_Bps * series.bin_s;  // bytes a bin can carry
  const double window_end = static_cast<double>(bins) * series.bin_s;
  for (size_t k = 0; k < steps.size(); ++k) {
    const double rate = steps[k].rate_Bps;
    const double lo = std::max(0.0, steps[k].t_s);
    const double hi = std::min(window_end, k + 1 < steps.size() ? steps[k + 1].t_s : end_s);
    if (!(rate > 0) || !(hi > lo)) continue;
    const int64_t first = std::clamp<int64_t>(static_cast<int64_t>(lo / series.bin_s), 0, bins - 1);
    const int64_t last = std::clamp<int64_t>(static_cast<int64_t>(hi / series.bin_s), 0, bins - 1);
    for (int64_t b = first; b <= last; ++b) {
      const double from = std::max(lo, static_cast<double>(b) * series.bin_s);
      const double to = std::min(hi, static_cast<double>(b + 1) * series.bin_s);
      if (to > from) series.utilization[static_cast<size_t>(b)] += rate * (to - from) / capacity;
    }
  }
}

}  // namespace traintwin
