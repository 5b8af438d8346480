// What-if knobs in the engine (cluster.what_if): bandwidth tiers, GPU speed, a straggler rank and
// a degraded link, each checked against its closed form or critical path. Several simulations per
// test: each runs in a child process (run_isolated), since SimGrid allows one engine per process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim_test_support.hpp"
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Link.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/platform.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "sim/summary_document.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using testing::h100;

using testing::TableCostModel;

/// PP stages x DP replicas filling one 8-GPU node (DP = 8 / PP), m micro-batches per pipeline.
Scenario pipeline_scenario(int64_t pp, int64_t m) {
  Scenario s;
  s.name = "pipeline";
  s.model = ModelSpec{"gpt", 2 * pp, 64, 8, 256, 32, 1024};
  s.parallel.pipeline_model_parallel_size = pp;
  s.parallel.data_parallel_size = 8 / pp;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = m * (8 / pp);
  s.cluster.num_gpus = 8;
  return s;
}

/// Runs `simulate` in a child process and returns its iteration time in seconds.
double iteration_time_s(const std::function<SimulationResult()>& simulate_once) {
  return std::stod(run_isolated([&] {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", simulate_once().iteration_time_s);
    return std::string(buf);
  }));
}

/// A Program of `layout` where every rank runs one collective of `bytes` on `group`.
Program one_collective(const RankLayout& layout, GroupKind group, int64_t bytes) {
  return testing::one_collective(pipeline_scenario(1, 1), layout, group, bytes);
}

/// Simulates `prog` with the knobs of `what_if` (on top of `opts`) in a child process.
double program_time_s(const Program& prog, const WhatIf& what_if, SimulationOptions opts = {},
                      const CostModel* costs = nullptr) {
  opts.record_timeline = false;
  const TableCostModel free;
  return iteration_time_s([&] {
    return simulate_program(prog, h100(), costs ? *costs : free, with_what_if(opts, what_if));
  });
}

WhatIf ib_scale(double f) {
  WhatIf w;
  w.ib_bandwidth_scale = f;
  return w;
}

// One big cross-node DP all-reduce (TP 8 x DP 4: 4 nodes, one member per node and rail, ring):
// 2x InfiniBand bandwidth halves it (latency, ~30 us of 34 ms, is unchanged), and the time is
// the alpha-beta closed form with the doubled NIC rate.
TEST(WhatIf, DoublingIbBandwidthHalvesACrossNodeAllReduce) {
  const RankLayout layout(8, 1, 4, 1);
  const int64_t S = int64_t{1} << 30;
  SimulationOptions opts;
  opts.collective_algorithm = "ring";
  const Program prog = one_collective(layout, GroupKind::kDp, S);
  const double base = program_time_s(prog, {}, opts);
  const double doubled = program_time_s(prog, ib_scale(2.0), opts);
  EXPECT_NEAR(doubled / base, 0.5, 0.5 * 0.02) << base << " s -> " << doubled << " s";
  const TopologySpec t = h100();
  const FabricEfficiency eff;
  const double alpha = 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s + eff.step_overhead_s;
  const double expected = 1.5 * S / (2 * t.nic.line_rate_Bps * eff.ib) + 6 * alpha;
  EXPECT_NEAR(doubled, expected, expected * 0.01);
  // Halving it doubles it.
  EXPECT_NEAR(program_time_s(prog, ib_scale(0.5), opts) / base, 2.0, 2.0 * 0.02);
}

// Collectives inside a node are closed forms (no SimGrid flows): they scale with NVLink too.
TEST(WhatIf, NvlinkScaleSpeedsUpTheClosedFormsInsideANode) {
  const Program prog = one_collective(RankLayout(8, 1, 1, 1), GroupKind::kTp, int64_t{1} << 30);
  for (const char* algorithm : {"ring", "nvls"}) {
    SCOPED_TRACE(algorithm);
    SimulationOptions opts;
    opts.collective_algorithm = algorithm;
    WhatIf w;
    w.nvlink_bandwidth_scale = 2.0;
    const double base = program_time_s(prog, {}, opts);
    const double doubled = program_time_s(prog, w, opts);
    EXPECT_NEAR(doubled / base, 0.5, 0.5 * 0.02) << base << " s -> " << doubled << " s";
    // InfiniBand does not matter inside a node.
    EXPECT_DOUBLE_EQ(program_time_s(prog, ib_scale(4.0), opts), base);
  }
}

