// Collective times from measured database rows (sim/measured_collectives.hpp, traces/
// collective_fit.hpp) and their use by plan_collective (FabricEfficiency::measured).
#include "sim/measured_collectives.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "sim/collectives.hpp"
#include "sim_test_support.hpp"

namespace traintwin {
namespace {

// Rows of an ideal alpha-beta link: t = 20 us + bytes / 5 GB/s (all_reduce over 2 ranks) and
// t = 8 us + bytes / 10 GB/s (send_recv over 2 ranks), at nccl-tests sizes 8 B .. 8 MiB x4.
CostDatabase alpha_beta_db() {
  CostDatabase db(CostDbDevice{"AMD EPYC", 2, 2450, 8589934592, std::nullopt, "cpu", 1},
                  CostDbVersions{"n/a", "n/a", "n/a", "n/a", "0.1.0", "OpenBLAS"});
  auto add = [&](const char* op, double alpha_us, double GBps) {
    for (int64_t bytes = 8; bytes <= (int64_t{8} << 20); bytes *= 4) {
      const double t_us = alpha_us + static_cast<double>(bytes) / (GBps * 1e3);
      const double algbw = static_cast<double>(bytes) / (t_us * 1e3);
      db.add(CollectiveMeasurement{op, bytes, 2, 1, std::nullopt, t_us, algbw,
                                   algbw * busbw_factor(std::string(op) == "all_reduce"
                                                            ? CollectiveKind::kAllReduce
                                                            : CollectiveKind::kRingExchange,
                                                        2)});
    }
  };
  add("all_reduce", 20, 5);
  add("send_recv", 8, 10);
  return db;
}

TEST(MeasuredCollectives, AlphaBetaFitRecoversTheLink) {
  const CostDatabase db = alpha_beta_db();
  const MeasuredCollectives m(db, "test");
  const AlphaBeta ar = m.fit(CollectiveKind::kAllReduce, 2);
  EXPECT_NEAR(ar.alpha_s, 20e-6, 1e-9);
  EXPECT_NEAR(ar.beta_Bps, 5e9, 5e9 * 1e-6);
  const AlphaBeta sr = m.fit(CollectiveKind::kRingExchange, 2);
  EXPECT_NEAR(sr.alpha_s, 8e-6, 1e-9);
  EXPECT_NEAR(sr.beta_Bps, 10e9, 10e9 * 1e-6);
  EXPECT_EQ(m.fit(CollectiveKind::kAllGather, 2).beta_Bps, 0.0);  // no rows
  EXPECT_EQ(m.covered(), (std::vector<std::string>{"all_reduce x2", "send_recv x2"}));
}

TEST(MeasuredCollectives, TimesAreTheRowsBetweenAndBeyond) {
  const CostDatabase db = alpha_beta_db();
  const MeasuredCollectives m(db, "test");
  const auto t = [&](int64_t bytes) { return *m.time_s(CollectiveKind::kAllReduce, 2, bytes); };
  EXPECT_DOUBLE_EQ(t(8), db.collectives().front().time_us * 1e-6);  // a row: its time
  EXPECT_NEAR(t(32 * 1024), 20e-6 + 32 * 1024 / 5e9, 1e-12);         // a row
  // Between rows: linear in bytes, which on an alpha-beta link is the law itself.
  EXPECT_NEAR(t(100'000), 20e-6 + 100'000 / 5e9, 1e-10);
  // Beyond the largest row: the fitted bandwidth.
  EXPECT_NEAR(t(int64_t{1} << 30), 20e-6 + (1 << 30) / 5e9, 1e-7);
  // Below the smallest row: its time.
  EXPECT_DOUBLE_EQ(t(1), t(8));
  // Not covered: another op, another group size, nothing to move.
  EXPECT_FALSE(m.time_s(CollectiveKind::kAllGather, 2, 1024));
  EXPECT_FALSE(m.time_s(CollectiveKind::kAllReduce, 4, 1024));
  EXPECT_FALSE(m.time_s(CollectiveKind::kAllReduce, 2, 0));
}

TEST(MeasuredCollectives, PlanTakesMeasuredTimesInsideOneNodeOnly) {
  const TopologySpec topo = testing::h100();
  FabricEfficiency eff;
  const int64_t bytes = 1 << 20;
  const double closed =
      plan_collective(CollectiveKind::kAllReduce, bytes, {0, 1}, topo, eff).local_time_s;
  eff.measured = std::make_shared<const MeasuredCollectives>(alpha_beta_db(), "test");
  const CollectivePlan p = plan_collective(CollectiveKind::kAllReduce, bytes, {0, 1}, topo, eff);
  EXPECT_TRUE(p.flows.empty());
  EXPECT_NEAR(p.local_time_s, 20e-6 + bytes / 5e9, 1e-10);
  EXPECT_NE(p.local_time_s, closed);
  // A group size without rows keeps the closed form.
  FabricEfficiency plain;
  EXPECT_DOUBLE_EQ(
      plan_collective(CollectiveKind::kAllReduce, bytes, {0, 1, 2, 3}, topo, eff).local_time_s,
      plan_collective(CollectiveKind::kAllReduce, bytes, {0, 1, 2, 3}, topo, plain).local_time_s);
  // Across nodes: flows, as without rows (the rows are one node's).
  const CollectivePlan across = plan_collective(CollectiveKind::kAllReduce, bytes, {0, 8}, topo, eff);
  EXPECT_FALSE(across.flows.empty());
}

}  // namespace
}  // namespace traintwin
