// Tests of the simulator on a rack-scale NVLink domain (topologies/gb200-nvl72-superpod.yaml:
// GB200 NVL72 racks, 64 of 72 GPUs used): collectives inside one rack take the NVLink 5 closed
// forms, groups across racks go over the rails; the SimGrid platform places rank 64 on rack 1;
// the shipped GB200 scenario simulates end to end. SimGrid tests run one per process (ctest).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <numeric>
#include <simgrid/s4u.hpp>
#include <vector>

#include "sim/analytical.hpp"
#include "sim/collectives.hpp"
#include "sim/cost_model.hpp"
#include "sim/platform.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "platform_transfers.hpp"
#include "simgrid_test_engine.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
namespace sg4 = simgrid::s4u;

const fs::path kSource = fs::path(TRAINTWIN_SOURCE_DIR);

TopologySpec gb200() { return load_topology(kSource / "topologies" / "gb200-nvl72-superpod.yaml"); }

std::vector<int64_t> range(int64_t first, int64_t count) {
  std::vector<int64_t> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// TP 8 all-reduce of S = 1 GiB inside one NVL72 rack (ranks 64..71: rack 1). NVLS (NCCL's choice
// at this size inside a domain with node.nvls): 25 us + S / (B x 0.61), B = 900 GB/s per
// direction (NVLink 5, 1.8 TB/s both ways). Forced ring (Simple at this size): 8.4 us + 2(n-1)
// NVLink steps of 3.4 us + 2(n-1)/n S / (B x 0.80) (NCCL's tuner latencies). No flows: nothing
// leaves the rack.
TEST(NvlinkDomainCollectives, TpAllReduceInsideARackIsTheNvlink5ClosedForm) {
  const TopologySpec t = gb200();
  const FabricEfficiency eff;
  const int64_t S = int64_t{1} << 30;
  const double s = static_cast<double>(S);
  const CollectivePlan nvls = plan_collective(CollectiveKind::kAllReduce, S, range(64, 8), t, eff);
  EXPECT_EQ(nvls.algorithm, CollectiveAlgorithm::kNvls);
  EXPECT_TRUE(nvls.flows.empty());
  const double nvls_expected = 25e-6 + s / (900e9 * 0.61);
  EXPECT_NEAR(nvls.local_time_s, nvls_expected, nvls_expected * 1e-12);
  const CollectivePlan ring =
      plan_collective(CollectiveKind::kAllReduce, S, range(64, 8), t, eff, "ring");
  const double ring_latency = (8.4 + 14 * 3.4) * 1e-6;
  const double ring_expected = ring_latency + 2.0 * 7 / 8 * s / (900e9 * 0.80);
  EXPECT_NEAR(ring.local_time_s, ring_expected, ring_expected * 1e-12);
  EXPECT_TRUE(ring.flows.empty());
  // Twice the DGX H100's NVLink 4 (450 GB/s): the same ring's bandwidth term halves.
  const TopologySpec h100 = load_topology(kSource / "topologies" / "dgx-h100-superpod.yaml");
  const CollectivePlan h100_ring =
      plan_collective(CollectiveKind::kAllReduce, S, range(0, 8), h100, eff, "ring");
  EXPECT_NEAR(h100_ring.local_time_s - ring_latency, 2 * (ring.local_time_s - ring_latency), 1e-12);
  // A 64-GPU group (all used GPUs of a rack, e.g. TP 4 x CP 2 x DP 8) is still one domain.
  EXPECT_TRUE(plan_collective(CollectiveKind::kAllGather, S, range(0, 64), t, eff).flows.empty());
}

// A DP group of one GPU per rack (ranks 0, 64, 128, 192: GPU 0 of racks 0..3, one SU) runs a
// ring over rail 0: flows 0 -> 64 -> 128 -> 192 -> 0 of 2(n-1)/n S / 0.94 bytes each (Simple at
// 256 MiB), one NIC pair and one leaf per flow (2 x 600 ns + 130 ns), NCCL's latency 8.4 us +
// 2(n-1) network steps of the tree's 14 us (one member per node) + the route, 2 x 600 ns +
// 3 x 130 ns.
TEST(NvlinkDomainCollectives, GroupsAcrossRacksGoOverTheRails) {
  const TopologySpec t = gb200();
  const FabricEfficiency eff;
  const int64_t S = int64_t{256} << 20;
  const double s = static_cast<double>(S);
  const std::vector<int64_t> dp = {0, 64, 128, 192};
  const CollectivePlan p = plan_collective(CollectiveKind::kAllReduce, S, dp, t, eff, "ring");
  ASSERT_EQ(p.flows.size(), 4u);
  EXPECT_EQ(p.flows[0].src, 0);
  EXPECT_EQ(p.flows[0].dst, 64);
  EXPECT_EQ(p.flows[3].dst, 0);
  const double flow_bytes = 2.0 * 3 / 4 * s / 0.94;
  EXPECT_NEAR(p.flows[0].bytes, flow_bytes, 1e-6);
  const double net_step = 14e-6 + 2 * 600e-9 + 3 * 130e-9;
  const double expected = (2 * 600e-9 + 130e-9) + flow_bytes / 50e9 + 8.4e-6 + 6 * net_step;
  EXPECT_NEAR(uncontended_time_s(p, t), expected, expected * 1e-9);
}

// SimGrid: rank 64 is GPU 0 of rack 1 (no host for the spares), and its transfer from rank 0
// crosses NIC 0 of both racks on rail 0 and one leaf: S / 50 GB/s + 2 x 600 ns + 130 ns.
TEST(NvlinkDomainPlatform, RankOnTheNextRackIsItsFirstGpu) {
  const TopologySpec t = gb200();
  const auto p = Platform::build(testing::simgrid_test_engine(), t, 128);
  const auto [g0, g63] = p->endpoints(0, 63);
  EXPECT_EQ(g0->get_name(), "node0-gpu0");
  EXPECT_EQ(g63->get_name(), "node0-gpu63");
  EXPECT_DOUBLE_EQ(g0->get_speed(), 2450e12);
  const auto [a, b] = p->endpoints(5, 64 + 9);
  EXPECT_EQ(a->get_name(), "node0-nic5");
  EXPECT_EQ(b->get_name(), "node1-nic5");  // the receiver's NIC of the sender's rail
  const sg4::CommPtr c = testing::transfer(*p, 0, 64, 1e9);
  testing::expect_close(testing::run({c})[0], 1e9 / 50e9 + 2 * 600e-9 + 130e-9, 1e-3);
}

// The shipped GB200 scenario end to end (TP aggregation: under a second): the replay and the
// analytical estimator agree within 5 %, the MFU is against the GB200's 2450 TFLOP/s BF16 peak
// and plausible (NVIDIA published 46.7 % for this layout; the roofline gives more, see
// `traintwin validate ../shared/validation/published-runs-2026.yaml`).
TEST(NvlinkDomainScenario, ShippedGb200ScenarioSimulates) {
  const Scenario s = load_scenario(kSource / "scenarios" / "llama3.1-405b-gb200-256.yaml");
  const TopologySpec t = load_scenario_topology(s);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(t.gpu));
  const SimulationSummary sum = summarize(s, t, simulate(s, t, *costs));
  const IterationMetrics est = estimate(s, t, *costs);
  EXPECT_GT(sum.iteration_time_s, 0);
  EXPECT_NEAR(est.iteration_time_s, sum.iteration_time_s, 0.05 * sum.iteration_time_s);
  EXPECT_GT(sum.mfu, 0.15);
  EXPECT_LT(sum.mfu, 0.75);
  std::printf("llama3.1-405b-gb200-256: %.3f s, MFU %.1f %% (estimator %.3f s)\n",
              sum.iteration_time_s, 100 * sum.mfu, est.iteration_time_s);
}

}  // namespace
}  // namespace traintwin