// Every rank runs three 1-second compute ops in a row: 3 s, and 1.5 s on GPUs twice as fast.
TEST(WhatIf, GpuSpeedScaleTwoHalvesAComputeOnlyIteration) {
  const RankLayout layout(1, 1, 8, 1);
  Program prog{pipeline_scenario(1, 1), layout, {}, {}};
  prog.kernels.push_back(Kernel{KernelKey{"unit", {1}, Precision::kBf16, 1}, 1.0, 1.0});
  for (int64_t r = 0; r < 8; ++r) {
    RankProgram rp;
    rp.rank = r;
    rp.coord = layout.coord(r);
    for (uint32_t i = 0; i < 3; ++i) {
      Op op;
      op.id = i;
      op.kernels = {0};
      if (i > 0) op.deps = {i - 1};
      op.what = "unit";
      rp.ops.push_back(op);
    }
    prog.ranks.emplace(r, std::move(rp));
  }
  const TableCostModel costs({{"unit", 1.0}});
  WhatIf fast;
  fast.gpu_speed_scale = 2.0;
  EXPECT_DOUBLE_EQ(program_time_s(prog, {}, {}, &costs), 3.0);
  EXPECT_DOUBLE_EQ(program_time_s(prog, fast, {}, &costs), 1.5);
  // Through the scenario: a 4-stage pipeline with unit costs (its transfers and the DP
  // all-reduce take microseconds) runs in half the time, with half the compute.
  Scenario s = pipeline_scenario(4, 8);
  const TableCostModel unit({{"attention_fwd", 0.5}, {"attention_bwd", 0.5}});
  const auto run = [&unit](const Scenario& sc) {
    return nlohmann::json::parse(run_isolated([&] {
      SimulationOptions opts;
      opts.record_timeline = false;
      const TopologySpec t = h100();
      return summary_json(sc, t, simulate(sc, t, unit, opts), false).dump();
    }));
  };
  const auto base = run(s);
  s.cluster.what_if.gpu_speed_scale = 2.0;
  const auto faster = run(s);
  EXPECT_NEAR(faster["iteration_time_s"].get<double>() / base["iteration_time_s"].get<double>(),
              0.5, 1e-3);
  EXPECT_DOUBLE_EQ(faster["compute_s"].get<double>(), 0.5 * base["compute_s"].get<double>());
}

/// summary.json of the 4-stage unit-cost pipeline (m = 8) with `what_if`, simulated in a child.
nlohmann::json pipeline_summary(const WhatIf& what_if) {
  Scenario s = pipeline_scenario(4, 8);
  s.cluster.what_if = what_if;
  return nlohmann::json::parse(run_isolated([&] {
    const TableCostModel unit({{"attention_fwd", 0.5}, {"attention_bwd", 0.5}});
    SimulationOptions opts;
    opts.record_timeline = false;
    const TopologySpec t = h100();
    return summary_json(s, t, simulate(s, t, unit, opts), false).dump();
  }));
}

WhatIf straggler(int64_t rank, double compute_scale) {
  WhatIf w;
  w.straggler = Straggler{rank, compute_scale};
  return w;
}

// 1F1B over p = 4 stages, m = 8 micro-batches, forward and backward of a stage 1 s each: 2(m + p
// - 1) = 22 s. A straggler on the last stage (rank 7 = DP 1 of stage 3) x k = 1.2: that stage
// never waits in the steady state (its inputs come from faster stages), so the critical path is
// the fill (p - 1 forwards), its 2 m k seconds of work, and the drain (p - 1 backwards):
// 2 m k + 2 (p - 1) = 25.2 s. On any stage the iteration gets slower, by at most the straggler's
// extra work 2 m (k - 1) = 3.2 s, i.e. <= 20 %; with k = 1.0 nothing changes.
TEST(WhatIf, StragglerSlowsThePipelineAsTheCriticalPathPredicts) {
  const nlohmann::json base = pipeline_summary({});
  const double base_s = base["iteration_time_s"].get<double>();
  EXPECT_NEAR(base_s, 22.0, 22.0 * 1e-3);
  const double last_s = pipeline_summary(straggler(7, 1.2))["iteration_time_s"].get<double>();
  EXPECT_NEAR(last_s, 2 * 8 * 1.2 + 2 * 3, 25.2 * 1e-3);
  for (int64_t rank : {0, 3, 5, 7}) {  // stages 0, 1, 2, 3
    SCOPED_TRACE(rank);
    const double t = pipeline_summary(straggler(rank, 1.2))["iteration_time_s"].get<double>();
    EXPECT_GT(t, base_s * 1.01);
    EXPECT_LE(t, base_s + 2 * 8 * 0.2 + 1e-6);
    EXPECT_LE(t / base_s, 1.2);
  }
  // compute_scale 1.0: the same iteration, breakdown for breakdown.
  nlohmann::json same = pipeline_summary(straggler(5, 1.0));
  EXPECT_EQ(same["what_if"],
            nlohmann::json::parse(R"({"straggler": {"rank": 5, "compute_scale": 1.0}})"));
  same.erase("what_if");
  EXPECT_EQ(same.dump(), base.dump());
}

