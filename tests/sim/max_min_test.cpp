// Tests of sim/max_min: weighted max-min rates worked by hand (one shared link split by
// penalties; a bottleneck that fixes some flows and leaves the rest of another link to the
// others; a flow's own bound), the invariants of a max-min allocation on a random instance
// (no link over capacity, every flow crosses a saturated link where it has the largest
// rate x penalty, or runs at its bound), and the errors.
#include "sim/max_min.hpp"

#include <gtest/gtest.h>

#include <random>

#include "core/error.hpp"

namespace traintwin {
namespace {

std::vector<double> solve(const std::vector<std::vector<uint32_t>>& links,
                          const std::vector<double>& penalty, const std::vector<double>& bound,
                          const std::vector<double>& capacity) {
  std::vector<MaxMinFlow> flows;
  for (size_t i = 0; i < links.size(); ++i) flows.push_back({links[i], penalty[i], bound[i]});
  std::vector<double> rate(flows.size(), -1);
  MaxMinScratch scratch;
  weighted_max_min(flows, capacity, rate, scratch);
  return rate;
}

// One link of 3 GB/s, penalties 1 and 2 (CM02: route latencies 1 and 2 us): rates go as 1 /
// penalty, 2 and 1 GB/s.
TEST(MaxMin, OneLinkSharedInInverseProportionToPenalty) {
  const auto r = solve({{0}, {0}}, {1e-6, 2e-6}, {1e12, 1e12}, {3e9});
  EXPECT_NEAR(r[0], 2e9, 1e-3);
  EXPECT_NEAR(r[1], 1e9, 1e-3);
}

// Link A (10) carries f1, f2; link B (4) carries f2, f3; equal penalties. B's share 2 is the
// least: f2 = f3 = 2; A has 8 left for f1 alone.
TEST(MaxMin, BottleneckFixesItsFlowsAndLeavesTheRestToOthers) {
  const auto r = solve({{0}, {0, 1}, {1}}, {1, 1, 1}, {100, 100, 100}, {10, 4});
  EXPECT_DOUBLE_EQ(r[0], 8);
  EXPECT_DOUBLE_EQ(r[1], 2);
  EXPECT_DOUBLE_EQ(r[2], 2);
}

// A flow's bound (its route's slowest link, here below its share) fixes it first; the link's
// rest goes to the other flow: 10 = 3 + 7.
TEST(MaxMin, BoundBelowTheShareFixesTheFlowAtItsBound) {
  const auto r = solve({{0}, {0}}, {1, 1}, {3, 100}, {10});
  EXPECT_DOUBLE_EQ(r[0], 3);
  EXPECT_DOUBLE_EQ(r[1], 7);
  const auto alone = solve({{}}, {1}, {5}, {});
  EXPECT_DOUBLE_EQ(alone[0], 5);
}

// 40 flows over 3 of 12 links with penalties 1..4: no link over capacity, and each flow is
// bottlenecked (max-min's definition, weighted): it runs at its bound, or it crosses a
// saturated link on which no flow has a larger rate x penalty.
TEST(MaxMin, RandomInstanceIsAWeightedMaxMinAllocation) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> link(0, 11);
  std::uniform_int_distribution<int> pen(1, 4);
  std::uniform_real_distribution<double> cap(1, 10);
  std::vector<std::vector<uint32_t>> links(40);
  std::vector<double> penalty(40), bound(40), capacity(12);
  for (double& c : capacity) c = cap(rng);
  for (size_t i = 0; i < 40; ++i) {
    while (links[i].size() < 3) {
      const uint32_t l = link(rng);
      if (std::find(links[i].begin(), links[i].end(), l) == links[i].end()) links[i].push_back(l);
    }
    penalty[i] = pen(rng);
    bound[i] = i % 5 == 0 ? 0.2 : 100;
  }
  const auto r = solve(links, penalty, bound, capacity);
  std::vector<double> used(12, 0), top(12, 0);
  for (size_t i = 0; i < 40; ++i) {
    EXPECT_GT(r[i], 0);
    EXPECT_LE(r[i], bound[i] * (1 + 1e-12));
    for (uint32_t l : links[i]) {
      used[l] += r[i];
      top[l] = std::max(top[l], r[i] * penalty[i]);
    }
  }
  for (size_t l = 0; l < 12; ++l) EXPECT_LE(used[l], capacity[l] * (1 + 1e-12)) << "link " << l;
  for (size_t i = 0; i < 40; ++i) {
    bool bottlenecked = r[i] >= bound[i] * (1 - 1e-12);
    for (uint32_t l : links[i]) {
      if (used[l] >= capacity[l] * (1 - 1e-12) && r[i] * penalty[i] >= top[l] * (1 - 1e-12)) {
        bottlenecked = true;
      }
    }
    EXPECT_TRUE(bottlenecked) << "flow " << i;
  }
}

TEST(MaxMin, BadInputIsRefused) {
  EXPECT_THROW(solve({{1}}, {1}, {1}, {1}), InvalidArgument);  // link out of range
  EXPECT_THROW(solve({{0}}, {0}, {1}, {1}), InvalidArgument);  // penalty
  EXPECT_THROW(solve({{0}}, {1}, {0}, {1}), InvalidArgument);  // bound
  EXPECT_THROW(solve({{0}}, {1}, {1}, {0}), InvalidArgument);  // capacity
  std::vector<MaxMinFlow> flows(2);
  std::vector<double> rate(1);
  MaxMinScratch scratch;
  EXPECT_THROW(weighted_max_min(flows, {}, rate, scratch), InvalidArgument);
}

}  // namespace
}  // namespace traintwin
