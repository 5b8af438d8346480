// Collective times from measured database rows (sim/measured_collectives.hpp, traces/
// collective_fit.hpp) and their use by plan_collective (FabricEfficiency::measured).
#include "sim/measured_collectives.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "sim/collectives.hpp"
#include "sim_test_support.hpp"

namespace traintwin {
namespace {

// Rows of an ideal alpha-beta link: t = 20 us + bytes / 5 GB/s (all_reduce over 2 ranks) and
// t = 8 us + bytes / 10 GB/s (send_recv over 2 ranks), at nccl-tests sizes 8 B .. 8 MiB x4.
CostDatabase empty_db() {
  return CostDatabase(CostDbDevice{"AMD EPYC", 2, 2450, 8589934592, std::nullopt, "cpu", 1},
                      CostDbVersions{"n/a", "n/a", "n/a", "n/a", "0.1.0", "OpenBLAS"});
}

CostDatabase alpha_beta_db() {
  CostDatabase db = empty_db();
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
  // Beyond the largest row: the top segment continued, on this link the law itself.
  EXPECT_NEAR(t(int64_t{1} << 30), 20e-6 + (1 << 30) / 5e9, 1e-7);
  // Below the smallest row: its time.
  EXPECT_DOUBLE_EQ(t(1), t(8));
  // Not covered: another op, another group size, nothing to move.
  EXPECT_FALSE(m.time_s(CollectiveKind::kAllGather, 2, 1024));
  EXPECT_FALSE(m.time_s(CollectiveKind::kAllReduce, 4, 1024));
  EXPECT_FALSE(m.time_s(CollectiveKind::kAllReduce, 2, 0));
}

// all_reduce rows over 2 ranks of a CPU host whose curve bends where the buffers leave the cache
// (cf. Open MPI on 2 Zen 5 cores: 6 GB/s at 1-4 MB, 1.2 GB/s from 32 MB): `us` at 1, 2, 4, 8
// and 16 MiB.
CostDatabase bent_db(const std::vector<double>& us) {
  CostDatabase db = empty_db();
  int64_t bytes = int64_t{1} << 20;
  for (double t_us : us) {
    const double algbw = static_cast<double>(bytes) / (t_us * 1e3);
    db.add(CollectiveMeasurement{"all_reduce", bytes, 2, 1, std::nullopt, t_us, algbw, algbw});
    bytes *= 2;
  }
  return db;
}

TEST(MeasuredCollectives, BeyondTheLargestRowTheTopSegmentContinues) {
  const int64_t MiB = int64_t{1} << 20;
  // In cache to 4 MiB (100 us per MiB), then 500 us per MiB: 8 MiB 2400 us, 16 MiB 6400 us.
  const MeasuredCollectives m(bent_db({100, 200, 400, 2400, 6400}), "test");
  const auto t = [&](int64_t bytes) { return *m.time_s(CollectiveKind::kAllReduce, 2, bytes); };
  // 64 MiB: 6400 us + 48 MiB x 500 us/MiB = 30,400 us (by hand).
  EXPECT_NEAR(t(64 * MiB), 30'400e-6, 1e-12);
  // The alpha-beta fit, weighing each row's relative error alike, sees the cached sizes: its
  // bandwidth is far above the top segment's 2.1 GB/s, so extending with it would under-predict.
  const AlphaBeta fit = m.fit(CollectiveKind::kAllReduce, 2);
  EXPECT_GT(fit.beta_Bps, 1.5 * static_cast<double>(MiB) / 500e-6);
  EXPECT_LT(6400e-6 + 48 * MiB / fit.beta_Bps, 0.8 * 30'400e-6);
  // A top segment that does not rise (noise): the largest row's algorithm bandwidth,
  // 64 MiB = 4 x 16 MiB -> 4 x 2300 us.
  const MeasuredCollectives flat(bent_db({100, 200, 400, 2400, 2300}), "test");
  EXPECT_NEAR(*flat.time_s(CollectiveKind::kAllReduce, 2, 64 * MiB), 9'200e-6, 1e-12);
  // One size only: the same rule.
  const MeasuredCollectives one(bent_db({100}), "test");
  EXPECT_NEAR(*one.time_s(CollectiveKind::kAllReduce, 2, 8 * MiB), 800e-6, 1e-12);
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
