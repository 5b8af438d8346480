#include "core/rank_layout.hpp"

#include <algorithm>
#include <sstream>

#include "core/error.hpp"

namespace traintwin {
namespace {

constexpr std::array<const char*, 4> kDimNames = {"tp", "cp", "dp", "pp"};
constexpr int kTp = 0, kCp = 1, kDp = 2, kPp = 3;

int64_t get(const RankCoord& c, int dim) {
  switch (dim) {
    case kTp: return c.tp;
    case kCp: return c.cp;
    case kDp: return c.dp;
    default: return c.pp;
  }
}

void set(RankCoord& c, int dim, int64_t v) {
  switch (dim) {
    case kTp: c.tp = v; break;
    case kCp: c.cp = v; break;
    case kDp: c.dp = v; break;
    default: c.pp = v; break;
  }
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
  }
  return "?";
}

RankLayout::RankLayout(int64_t tp, int64_t cp, int64_t dp, int64_t pp, const std::string& order)
    : tp_(tp), cp_(cp), dp_(dp), pp_(pp), order_(order) {
  if (tp < 1 || cp < 1 || dp < 1 || pp < 1) {
    std::ostringstream m;
    m << "rank layout: every parallel size must be >= 1 (tp=" << tp << ", cp=" << cp
      << ", dp=" << dp << ", pp=" << pp << ")";
    throw InvalidArgument(m.str());
  }
  // Parse "tp-cp-dp-pp": a permutation of the four names, dash separated.
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
                           "' is not a permutation of tp, cp, dp, pp (dash-separated, "
                           "fastest-varying first, e.g. tp-cp-dp-pp; a dimension of size 1 may "
                           "be left out)";
  const std::array<int64_t, 4> dim_sizes = {tp_, cp_, dp_, pp_};
  std::array<bool, 4> seen{};
  size_t pos = 0;
  for (const std::string& part : parts) {
    if (part == "ep") throw InvalidArgument(rule + ": expert parallelism (ep) is not supported");
    auto it = std::find(kDimNames.begin(), kDimNames.end(), part);
    if (it == kDimNames.end()) throw InvalidArgument(rule + ": unknown dimension '" + part + "'");
    int dim = static_cast<int>(it - kDimNames.begin());
    if (seen[dim]) throw InvalidArgument(rule + ": '" + part + "' appears twice");
    seen[dim] = true;
    dim_of_position_[pos++] = dim;
  }
  // As Megatron's RankGenerator: a dimension left out of the order must have size 1; it is
  // appended (slowest), which changes no rank since its coordinate is always 0.
  for (int dim = 0; dim < 4; ++dim) {
    if (seen[dim]) continue;
    if (dim_sizes[dim] != 1) {
      throw InvalidArgument(rule + ": " + kDimNames[dim] + " has size " +
                            std::to_string(dim_sizes[dim]) + " but is not in the order");
    }
    dim_of_position_[pos++] = dim;
  }
  // The first dimension in the order varies fastest (Megatron's RankGenerator).
  int64_t stride = 1;
  for (int p = 0; p < 4; ++p) {
    stride_[dim_of_position_[p]] = stride;
    stride *= dim_sizes[dim_of_position_[p]];
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
  }
  return 0;
}

RankCoord RankLayout::coord(int64_t rank) const {
  if (rank < 0 || rank >= world_size()) {
    throw InvalidArgument("rank " + std::to_string(rank) + " outside [0, " +
                          std::to_string(world_size()) + ")");
  }
  const std::array<int64_t, 4> sizes = {tp_, cp_, dp_, pp_};
  RankCoord c;
  for (int dim = 0; dim < 4; ++dim) set(c, dim, (rank / stride_[dim]) % sizes[dim]);
  return c;
}

int64_t RankLayout::rank(const RankCoord& c) const {
  const std::array<int64_t, 4> sizes = {tp_, cp_, dp_, pp_};
  int64_t r = 0;
  for (int dim = 0; dim < 4; ++dim) {
    int64_t v = get(c, dim);
    if (v < 0 || v >= sizes[dim]) {
      throw InvalidArgument(std::string("coordinate ") + kDimNames[dim] + "=" + std::to_string(v) +
                            " outside [0, " + std::to_string(sizes[dim]) + ")");
    }
    r += v * stride_[dim];
  }
  return r;
}

std::vector<int64_t> RankLayout::group(GroupKind g, int64_t rank_id) const {
  const RankCoord base = coord(rank_id);
  std::vector<int64_t> members;
  auto vary = [&](int dim, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      RankCoord c = base;
      set(c, dim, i);
      members.push_back(rank(c));
    }
  };
  switch (g) {
    case GroupKind::kTp: vary(kTp, tp_); break;
    case GroupKind::kCp: vary(kCp, cp_); break;
    case GroupKind::kDp: vary(kDp, dp_); break;
    case GroupKind::kPp: vary(kPp, pp_); break;
    case GroupKind::kDpCp:
      for (int64_t d = 0; d < dp_; ++d) {
        for (int64_t c = 0; c < cp_; ++c) {
          RankCoord x = base;
          x.dp = d;
          x.cp = c;
          members.push_back(rank(x));
        }
      }
      std::sort(members.begin(), members.end());
      break;
    case GroupKind::kModelParallel:
      for (int64_t p = 0; p < pp_; ++p) {
        for (int64_t t = 0; t < tp_; ++t) {
          RankCoord x = base;
          x.pp = p;
          x.tp = t;
          members.push_back(rank(x));
        }
      }
      std::sort(members.begin(), members.end());
      break;
    case GroupKind::kWorld:
      for (int64_t r = 0; r < world_size(); ++r) members.push_back(r);
      break;
    case GroupKind::kEmbedding: {
      RankCoord first = base, last = base;
      first.pp = 0;
      last.pp = pp_ - 1;
      members.push_back(rank(first));
      if (pp_ > 1) members.push_back(rank(last));
      break;
    }
  }
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
  const RankCoord c = coord(rank_id);
  const std::array<int64_t, 4> sizes = {tp_, cp_, dp_, pp_};
  std::array<bool, 4> in_group{};
  switch (g) {
    case GroupKind::kTp: in_group[kTp] = true; break;
    case GroupKind::kCp: in_group[kCp] = true; break;
    case GroupKind::kDp: in_group[kDp] = true; break;
    case GroupKind::kPp: in_group[kPp] = true; break;
    case GroupKind::kDpCp: in_group[kDp] = in_group[kCp] = true; break;
    case GroupKind::kEmbedding: in_group[kPp] = true; break;
    case GroupKind::kModelParallel: in_group[kTp] = in_group[kPp] = true; break;
    case GroupKind::kWorld: in_group = {true, true, true, true}; break;
  }
  // Mixed-radix number over the remaining dims in rank-order significance.
  int64_t index = 0, scale = 1;
  for (int pos = 0; pos < 4; ++pos) {
    int dim = dim_of_position_[pos];
    if (in_group[dim]) continue;
    index += get(c, dim) * scale;
    scale *= sizes[dim];
  }
  return index;
}

}  // namespace traintwin
