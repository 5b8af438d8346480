// Collective times from measured rows; see measured_collectives.hpp.
#include "sim/measured_collectives.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace traintwin {
namespace {

std::string op_name(CollectiveKind kind) {
  return kind == CollectiveKind::kRingExchange ? "send_recv" : to_string(kind);
}

}  // namespace

MeasuredCollectives::MeasuredCollectives(const CostDatabase& db, std::string origin)
    : origin_(std::move(origin)) {
  std::map<std::pair<std::string, int64_t>, std::vector<CollectiveMeasurement>> grouped;
  for (const CollectiveMeasurement& c : db.collectives()) {
    if (c.nodes && *c.nodes != 1) continue;
    grouped[{c.op, c.ranks}].push_back(c);
  }
  for (auto& [key, rows] : grouped) {
    Series s;
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
    for (const CollectiveMeasurement& c : rows) {
      // Rows of one size with several algorithms: keep the fastest, as NCCL's tuner picks.
      const double b = static_cast<double>(c.bytes), t = c.time_us * 1e-6;
      if (!s.points.empty() && s.points.back().first == b) {
        s.points.back().second = std::min(s.points.back().second, t);
      } else {
        s.points.emplace_back(b, t);
      }
    }
    s.fit = fit_alpha_beta(rows);
    rows_.emplace(key, std::move(s));
  }
}

const MeasuredCollectives::Series* MeasuredCollectives::series(CollectiveKind kind,
                                                               int64_t ranks) const {
  const auto it = rows_.find({op_name(kind), ranks});
  return it == rows_.end() ? nullptr : &it->second;
}

std::optional<double> MeasuredCollectives::time_s(CollectiveKind kind, int64_t ranks,
                                                  int64_t bytes) const {
  if (ranks < 2 || bytes <= 0) return std::nullopt;
  const Series* s = series(kind, ranks);
  if (s == nullptr || s->points.empty()) return std::nullopt;
  const auto& p = s->points;
  const double x = static_cast<double>(bytes);
  const auto hi = std::lower_bound(p.begin(), p.end(), x,
                                   [](const auto& pt, double v) { return pt.first < v; });
  if (hi != p.end() && hi->first == x) return hi->second;
  if (hi != p.begin() && hi != p.end()) {
    const auto& [x0, t0] = *(hi - 1);
    const auto& [x1, t1] = *hi;
    return t0 + (t1 - t0) * (x - x0) / (x1 - x0);
  }
  if (hi == p.begin()) return p.front().second;  // below the smallest size: latency-bound
  // Above the largest size: the last segment continued (the marginal cost per byte at the top
  // of the measured curve), else the largest row's algorithm bandwidth.
  const auto& [xr, tr] = p.back();
  if (p.size() >= 2) {
    const auto& [xq, tq] = p[p.size() - 2];
    if (tr > tq) return tr + (tr - tq) * (x - xr) / (xr - xq);
  }
  return tr * x / xr;
}

AlphaBeta MeasuredCollectives::fit(CollectiveKind kind, int64_t ranks) const {
  const Series* s = series(kind, ranks);
  return s == nullptr ? AlphaBeta{} : s->fit;
}

std::vector<std::string> MeasuredCollectives::covered() const {
  std::vector<std::string> out;
  for (const auto& [key, s] : rows_) out.push_back(fmt::format("{} x{}", key.first, key.second));
  return out;
}

}  // namespace traintwin
