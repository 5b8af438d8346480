// Rank layout: which (tp, cp, dp, pp) coordinates each global rank has, and the process groups.
// A pure function of the sizes and an order string, as Megatron-LM's RankGenerator
// (megatron/core/parallel_state.py): the first dimension in the order varies fastest.
// Expert parallelism follows Megatron-Core's parallel folding: the same ranks are regrouped by a
// second generator (expert_decoder_rank_generator) with sizes tp = ETP, cp = 1, ep = EP,
// dp = expert-DP, pp = PP and the same order string, so expert groups are formed independently
// of the attention groups (EP x ETP x expert-DP = TP x CP x DP ranks of each pipeline stage).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace traintwin {

/// A process group kind. kDpCp is the combined DP x CP group over which Megatron reduces
/// gradients; kEmbedding is the first and last pipeline stage of one pipeline (tied embedding);
/// kModelParallel is TP x PP (Megatron's model-parallel group, e.g. for the grad norm);
/// kWorld is every rank; kTpDpCp is TP x DP x CP (the ranks of one pipeline stage: Megatron's
/// tensor-and-data-parallel group with CP, which get_amax_reduction_group(with_context_parallel=
/// True) returns for FP8's amax reduction). Expert groups (from the expert generator): kEp the expert-model-parallel
/// group (the routed experts are split over it; the all-to-all dispatch runs in it), kEtp the
/// expert-tensor-parallel group, kEdp the expert-data-parallel group (expert gradients are
/// reduced over it), kEtpEp the ETP x EP group (the allgather token dispatcher's group).
/// HSDP groups (Megatron-Core's num_distributed_optimizer_instances R, parallel_state.py's
/// intra/inter partial data-parallel groups with CP): kDpShard is one of the R blocks of
/// DP x CP / R consecutive members of a DP x CP group (sharded state is split inside it: the
/// reduce-scatter of gradients, the all-gather of parameters), kDpReplica the R members at one
/// position of the R blocks (the all-reduce of gradient shards across the replicas). With R = 1
/// kDpShard is the DP x CP group and kDpReplica a single rank.
/// kPpMirror is the pair of pipeline ranks r and p - 1 - r of one pipeline (the other
/// coordinates equal): under DualPipe both hold the parameters of stages r and p - 1 - r (one
/// copy per direction), and their gradients are summed over it (deepseek-ai/DualPipe,
/// examples/example_dualpipe.py). One member for PP = 1 and for the middle rank of an odd PP.
enum class GroupKind {
  kTp, kCp, kDp, kPp, kDpCp, kEmbedding, kModelParallel, kWorld, kEp, kEtp, kEdp, kEtpEp,
  kDpShard, kDpReplica, kTpDpCp, kPpMirror
};
/// Number of GroupKind values (the size of per-kind arrays).
inline constexpr size_t kNumGroupKinds = 16;

/// "tp" | "cp" | "dp" | "pp" | "dp-cp" | "embd" | "mp" | "world" | "ep" | "etp" | "edp" |
/// "etp-ep" | "dp-shard" | "dp-replica" | "tp-dp-cp" | "pp-mirror".
const char* to_string(GroupKind g);

/// Coordinates of one rank, each in [0, size of that dimension).
struct RankCoord {
  int64_t tp = 0, cp = 0, dp = 0, pp = 0;
  bool operator==(const RankCoord&) const = default;
};

/// Coordinates of one rank in the expert generator, each in [0, size of that dimension).
struct ExpertCoord {
  int64_t etp = 0, ep = 0, edp = 0, pp = 0;
  bool operator==(const ExpertCoord&) const = default;
};