// Waits attributed to their cause (sim/attribution.hpp), on the 1F1B pipeline above (p = 4,
// m = 8, 1 s per forward or backward, PP 4 x DP 2). Base: stage s finishes its last backward s
// seconds before stage 0 (the drain), and waits that long at the collectives spanning the stages
// (embedding, gradient norm) for stage 0: sync wait s x 1 s, not communication. A straggler on
// rank 7 (stage 3 of DP replica 1) x 1.2 delays its whole replica by its extra work
// 2 m (k - 1) = 3.2 s; every stage of replica 0 then waits 3.2 s more at its DP all-reduce for
// its replica-1 peer. Exposed DP (the all-reduces' own time, microseconds) does not move; the
// critical rank (rank 0) names its DP peer, rank 1, as the late member; every breakdown still
// adds up to the iteration.
TEST(WhatIf, StragglerShowsAsSyncWaitOnItsPeersNotAsCommunication) {
  const nlohmann::json base = pipeline_summary({});
  const nlohmann::json slow = pipeline_summary(straggler(7, 1.2));
  const double delta_s =
      slow["iteration_time_s"].get<double>() - base["iteration_time_s"].get<double>();
  EXPECT_NEAR(delta_s, 3.2, 1e-3);
  ASSERT_EQ(base["per_stage"].size(), 4u);
  for (size_t i = 0; i < base["per_stage"].size(); ++i) {
    SCOPED_TRACE(i);
    const nlohmann::json& b = base["per_stage"][i];
    const nlohmann::json& w = slow["per_stage"][i];
    std::printf("stage %zu rank %d: exposed DP %.6f -> %.6f s, sync wait %.6f -> %.6f s, "
                "bubble %.6f -> %.6f s\n",
                i, w["rank"].get<int>(), b["exposed_dp_s"].get<double>(),
                w["exposed_dp_s"].get<double>(), b["sync_wait_s"].get<double>(),
                w["sync_wait_s"].get<double>(), b["bubble_s"].get<double>(),
                w["bubble_s"].get<double>());
    EXPECT_NEAR(b["sync_wait_s"].get<double>(), static_cast<double>(i), 1e-3);
    EXPECT_NEAR(w["sync_wait_s"].get<double>() - b["sync_wait_s"].get<double>(), 3.2, 1e-3);
    EXPECT_NEAR(w["exposed_dp_s"].get<double>(), b["exposed_dp_s"].get<double>(), 1e-6);
    EXPECT_LT(w["exposed_dp_s"].get<double>(), 1e-3);
    EXPECT_NEAR(w["bubble_s"].get<double>(), b["bubble_s"].get<double>(), 1e-6);
    double total = 0;
    for (const char* k : {"compute_s", "exposed_tp_s", "exposed_cp_s", "exposed_ep_s",
                          "exposed_pp_s", "exposed_dp_s", "bubble_s", "sync_wait_s"}) {
      total += w[k].get<double>();
    }
    EXPECT_NEAR(total, slow["iteration_time_s"].get<double>(), 1e-6);
  }
  EXPECT_EQ(slow["critical_rank"]["rank"], 0);
  ASSERT_FALSE(slow["late_peers"].empty());
  EXPECT_EQ(slow["late_peers"][0]["rank"], 1);
  EXPECT_EQ(slow["late_peers"][0]["group"], "dp-cp");
  EXPECT_NEAR(slow["late_peers"][0]["wait_s"].get<double>(), 3.2, 1e-3);
  // One wait, at the stage's DP gradient all-reduce (the op the critical rank waited at).
  EXPECT_EQ(slow["late_peers"][0]["waits"], 1);
  EXPECT_NEAR(slow["late_peers"][0]["largest_wait_s"].get<double>(), 3.2, 1e-3);
  EXPECT_THAT(slow["late_peers"][0]["op"].get<std::string>(), HasSubstr("all_reduce"));
  EXPECT_TRUE(base["late_peers"].empty());
}

