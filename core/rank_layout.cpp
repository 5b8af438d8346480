#include "core/rank_layout.hpp"

#include <algorithm>
#include <sstream>

#include "core/error.hpp"
#include "core/scenario.hpp"

namespace traintwin {
namespace {

constexpr std::array<const char*, 5> kDimNames = {"tp", "cp", "ep", "dp", "pp"};
constexpr int kTp = 0, kCp = 1, kEp = 2, kDp = 3, kPp = 4;

/// The dims a group of kind `g` spans, and whether it is an expert-generator group.
struct GroupDims {
  std::array<bool, 5> in{};
  bool expert = false;
};

GroupDims dims_of(GroupKind g) {
  GroupDims d;
  switch (g) {
    case GroupKind::kTp: d.in[kTp] = true; break;
    case GroupKind::kCp: d.in[kCp] = true; break;
    case GroupKind::kDp: d.in[kDp] = true; break;
    case GroupKind::kPp: d.in[kPp] = true; break;
    case GroupKind::kDpCp: d.in[kDp] = d.in[kCp] = true; break;
    case GroupKind::kEmbedding: d.in[kPp] = true; break;
    case GroupKind::kModelParallel: d.in[kTp] = d.in[kPp] = true; break;
    case GroupKind::kWorld: d.in = {true, true, true, true, true}; break;
    case GroupKind::kEp: d.in[kEp] = true; d.expert = true; break;
    case GroupKind::kEtp: d.in[kTp] = true; d.expert = true; break;
    case GroupKind::kEdp: d.in[kDp] = true; d.expert = true; break;
    case GroupKind::kEtpEp: d.in[kTp] = d.in[kEp] = true; d.expert = true; break;
    // Cut from the DP x CP group (RankLayout::hsdp_group), not a product of dims.
    case GroupKind::kDpShard:
    case GroupKind::kDpReplica: d.in[kDp] = d.in[kCp] = true; break;
    case GroupKind::kTpDpCp: d.in[kTp] = d.in[kDp] = d.in[kCp] = true; break;
    // Ranks r and p - 1 - r (RankLayout::group), not a product of dims.
    case GroupKind::kPpMirror: d.in[kPp] = true; break;
  }
  return d;
}

}  // namespace

const char* to_string(GroupKind g) {
  switch (g) {
    case GroupKind::kTp: return "tp";
    case GroupKind::kCp: return "cp";
    case GroupKind::kDp: return "dp";
    case GroupKind::kPp: return "pp";
    case GroupKind::kDpCp: return "dp-cp";
    case GroupKind::kEmbedding: return "embd";
    case GroupKind::kModelParallel: return "mp";
    case GroupKind::kWorld: return "world";
    case GroupKind::kEp: return "ep";
    case GroupKind::kEtp: return "etp";
    case GroupKind::kEdp: return "edp";
    case GroupKind::kEtpEp: return "etp-ep";
    case GroupKind::kDpShard: return "dp-shard";
    case GroupKind::kDpReplica: return "dp-replica";
    case GroupKind::kTpDpCp: return "tp-dp-cp";
    case GroupKind::kPpMirror: return "pp-mirror";
  }
  return "?";
}

RankLayout::RankLayout(int64_t tp, int64_t cp, int64_t dp, int64_t pp, const std::string& order,
                       int64_t ep, int64_t etp, int64_t dp_replicas)
    : tp_(tp), cp_(cp), dp_(dp), pp_(pp), ep_(ep), etp_(etp == 0 ? tp : etp), edp_(1),
      dp_replicas_(dp_replicas), order_(order) {
  if (tp < 1 || cp < 1 || dp < 1 || pp < 1 || ep < 1 || etp < 0 || dp_replicas < 1) {
    std::ostringstream m;
    m << "rank layout: every parallel size must be >= 1 (tp=" << tp << ", cp=" << cp
      << ", dp=" << dp << ", pp=" << pp << ", ep=" << ep << ", etp=" << etp
      << ", dp_replicas=" << dp_replicas << ")";
    throw InvalidArgument(m.str());
  }
  if ((dp_ * cp_) % dp_replicas_ != 0) {
    std::ostringstream m;
    m << "rank layout: the HSDP replica count (" << dp_replicas_ << ") must divide dp x cp ("
      << dp_ << " x " << cp_ << ")";
    throw InvalidArgument(m.str());
  }
  if ((tp_ * cp_ * dp_) % (etp_ * ep_) != 0) {
    std::ostringstream m;
    m << "rank layout: expert-tensor-parallel x expert-model-parallel size (" << etp_ << " x "
      << ep_ << ") must divide tp x cp x dp (" << tp_ << " x " << cp_ << " x " << dp_
      << ", the ranks of one pipeline stage; Megatron-Core parallel folding)";
    throw InvalidArgument(m.str());
  }
  edp_ = tp_ * cp_ * dp_ / (etp_ * ep_);
  dense_size_ = {tp_, cp_, 1, dp_, pp_};
  expert_size_ = {etp_, 1, ep_, edp_, pp_};
  // Parse "tp-cp-ep-dp-pp": a permutation of the five names, dash separated.
  std::vector<std::string> parts;
  std::string cur;
  for (char ch : order) {
    if (ch == '-') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  parts.push_back(cur);
  const std::string rule = "rank order '" + order +
                           "' is not a permutation of tp, cp, ep, dp, pp (dash-separated, "
                           "fastest-varying first, e.g. tp-cp-ep-dp-pp; a dimension of size 1 "
                           "may be left out)";
  std::array<bool, 5> seen{};
  size_t pos = 0;
  for (const std::string& part : parts) {
    auto it = std::find(kDimNames.begin(), kDimNames.end(), part);
    if (it == kDimNames.end()) throw InvalidArgument(rule + ": unknown dimension '" + part + "'");
    int dim = static_cast<int>(it - kDimNames.begin());
    if (seen[dim]) throw InvalidArgument(rule + ": '" + part + "' appears twice");
    seen[dim] = true;
    dim_of_position_[pos++] = dim;
  }
  // As Megatron's RankGenerator: a dimension left out of the order must have size 1 (in both
  // generators); it is appended (slowest), which changes no rank since its coordinate is 0.
  for (int dim = 0; dim < 5; ++dim) {
    if (seen[dim]) continue;
    const int64_t size = std::max(dense_size_[dim], expert_size_[dim]);
    if (size != 1) {
      throw InvalidArgument(rule + ": " + kDimNames[dim] + " has size " + std::to_string(size) +
                            " but is not in the order");
    }
    dim_of_position_[pos++] = dim;
  }
  // The first dimension in the order varies fastest (Megatron's RankGenerator).
  int64_t dense = 1, expert = 1;
  for (int p = 0; p < 5; ++p) {
    const int dim = dim_of_position_[p];
    dense_stride_[dim] = dense;
    expert_stride_[dim] = expert;
    dense *= dense_size_[dim];
    expert *= expert_size_[dim];
  }
  // Both generators must put every rank on the same pipeline stage, as Megatron-Core asserts
  // (decoder and expert 'pp' groups equal; it holds when the order ends with pp, or when
  // expert-DP = DP). Checked when expert groups are used (check_expert_groups()). A rank's stage
  // is (rank / pp stride) % pp in each generator: with equal strides (or one stage) every rank
  // agrees; otherwise the first rank that does not is the smaller stride (stage 1 in one
  // generator, 0 in the other).
  const int64_t dense_pp = dense_stride_[kPp], expert_pp = expert_stride_[kPp];
  if (pp_ > 1 && dense_pp != expert_pp) {
    expert_error_ = "rank order '" + order + "': the expert groups (etp=" +
                    std::to_string(etp_) + ", ep=" + std::to_string(ep_) + ", expert-dp=" +
                    std::to_string(edp_) + ") would put rank " +
                    std::to_string(std::min(dense_pp, expert_pp)) +
                    " on another pipeline stage than its attention groups; put pp last in "
                    "the order (Megatron-Core requires the same pp groups)";
  }
}

int64_t RankLayout::size(GroupKind g) const {
  switch (g) {
    case GroupKind::kTp: return tp_;
    case GroupKind::kCp: return cp_;
    case GroupKind::kDp: return dp_;
    case GroupKind::kPp: return pp_;
    case GroupKind::kDpCp: return dp_ * cp_;
    case GroupKind::kEmbedding: return pp_ > 1 ? 2 : 1;
    case GroupKind::kModelParallel: return tp_ * pp_;
    case GroupKind::kWorld: return world_size();
    case GroupKind::kEp: return ep_;
    case GroupKind::kEtp: return etp_;
    case GroupKind::kEdp: return edp_;
    case GroupKind::kEtpEp: return etp_ * ep_;
    case GroupKind::kDpShard: return dp_ * cp_ / dp_replicas_;
    case GroupKind::kDpReplica: return dp_replicas_;
    case GroupKind::kTpDpCp: return tp_ * dp_ * cp_;
    case GroupKind::kPpMirror: return pp_ > 1 ? 2 : 1;
  }
  return 0;
}

RankLayout::Dims RankLayout::coords(int64_t rank, bool expert) const {
  if (rank < 0 || rank >= world_size()) {
    throw InvalidArgument("rank " + std::to_string(rank) + " outside [0, " +
                          std::to_string(world_size()) + ")");
  }
  const Dims& size = expert ? expert_size_ : dense_size_;
  const Dims& stride = expert ? expert_stride_ : dense_stride_;
  Dims c{};
  for (int dim = 0; dim < 5; ++dim) c[dim] = (rank / stride[dim]) % size[dim];
  return c;
}

int64_t RankLayout::rank_of(const Dims& c, bool expert) const {
  const Dims& size = expert ? expert_size_ : dense_size_;
  const Dims& stride = expert ? expert_stride_ : dense_stride_;
  int64_t r = 0;
  for (int dim = 0; dim < 5; ++dim) {
    if (c[dim] < 0 || c[dim] >= size[dim]) {
      throw InvalidArgument(std::string("coordinate ") + kDimNames[dim] + "=" +
                            std::to_string(c[dim]) + " outside [0, " + std::to_string(size[dim]) +
                            ")");
    }
    r += c[dim] * stride[dim];
  }
  return r;
}

RankCoord RankLayout::coord(int64_t rank) const {
  const Dims c = coords(rank, false);
  return RankCoord{c[kTp], c[kCp], c[kDp], c[kPp]};
}

void RankLayout::check_expert_groups() const {
  if (!expert_error_.empty()) throw InvalidArgument(expert_error_);
}

ExpertCoord RankLayout::expert_coord(int64_t rank) const {
  check_expert_groups();
  const Dims c = coords(rank, true);
  return ExpertCoord{c[kTp], c[kEp], c[kDp], c[kPp]};
}

int64_t RankLayout::rank(const RankCoord& c) const {
  return rank_of(Dims{c.tp, c.cp, 0, c.dp, c.pp}, false);
}

std::vector<int64_t> RankLayout::first_rank_of_each_stage() const {
  std::vector<int64_t> ranks;
  for (int64_t pp = 0; pp < pp_; ++pp) ranks.push_back(rank(RankCoord{0, 0, 0, pp}));
  return ranks;
}

std::vector<int64_t> RankLayout::hsdp_group(GroupKind g, int64_t rank_id) const {
  // As Megatron-Core's partial data-parallel groups: the DP x CP group (by rank) cut into R
  // blocks of S consecutive members; a replica group takes the member at one position of each.
  const std::vector<int64_t> dp_cp = group(GroupKind::kDpCp, rank_id);
  const int64_t shard = size(GroupKind::kDpShard);
  const auto at = static_cast<int64_t>(std::find(dp_cp.begin(), dp_cp.end(), rank_id) - dp_cp.begin());
  std::vector<int64_t> members;
  if (g == GroupKind::kDpShard) {
    const int64_t block = at / shard;
    for (int64_t i = block * shard; i < (block + 1) * shard; ++i) members.push_back(dp_cp[static_cast<size_t>(i)]);
  } else {
    for (int64_t i = at % shard; i < static_cast<int64_t>(dp_cp.size()); i += shard) {
      members.push_back(dp_cp[static_cast<size_t>(i)]);
    }
  }
  return members;
}

std::vector<int64_t> RankLayout::group(GroupKind g, int64_t rank_id) const {
  if (g == GroupKind::kDpShard || g == GroupKind::kDpReplica) return hsdp_group(g, rank_id);
  std::vector<int64_t> members;
  if (g == GroupKind::kWorld) {
    (void)coords(rank_id, false);  // range check
    for (int64_t r = 0; r < world_size(); ++r) members.push_back(r);
    return members;
  }
  if (g == GroupKind::kPpMirror) {
    Dims low = coords(rank_id, false), high = low;
    low[kPp] = std::min(low[kPp], pp_ - 1 - low[kPp]);
    high[kPp] = pp_ - 1 - low[kPp];
    members.push_back(rank_of(low, false));
    if (high[kPp] != low[kPp]) members.push_back(rank_of(high, false));
    return members;
  }
  if (g == GroupKind::kEmbedding) {
    Dims first = coords(rank_id, false), last = first;
    first[kPp] = 0;
    last[kPp] = pp_ - 1;
    members.push_back(rank_of(first, false));
    if (pp_ > 1) members.push_back(rank_of(last, false));
    return members;
  }
  // Every combination of the group's dims, the others fixed at this rank's coordinates.
  const GroupDims gd = dims_of(g);
  if (gd.expert) check_expert_groups();
  const Dims& size = gd.expert ? expert_size_ : dense_size_;
  const Dims base = coords(rank_id, gd.expert);
  std::vector<Dims> combos = {base};
  for (int dim = 0; dim < 5; ++dim) {
    if (!gd.in[dim]) continue;
    std::vector<Dims> next;
    for (const Dims& c : combos) {
      for (int64_t i = 0; i < size[dim]; ++i) {
        Dims x = c;
        x[dim] = i;
        next.push_back(x);
      }
    }
    combos = std::move(next);
  }
  for (const Dims& c : combos) members.push_back(rank_of(c, gd.expert));
  // One-dimension groups are in increasing coordinate order; larger ones sorted by rank.
  const int spanned = static_cast<int>(std::count(gd.in.begin(), gd.in.end(), true));
  if (spanned > 1) std::sort(members.begin(), members.end());
  return members;
}

std::vector<std::vector<int64_t>> RankLayout::all_groups(GroupKind g) const {
  std::vector<std::vector<int64_t>> groups;
  std::vector<bool> covered(static_cast<size_t>(world_size()), false);
  for (int64_t r = 0; r < world_size(); ++r) {
    if (covered[r]) continue;
    if (g == GroupKind::kEmbedding) {
      // Only first/last stage ranks belong to an embedding group.
      int64_t pp = coord(r).pp;
      if (pp != 0 && pp != pp_ - 1) continue;
    }
    auto members = group(g, r);
    for (int64_t m : members) covered[m] = true;
    groups.push_back(std::move(members));
  }
  return groups;
}

int64_t RankLayout::group_index(GroupKind g, int64_t rank_id) const {
  // The index of a group = rank of its smallest member among groups ordered by smallest member;
  // computed arithmetically from the coordinates outside the group's dimensions.
  if (g == GroupKind::kDpShard || g == GroupKind::kDpReplica) {
    // The DP x CP group's index, then the block (shard) or the position in the block (replica).
    const std::vector<int64_t> dp_cp = group(GroupKind::kDpCp, rank_id);
    const int64_t shard = size(GroupKind::kDpShard);
    const auto at =
        static_cast<int64_t>(std::find(dp_cp.begin(), dp_cp.end(), rank_id) - dp_cp.begin());
    const int64_t base = group_index(GroupKind::kDpCp, rank_id);
    return g == GroupKind::kDpShard ? base * dp_replicas_ + at / shard : base * shard + at % shard;
  }
  if (g == GroupKind::kPpMirror) {
    // The pipeline's index (the groups of kPp), then the pair's lower pipeline rank.
    const int64_t pp = coords(rank_id, false)[kPp];
    return group_index(GroupKind::kPp, rank_id) * ((pp_ + 1) / 2) + std::min(pp, pp_ - 1 - pp);
  }
  const GroupDims gd = dims_of(g);
  if (gd.expert) check_expert_groups();
  const Dims& size = gd.expert ? expert_size_ : dense_size_;
  const Dims c = coords(rank_id, gd.expert);
  // Mixed-radix number over the remaining dims in rank-order significance.
  int64_t index = 0, scale = 1;
  for (int pos = 0; pos < 5; ++pos) {
    int dim = dim_of_position_[pos];
    if (gd.in[dim]) continue;
    index += c[dim] * scale;
    scale *= size[dim];
  }
  return index;
}

RankLayout layout_of(const Scenario& s) {
  const ParallelConfig& p = s.parallel;
  return RankLayout(p.tensor_model_parallel_size, p.context_parallel_size, p.data_parallel_size,
                    p.pipeline_model_parallel_size, p.rank_order, p.expert_model_parallel_size,
                    p.expert_tp(), s.training.num_distributed_optimizer_instances);
}

}  // namespace traintwin
