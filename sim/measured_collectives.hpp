// Collective times from measured rows (`traintwin profile --collectives`: nccl-tests columns in
// the cost database) instead of the closed forms of sim/collectives.hpp, for the op and group
// size the rows cover.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/program.hpp"
#include "traces/collective_fit.hpp"
#include "traces/cost_db.hpp"

namespace traintwin {

/// The collective rows of one database, per (op, ranks): rows of one node (or no node count).
class MeasuredCollectives {
 public:
  /// The rows of `db` with nodes absent or 1, grouped by (op, ranks); `origin` names the
  /// database in source strings.
  MeasuredCollectives(const CostDatabase& db, std::string origin);

  /// Time in seconds of `kind` over `ranks` ranks of one node moving `bytes` (nccl-tests size):
  /// nullopt when no row has that op and group size (or bytes <= 0, ranks < 2). Between two
  /// measured sizes: linear in bytes between them (exact at the rows). Below the smallest: its
  /// time (latency-bound). Above the largest: the segment between the two largest sizes
  /// continued, t = t_r + (t_r - t_q) (bytes - bytes_r) / (bytes_r - bytes_q), i.e. the marginal
  /// bandwidth at the top of the measured curve (the largest row's time scaled by the bytes
  /// ratio when there is one size only or the top segment does not rise). Not the alpha-beta
  /// fit's beta: that fit weighs every row's relative error alike, so its bandwidth is set by
  /// the mid sizes, which on a CPU host still run in cache (Open MPI on 2 Zen 5 cores: 6 GB/s
  /// all_reduce at 1-4 MB, 1.2 GB/s from 32 MB up, where a 204 MB gradient bucket lands).
  /// A ring_exchange is looked up as send_recv.
  std::optional<double> time_s(CollectiveKind kind, int64_t ranks, int64_t bytes) const;

  /// The alpha-beta fit of (op, ranks) ({0, 0} without at least two sizes).
  AlphaBeta fit(CollectiveKind kind, int64_t ranks) const;
  /// Ops and group sizes with rows: "all_reduce x2", ... in key order.
  std::vector<std::string> covered() const;
  bool empty() const { return rows_.empty(); }
  const std::string& origin() const { return origin_; }

 private:
  struct Series {
    std::vector<std::pair<double, double>> points;  // (bytes, seconds), bytes ascending
    AlphaBeta fit;
  };
  const Series* series(CollectiveKind kind, int64_t ranks) const;
  std::map<std::pair<std::string, int64_t>, Series> rows_;
  std::string origin_;
};

}  // namespace traintwin