/// One send of `bytes` from rank 0 (node 0, rail 0) to rank 8 (node 1): PP 2 x DP 8.
Program one_transfer(int64_t bytes) {
  const RankLayout layout(1, 1, 8, 2);
  Scenario s = pipeline_scenario(2, 1);
  s.cluster.num_gpus = 16;
  s.parallel.data_parallel_size = 8;
  Program prog{s, layout, {}, {}};
  for (int64_t r = 0; r < 16; ++r) {
    RankProgram rp;
    rp.rank = r;
    rp.coord = layout.coord(r);
    if (r == 0 || r == 8) {
      Op op;
      op.kind = r == 0 ? OpKind::kSend : OpKind::kRecv;
      op.stream = Stream::kPpComm;
      op.phase = Phase::kForward;
      op.peer = r == 0 ? 8 : 0;
      op.tag = 1;
      op.bytes = bytes;
      op.what = r == 0 ? "send activation" : "recv activation";
      rp.ops.push_back(op);
    }
    prog.ranks.emplace(r, std::move(rp));
  }
  return prog;
}

WhatIf degraded(const std::string& name, double scale) {
  WhatIf w;
  w.degraded_link = DegradedLink{name, scale};
  return w;
}

// A lone flow node0-nic0 -> leaf -> node1-nic0 takes S / NIC + latency; with the NIC's uplink at
// half its bandwidth the bandwidth part doubles; a degraded link elsewhere changes nothing.
TEST(WhatIf, DegradedLinkHalvesTheBandwidthOfAFlowCrossingIt) {
  const TopologySpec t = h100();
  const int64_t S = int64_t{1} << 30;
  const Program prog = one_transfer(S);
  const double latency_s = 2 * t.nic.latency_s + t.fabric.hop_latency_s;
  const double base = program_time_s(prog, {});
  EXPECT_NEAR(base, S / t.nic.line_rate_Bps + latency_s, base * 1e-3);
  const double slow = program_time_s(prog, degraded("node0-nic0-up", 0.5));
  EXPECT_NEAR((slow - latency_s) / (base - latency_s), 2.0, 2.0 * 1e-3);
  // The receiving side's downlink counts too; another rail's link does not.
  EXPECT_DOUBLE_EQ(program_time_s(prog, degraded("node1-nic0-down", 0.5)), slow);
  EXPECT_DOUBLE_EQ(program_time_s(prog, degraded("node0-nic1-up", 0.5)), base);
  // It stacks on the tier factor: 2x IB and the link at half of that = the base bandwidth.
  WhatIf both = degraded("node0-nic0-up", 0.5);
  both.ib_bandwidth_scale = 2.0;
  EXPECT_NEAR(program_time_s(prog, both), base, base * 1e-9);
}

