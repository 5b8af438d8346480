// Per-tier link statistics, hot links and utilization series (sim/link_traffic.hpp), against
// numbers worked by hand.
#include "sim/link_traffic.hpp"

#include <gtest/gtest.h>

namespace traintwin {
namespace {

LinkLoad link(const std::string& name, const std::string& tier, double bytes, double util) {
  LinkLoad l;
  l.name = name;
  l.tier = tier;
  l.bytes = bytes;
  l.bandwidth_Bps = 1e9;
  l.utilization = util;
  return l;
}

TEST(LinkTraffic, TiersCountIdleLinksAndTakeTheNearestRankP99) {
  std::vector<LinkLoad> links;
  for (int i = 0; i < 100; ++i) links.push_back(link("nic" + std::to_string(i), "nic", i, i / 100.0));
  links.push_back(link("nv0", "nvlink", 0, 0));
  links.push_back(link("lo", "loopback", 5, 0.5));
  const auto tiers = tier_traffic(links);
  ASSERT_EQ(tiers.size(), 2u);  // loopback left out, nvlink first
  EXPECT_EQ(tiers[0].tier, "nvlink");
  EXPECT_EQ(tiers[0].links, 1);
  EXPECT_EQ(tiers[1].tier, "nic");
  EXPECT_EQ(tiers[1].links, 100);
  EXPECT_DOUBLE_EQ(tiers[1].bytes_total, 4950);
  EXPECT_DOUBLE_EQ(tiers[1].bytes_mean, 49.5);
  EXPECT_DOUBLE_EQ(tiers[1].bytes_max, 99);
  EXPECT_DOUBLE_EQ(tiers[1].utilization_mean, 0.495);
  EXPECT_DOUBLE_EQ(tiers[1].utilization_p99, 0.98);  // the 99th smallest of 0.00 .. 0.99
  EXPECT_DOUBLE_EQ(tiers[1].utilization_max, 0.99);
}

TEST(LinkTraffic, EqualLinksAreNeverHotAndOutliersAreRankedByTheirTier) {
  std::vector<LinkLoad> even;
  for (int i = 0; i < 10; ++i) even.push_back(link("nic" + std::to_string(i), "nic", 10, 0.025));
  EXPECT_TRUE(hot_links(even, tier_traffic(even)).empty());

  std::vector<LinkLoad> links = even;
  links.push_back(link("nic-hot", "nic", 100, 0.25));  // mean (10 x 0.025 + 0.25) / 11
  links.push_back(link("spine-a", "leaf-spine", 1, 0.01));
  links.push_back(link("spine-b", "leaf-spine", 9, 0.09));  // 1.8x its tier's mean 0.05: not hot
  const auto hot = hot_links(links, tier_traffic(links));
  ASSERT_EQ(hot.size(), 1u);
  EXPECT_EQ(hot[0].name, "nic-hot");
  EXPECT_NEAR(hot[0].vs_tier_mean, 0.25 / ((10 * 0.025 + 0.25) / 11), 1e-12);
}

// Two flows on a 1e9 B/s link, bins of 1 s, worked by hand: A sends alone at 1e9 B/s from 0.5 s,
// B joins at 1.5 s and they share the link (0.5e9 each) until A ends at 2.5 s (1.5e9 bytes); B
// then runs alone at 1e9 until 3.0 s (1e9 bytes). A: 0.5 in bin 0, 0.5 + 0.25 in bin 1, 0.25 in
// bin 2; B: 0.25 in bin 1, 0.25 + 0.5 in bin 2: the link is full in bins 1 and 2, never above.
// (Spreading each flow's bytes evenly over its lifetime, as the series did before, gives bin 1
// 0.75 + 0.333 = 1.083.)
TEST(LinkTraffic, SeriesBinsHoldTheBytesEachFlowSentInThem) {
  LinkSeries s;
  s.bin_s = 1.0;
  s.utilization.assign(4, 0.0);
  const std::vector<RateStep> a = {{0.5, 1e9}, {1.5, 0.5e9}};
  const std::vector<RateStep> b = {{1.5, 0.5e9}, {2.5, 1e9}};
  add_to_series(s, 1e9, a, 2.5);
  EXPECT_DOUBLE_EQ(s.utilization[0], 0.5);
  EXPECT_DOUBLE_EQ(s.utilization[1], 0.75);
  EXPECT_DOUBLE_EQ(s.utilization[2], 0.25);
  add_to_series(s, 1e9, b, 3.0);
  EXPECT_DOUBLE_EQ(s.utilization[0], 0.5);
  EXPECT_DOUBLE_EQ(s.utilization[1], 1.0);
  EXPECT_DOUBLE_EQ(s.utilization[2], 1.0);
  EXPECT_DOUBLE_EQ(s.utilization[3], 0.0);
  // Sent past the bins' end (4 s): left out; a step of rate 0 (a wait) adds nothing.
  add_to_series(s, 1e9, std::vector<RateStep>{{3.5, 0.0}, {3.75, 1e9}}, 5.0);
  EXPECT_DOUBLE_EQ(s.utilization[3], 0.25);
}

}  // namespace
}  // namespace traintwin