/// The rank layout for sizes TP, CP, DP, PP (and EP, ETP) and an order such as "tp-cp-ep-dp-pp".
class RankLayout {
 public:
  /// `ep`: expert-model-parallel size; `etp`: expert-tensor-parallel size, 0 = tp. The
  /// expert-data-parallel size is tp x cp x dp / (etp x ep). `dp_replicas`: the HSDP replica
  /// count R (kDpShard groups of dp x cp / R ranks, kDpReplica groups of R ranks).
  /// Throws InvalidArgument when a size is < 1 (etp < 0), etp x ep does not divide tp x cp x dp,
  /// dp_replicas does not divide dp x cp, or `order` is not a dash-separated permutation of tp,
  /// cp, ep, dp, pp; as in Megatron, a dimension of size 1 (in both generators) may be left out
  /// of the order.
  RankLayout(int64_t tp, int64_t cp, int64_t dp, int64_t pp, const std::string& order = "tp-cp-dp-pp",
             int64_t ep = 1, int64_t etp = 0, int64_t dp_replicas = 1);

  int64_t world_size() const { return tp_ * cp_ * dp_ * pp_; }
  int64_t size(GroupKind g) const;  ///< members of one group of kind g
  const std::string& order() const { return order_; }

  /// Coordinates of `rank` (0 <= rank < world_size(), else InvalidArgument).
  RankCoord coord(int64_t rank) const;
  /// Global rank of `c` (inverse of coord()).
  int64_t rank(const RankCoord& c) const;
  /// The rank of TP, CP and DP rank 0 of every pipeline stage, in stage order: one rank per
  /// stage, whose Program the other ranks of the stage repeat (profile's targets, simulate's
  /// default timeline ranks).
  std::vector<int64_t> first_rank_of_each_stage() const;
  /// Coordinates of `rank` in the expert generator (0 <= rank < world_size(), else
  /// InvalidArgument; also check_expert_groups()).
  ExpertCoord expert_coord(int64_t rank) const;
  /// Throws InvalidArgument when the expert generator would put a rank on another pipeline
  /// stage than the attention generator (an order with pp before another dimension whose
  /// sizes differ between the two; Megatron-Core asserts equal pp groups). Dense models never
  /// need the expert groups, so the constructor does not throw for it; group(), group_index(),
  /// all_groups() of an expert kind and expert_coord() do.
  void check_expert_groups() const;

  /// The group of kind `g` that contains `rank`, members in increasing coordinate order
  /// (for kPp: stage 0 first; for kEmbedding: {first stage, last stage}, one member when PP == 1;
  /// for kPpMirror: {stage min(pp, PP - 1 - pp), stage PP - 1 - that}, one member when equal).
  std::vector<int64_t> group(GroupKind g, int64_t rank) const;
  /// Index of that group among all groups of kind `g`, in the order of their smallest rank
  /// (0 .. number of groups - 1; for kEmbedding, world/PP groups). kDpShard and kDpReplica:
  /// the DP x CP group's index x R + the block (x DP x CP / R + the position in the block), dense
  /// in 0 .. number of groups - 1 but not ordered by smallest rank; kPpMirror: the kPp group's
  /// index x ceil(PP / 2) + min(pp, PP - 1 - pp), likewise.
  int64_t group_index(GroupKind g, int64_t rank) const;
  /// All groups of kind `g`, each sorted as group(), ordered by their smallest rank.
  std::vector<std::vector<int64_t>> all_groups(GroupKind g) const;

 private:
  using Dims = std::array<int64_t, 5>;  // indexed 0 tp, 1 cp, 2 ep, 3 dp, 4 pp
  Dims coords(int64_t rank, bool expert) const;
  int64_t rank_of(const Dims& c, bool expert) const;

  /// kDpShard / kDpReplica members of `rank`: cut from its DP x CP group.
  std::vector<int64_t> hsdp_group(GroupKind g, int64_t rank) const;

  int64_t tp_, cp_, dp_, pp_, ep_, etp_, edp_, dp_replicas_;
  std::string order_;
  std::string expert_error_;  // why the expert groups are unusable ("" = usable)
  std::array<int, 5> dim_of_position_{};  // position in order -> dim index
  Dims dense_size_{}, expert_size_{};     // sizes of the two generators
  Dims dense_stride_{}, expert_stride_{};  // stride of each dim in the global rank
};

struct Scenario;
/// The layout of a scenario's ranks: its parallelism sizes, rank_order, EP and ETP.
RankLayout layout_of(const Scenario& s);

}  // namespace traintwin