// Link names are known without SimGrid and are those of the built platform; a degraded link is
// set to its scaled bandwidth in SimGrid and in links().
TEST(WhatIf, LinkNamesWithoutSimGridAreThoseOfThePlatform) {
  const std::string out = run_isolated([] {
    const TopologySpec t = h100();
    int argc = 1;
    char arg0[] = "test";
    char* argv[] = {arg0, nullptr};
    simgrid::s4u::Engine engine(&argc, argv);
    PlatformScaling scaling;
    scaling.ib_bandwidth = 2.0;
    scaling.degraded_links = {{"rail3-leaf0-spine1-c0-down", 0.25}};
    const auto p = Platform::build(engine, t, 64, scaling);
    std::vector<std::string> names;
    std::string degraded;
    for (const PlatformLink& l : p->links()) {
      names.push_back(l.name);
      if (l.name == scaling.degraded_links[0].name) {
        degraded = std::to_string(l.bandwidth_Bps / t.fabric.link_rate_Bps) + " " +
                   std::to_string(l.link->get_bandwidth() / t.fabric.link_rate_Bps);
      }
    }
    if (names != platform_link_names(t, 64)) return std::string("names differ");
    return degraded;
  });
  EXPECT_EQ(out, "0.500000 0.500000");
  const std::vector<std::string> names = platform_link_names(h100(), 64);
  for (const char* name : {"node0-gpu0-nvlink-up", "node7-gpu7-nvlink-down", "node0-loopback",
                           "node7-nic7-up", "rail0-leaf0-spine0-c0-up",
                           "rail7-leaf0-spine3-c0-down"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  // Cores exist from 16 SU on (three tiers).
  const std::vector<std::string> big = platform_link_names(h100(), 16384);
  EXPECT_NE(std::find(big.begin(), big.end(), "rail7-spine0-core0-c0-down"), big.end());
}

// An unknown link name is refused before anything is built, naming the key, the closest name
// and how names look.
TEST(WhatIf, UnknownDegradedLinkIsAConfigErrorShowingHowNamesLook) {
  Scenario s = pipeline_scenario(4, 8);
  s.cluster.what_if = degraded("node0-nic0-upp", 0.5);
  try {
    check_what_if(s, h100(), false);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("scenario 'pipeline': cluster.what_if.degraded_link.name"),
                      HasSubstr("'node0-nic0-upp': no such link"),
                      HasSubstr("did you mean node0-nic0-up?"), HasSubstr("node0-gpu0-nvlink-up"),
                      HasSubstr("rail0-leaf0-spine0-c0-up"), HasSubstr("nodes 0..0")));
  }
  s.cluster.what_if = degraded("node0-nic0-up", 0.5);
  EXPECT_NO_THROW(check_what_if(s, h100(), false));
  // Platform::build refuses it too, before SimGrid is touched (a child: it creates an engine).
  const std::string out = run_isolated([] {
    int argc = 1;
    char arg0[] = "test";
    char* argv[] = {arg0, nullptr};
    simgrid::s4u::Engine engine(&argc, argv);
    PlatformScaling scaling;
    scaling.degraded_links = {{"rail9-leaf0-spine0-c0-up", 0.5}};
    try {
      Platform::build(engine, h100(), 16, scaling);
    } catch (const ConfigError& e) {
      return std::string(engine.get_netzone_root() == nullptr ? "untouched: " : "touched: ") +
             e.what();
    }
    return std::string("no error");
  });
  EXPECT_THAT(out, AllOf(HasSubstr("untouched: "), HasSubstr("'rail9-leaf0-spine0-c0-up'"),
                         HasSubstr("rails 0..7")));
}

// TP aggregation replays TP rank 0 for its group and rail 0 for all rails: a straggler or a
// degraded link breaks that, so it is refused (check_what_if and the engine itself).
TEST(WhatIf, StragglerAndDegradedLinkRefuseTpAggregation) {
  Scenario s = pipeline_scenario(1, 1);
  s.parallel.tensor_model_parallel_size = 8;
  s.parallel.data_parallel_size = 1;
  s.training.global_batch_size = 1;
  s.cluster.what_if = straggler(3, 1.2);
  EXPECT_THAT([&] { check_what_if(s, h100(), true); },
              ::testing::ThrowsMessage<ConfigError>(AllOf(
                  HasSubstr("cluster.what_if.straggler"), HasSubstr("TP aggregation"))));
  EXPECT_NO_THROW(check_what_if(s, h100(), false));
  s.cluster.what_if = degraded("node0-nic0-up", 0.5);
  EXPECT_THROW(check_what_if(s, h100(), true), ConfigError);
  SimulationOptions opts;
  opts.aggregate_tp = true;
  opts.straggler = Straggler{3, 1.2};
  try {
    program_time_s(one_collective(RankLayout(8, 1, 1, 1), GroupKind::kTp, 1024), {}, opts);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("TP aggregation"), HasSubstr("straggler")));
  }
  // Bandwidth and GPU speed factors keep the symmetry: aggregation stays allowed.
  s.cluster.what_if = ib_scale(2.0);
  s.cluster.what_if.gpu_speed_scale = 1.5;
  EXPECT_NO_THROW(check_what_if(s, h100(), true));
}

TEST(WhatIf, FoldingIntoOptionsMultipliesFactors) {
  SimulationOptions opts;
  opts.scaling.ib_bandwidth = 2.0;
  opts.gpu_speed_scale = 1.5;
  WhatIf w = ib_scale(3.0);
  w.nvlink_bandwidth_scale = 0.5;
  w.gpu_speed_scale = 2.0;
  w.straggler = Straggler{1, 1.2};
  w.degraded_link = DegradedLink{"node0-nic0-up", 0.5};
  const SimulationOptions o = with_what_if(opts, w);
  EXPECT_DOUBLE_EQ(o.scaling.ib_bandwidth, 6.0);
  EXPECT_DOUBLE_EQ(o.scaling.nvlink_bandwidth, 0.5);
  EXPECT_DOUBLE_EQ(o.gpu_speed_scale, 3.0);
  ASSERT_TRUE(o.straggler.has_value());
  EXPECT_EQ(o.straggler->rank, 1);
  ASSERT_EQ(o.scaling.degraded_links.size(), 1u);
  EXPECT_EQ(o.scaling.degraded_links[0].name, "node0-nic0-up");
  EXPECT_THROW(with_what_if(o, w), InvalidArgument);  // two stragglers
  const TopologySpec scaled = scaled_topology(h100(), o.scaling);
  EXPECT_DOUBLE_EQ(scaled.nic.line_rate_Bps, 6.0 * h100().nic.line_rate_Bps);
  EXPECT_DOUBLE_EQ(scaled.fabric.link_rate_Bps, 6.0 * h100().fabric.link_rate_Bps);
  EXPECT_DOUBLE_EQ(scaled.node.nvlink_bandwidth_Bps, 0.5 * h100().node.nvlink_bandwidth_Bps);
}

