// Rank layout: which (tp, cp, dp, pp) coordinates each global rank has, and the process groups.
// A pure function of the sizes and an order string, as Megatron-LM's RankGenerator
// (megatron/core/parallel_state.py): the first dimension in the order varies fastest.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace traintwin {

/// A process group kind. kDpCp is the combined DP x CP group over which Megatron reduces
/// gradients; kEmbedding is the first and last pipeline stage of one pipeline (tied embedding);
/// kModelParallel is TP x PP (Megatron's model-parallel group, e.g. for the grad norm);
/// kWorld is every rank.
enum class GroupKind { kTp, kCp, kDp, kPp, kDpCp, kEmbedding, kModelParallel, kWorld };

/// "tp" | "cp" | "dp" | "pp" | "dp-cp" | "embd" | "mp" | "world".
const char* to_string(GroupKind g);

/// Coordinates of one rank, each in [0, size of that dimension).
struct RankCoord {
  int64_t tp = 0, cp = 0, dp = 0, pp = 0;
  bool operator==(const RankCoord&) const = default;
};

/// The rank layout for sizes TP, CP, DP, PP and an order such as "tp-cp-dp-pp".
class RankLayout {
 public:
  /// Throws InvalidArgument when a size is < 1 or `order` is not a dash-separated permutation of
  /// tp, cp, dp, pp; as in Megatron, a dimension of size 1 may be left out of the order, and ep
  /// (expert parallelism) is rejected as not supported.
  RankLayout(int64_t tp, int64_t cp, int64_t dp, int64_t pp, const std::string& order = "tp-cp-dp-pp");

  int64_t world_size() const { return tp_ * cp_ * dp_ * pp_; }
  int64_t size(GroupKind g) const;  ///< members of one group of kind g
  const std::string& order() const { return order_; }

  /// Coordinates of `rank` (0 <= rank < world_size(), else InvalidArgument).
  RankCoord coord(int64_t rank) const;
  /// Global rank of `c` (inverse of coord()).
  int64_t rank(const RankCoord& c) const;

  /// The group of kind `g` that contains `rank`, members in increasing coordinate order
  /// (for kPp: stage 0 first; for kEmbedding: {first stage, last stage}, one member when PP == 1).
  std::vector<int64_t> group(GroupKind g, int64_t rank) const;
  /// Index of that group among all groups of kind `g`, in the order of their smallest rank
  /// (0 .. number of groups - 1; for kEmbedding, world/PP groups).
  int64_t group_index(GroupKind g, int64_t rank) const;
  /// All groups of kind `g`, each sorted as group(), ordered by their smallest rank.
  std::vector<std::vector<int64_t>> all_groups(GroupKind g) const;

 private:
  int64_t tp_, cp_, dp_, pp_;
  std::string order_;
  std::array<int, 4> dim_of_position_{};  // position in order -> dim index (0 tp,1 cp,2 dp,3 pp)
  std::array<int64_t, 4> stride_{};        // stride of dim index in the global rank
};

}  // namespace traintwin
