// Which tokens of a sequence a context-parallel rank holds: Megatron-Core's causal load balance
// (megatron/training/utils.py get_batch_on_this_cp_rank; Transformer Engine's ring attention
// expects it): the s positions are cut into 2 x CP chunks of s / (2 CP), and CP rank r holds
// chunks r and 2 CP - 1 - r, in that order, so that every rank has the same causal attention
// work. Its s / CP local positions map to global ones as
//   global(i) = r c + i                          for i <  c
//             = (2 CP - 1 - r) c + (i - c)       for i >= c,     c = s / (2 CP)
// CP = 1 is the identity. The executor keys dropout masks, RoPE angles, learned positions and
// the causal mask on these global positions, so a CP layout trains the model of one rank.
#pragma once

#include <cstdint>
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace traintwin::exec {

/// The local positions of one CP rank.
struct CpSequence {
  int64_t seq_total = 1;  ///< s, positions of the whole sequence
  int64_t cp = 1;         ///< context-parallel size
  int64_t rank = 0;       ///< this rank's index in its CP group, in [0, cp)

  /// Throws InvalidArgument unless 2 cp divides seq_total (cp > 1) and rank is in [0, cp).
  CpSequence(int64_t seq_total_, int64_t cp_, int64_t rank_)
      : seq_total(seq_total_), cp(cp_), rank(rank_) {
    if (cp < 1 || rank < 0 || rank >= cp || seq_total < 1 ||
        (cp > 1 && seq_total % (2 * cp) != 0)) {
      throw InvalidArgument("context parallelism: sequence of " + std::to_string(seq_total) +
                            " positions on CP rank " + std::to_string(rank) + " of " +
                            std::to_string(cp) + ": 2 x CP must divide the sequence length");
    }
  }
  CpSequence() = default;

  /// Positions held locally: s / CP.
  int64_t local() const { return seq_total / cp; }
  /// Positions of one of the 2 CP chunks.
  int64_t chunk() const { return seq_total / (2 * cp); }
  /// Global position of local position i in [0, local()).
  int64_t global(int64_t i) const {
    if (cp == 1) return i;
    const int64_t c = chunk();
    return i < c ? rank * c + i : (2 * cp - 1 - rank) * c + (i - c);
  }
  /// Global positions of local positions [first, first + n), in order.
  std::vector<int64_t> positions(int64_t first, int64_t n) const {
    std::vector<int64_t> p(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = global(first + i);
    return p;
  }
  /// The maximal runs of consecutive global positions in local positions [first, first + n):
  /// (local start, global start, length) each; at most two.
  struct Run {
    int64_t local, global, length;
  };
  std::vector<Run> runs(int64_t first, int64_t n) const {
    std::vector<Run> out;
    for (int64_t i = first; i < first + n;) {
      const int64_t end = cp == 1 || i >= chunk() ? first + n : std::min(first + n, chunk());
      out.push_back({i, global(i), end - i});
      i = end;
    }
    return out;
  }
  /// Copies this rank's positions of each of `batch` whole sequences ([batch, s]) into `local`
  /// ([batch, s / CP]).
  template <typename T>
  void slice(std::span<T> local_out, std::span<const T> whole, int64_t batch) const {
    const int64_t n = local();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < n; ++i) {
        local_out[static_cast<size_t>(b * n + i)] = whole[static_cast<size_t>(b * seq_total + global(i))];
      }
    }
  }
};

}  // namespace traintwin::exec