// summary.json of a what-if run: the knobs, the base figures and the relative changes.
TEST(WhatIf, SummaryJsonCarriesTheKnobsTheBaseAndTheDelta) {
  Scenario s = pipeline_scenario(4, 8);
  s.cluster.what_if = ib_scale(2.0);
  s.cluster.what_if.straggler = Straggler{7, 1.2};
  SimulationResult r;
  r.iteration_time_s = 8.0;
  r.critical.exposed_tp_s = 1.0;
  r.critical.exposed_dp_s = 0.5;
  BaseRunMetrics base;
  base.iteration_time_s = 10.0;
  base.tokens_per_s_per_gpu = 2.0 * 8 * 32 / 10.0 / 8;
  base.mfu = 0.4;
  base.exposed_tp_s = 1.0;
  base.exposed_dp_s = 1.5;
  const nlohmann::ordered_json j = summary_json(s, h100(), r, false, &base);
  EXPECT_EQ(j["what_if"].dump(),
            R"({"ib_bandwidth_scale":2.0,"straggler":{"rank":7,"compute_scale":1.2}})");
  EXPECT_DOUBLE_EQ(j["base"]["iteration_time_s"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["base"]["exposed_comm_s"]["total"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["delta_vs_base"]["iteration_time_relative"].get<double>(), -0.2);
  EXPECT_DOUBLE_EQ(j["delta_vs_base"]["speedup"].get<double>(), 1.25);
  const double tokens = j["tokens_per_s_per_gpu"].get<double>();
  EXPECT_DOUBLE_EQ(j["delta_vs_base"]["tokens_per_s_relative"].get<double>(),
                   (tokens - base.tokens_per_s_per_gpu) / base.tokens_per_s_per_gpu);
  EXPECT_DOUBLE_EQ(j["delta_vs_base"]["exposed_comm_delta_s"].get<double>(), -1.0);
  // Read back as a child process returns it: the summary, typed, through JSON text.
  const SimulationSummary m = summarize(s, h100(), r);
  const auto round = nlohmann::json::parse(nlohmann::json(m).dump()).get<SimulationSummary>();
  const BaseRunMetrics back = base_run_metrics(round);
  EXPECT_DOUBLE_EQ(back.iteration_time_s, 8.0);
  EXPECT_DOUBLE_EQ(back.exposed_comm_s(), 1.5);
  EXPECT_DOUBLE_EQ(round.tokens_per_s, m.tokens_per_s);
  EXPECT_EQ(round.cost_sources, m.cost_sources);
  EXPECT_THROW(nlohmann::json::parse(R"({"iteration_time_s": 1})").get<SimulationSummary>(),
               Error);
  EXPECT_EQ(describe_what_if(s.cluster.what_if),
            "ib_bandwidth_scale 2, straggler rank 7 x 1.2 compute");
  // The MoE load imbalance is a what-if knob like the others: written, read back, described.
  WhatIf moe;
  moe.moe_load_imbalance = 1.3;
  EXPECT_EQ(what_if_json(moe).dump(), R"({"moe_load_imbalance":1.3})");
  EXPECT_EQ(what_if_from_json(what_if_json(moe), JsonPlace{"summary.json", "what_if"})
                .moe_load_imbalance,
            1.3);
  EXPECT_EQ(describe_what_if(moe), "moe_load_imbalance 1.3");
  // Without what-if knobs: none of these fields.
  s.cluster.what_if = WhatIf{};
  const nlohmann::ordered_json plain = summary_json(s, h100(), r, false);
  EXPECT_FALSE(plain.contains("what_if"));
  EXPECT_FALSE(plain.contains("base"));
  EXPECT_FALSE(plain.contains("delta_vs_base"));
}

}  // namespace
}  // namespace traintwin
