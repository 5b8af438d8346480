// Routes around down switches and cables of a rail's fat tree; see sim/fabric_reroute.hpp.
#include "sim/fabric_reroute.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace traintwin {
namespace {

struct Shape {
  int64_t P, c2, Z, c3;
  int64_t sa, sb, pa, pb;
  bool cross;  // different pods of a three-tier rail
};

Shape shape(const FabricPlan& p, int64_t src, int64_t dst) {
  if (src < 0 || dst < 0 || src >= p.num_nodes || dst >= p.num_nodes) {
    throw InvalidArgument(
        fmt::format("fat-tree route: node {} -> {} outside [0, {})", src, dst, p.num_nodes));
  }
  Shape s{};
  s.P = p.spines_per_pod;
  s.c2 = p.cables_leaf_spine;
  s.Z = std::max<int64_t>(p.cores_per_spine, 1);
  s.c3 = std::max<int64_t>(p.cables_spine_core, 1);
  s.sa = src / p.nodes_per_leaf;
  s.sb = dst / p.nodes_per_leaf;
  if (s.sa == s.sb) {
    throw InvalidArgument(fmt::format(
        "fat-tree route: nodes {} and {} share leaf {} (no switch-to-switch hop)", src, dst, s.sa));
  }
  s.pa = s.sa / p.leaves_per_pod;
  s.pb = s.sb / p.leaves_per_pod;
  s.cross = p.tiers == 3 && s.pa != s.pb;
  return s;
}

/// A choice among `n` options: `preferred` when `ok` takes it, else the live options dealt in
/// turn by `spread`; -1 when none is live.
template <typename Ok>
int64_t choose(int64_t n, int64_t preferred, int64_t spread, const Ok& ok) {
  if (ok(preferred)) return preferred;
  std::vector<int64_t> live;
  for (int64_t i = 0; i < n; ++i) {
    if (ok(i)) live.push_back(i);
  }
  if (live.empty()) return -1;
  return live[static_cast<size_t>(spread % static_cast<int64_t>(live.size()))];
}

}  // namespace

RailDown RailDown::all_up(const FabricPlan& p) {
  RailDown d;
  d.leaf.assign(static_cast<size_t>(p.leaves_per_rail), 0);
  d.spine.assign(static_cast<size_t>(p.spines_per_rail()), 0);
  d.core.assign(static_cast<size_t>(p.cores_per_rail()), 0);
  d.leaf_spine.assign(
      static_cast<size_t>(p.leaves_per_rail * p.spines_per_pod * p.cables_leaf_spine), 0);
  d.spine_core.assign(
      static_cast<size_t>(p.spines_per_rail() * p.cores_per_spine * p.cables_spine_core), 0);
  return d;
}

bool RailDown::any_above_leaves() const {
  const auto any = [](const std::vector<char>& v) {
    return std::any_of(v.begin(), v.end(), [](char c) { return c != 0; });
  };
  return any(spine) || any(core) || any(leaf_spine) || any(spine_core);
}

FatTreeRoute d_mod_k_route(const FabricPlan& p, int64_t src, int64_t dst) {
  const Shape s = shape(p, src, dst);
  FatTreeRoute r;
  const int64_t i = dst % (s.P * s.c2);
  r.spine_y = i % s.P;
  r.leaf_spine_up = i / s.P;
  r.leaf_spine_down = src % s.c2;
  if (s.cross) {
    const int64_t k = dst / s.P % (s.Z * s.c3);
    r.core_z = k % s.Z;
    r.spine_core_up = k / s.Z;
    r.spine_core_down = src % s.c3;
  }
  return r;
}

std::optional<FatTreeRoute> route_around(const FabricPlan& p, const RailDown& down, int64_t src,
                                         int64_t dst) {
  const Shape s = shape(p, src, dst);
  const auto is_up = [](const std::vector<char>& v, int64_t i) {
    return v[static_cast<size_t>(i)] == 0;
  };
  const auto leaf_spine = [&](int64_t leaf, int64_t y, int64_t c) {
    return is_up(down.leaf_spine, (leaf * s.P + y) * s.c2 + c);
  };
  const auto spine_core = [&](int64_t spine, int64_t z, int64_t c) {
    return is_up(down.spine_core, (spine * s.Z + z) * s.c3 + c);
  };
  // Down from spine y to the destination leaf: a live parallel cable.
  const auto to_leaf = [&](int64_t y) {
    return choose(s.c2, src % s.c2, src / s.c2, [&](int64_t c) { return leaf_spine(s.sb, y, c); });
  };
  // From the destination pod's spine y back to core z: a live parallel cable.
  const auto core_to_spine = [&](int64_t y, int64_t z) {
    return choose(s.c3, src % s.c3, src / s.c3,
                  [&](int64_t c) { return spine_core(y + s.P * s.pb, z, c); });
  };
  // Up from the source pod's spine y to a core and down to the destination pod's spine y.
  const auto to_core = [&](int64_t y) {
    const int64_t ports = s.Z * s.c3;
    const int64_t d = dst / s.P;
    return choose(ports, d % ports, d / ports, [&](int64_t i) {
      const int64_t z = i % s.Z;
      return is_up(down.core, y + s.P * z) && spine_core(y + s.P * s.pa, z, i / s.Z) &&
             core_to_spine(y, z) >= 0;
    });
  };
  const int64_t ports = s.P * s.c2;
  const int64_t leaf_port = choose(ports, dst % ports, dst / ports, [&](int64_t i) {
    const int64_t y = i % s.P;
    if (!leaf_spine(s.sa, y, i / s.P) || !is_up(down.spine, y + s.P * s.pa)) return false;
    if (to_leaf(y) < 0) return false;
    return !s.cross || (is_up(down.spine, y + s.P * s.pb) && to_core(y) >= 0);
  });
  if (leaf_port < 0) return std::nullopt;
  FatTreeRoute r;
  r.spine_y = leaf_port % s.P;
  r.leaf_spine_up = leaf_port / s.P;
  r.leaf_spine_down = to_leaf(r.spine_y);
  if (s.cross) {
    const int64_t core_port = to_core(r.spine_y);
    r.core_z = core_port % s.Z;
    r.spine_core_up = core_port / s.Z;
    r.spine_core_down = core_to_spine(r.spine_y, r.core_z);
  }
  return r;
}

}  // namespace traintwin
