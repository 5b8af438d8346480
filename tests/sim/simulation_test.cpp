// Whole simulations, several per test: each runs in a child process (run_isolated), since
// SimGrid allows one engine per process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim_test_support.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "sim/collective_bench.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "sim/summary_document.hpp"

namespace traintwin {
namespace {

using testing::h100;

/// GPT 2.6B-class on 32 H100 (4 nodes): TP 8, PP 2, DP 2, SP, distributed optimizer.
Scenario small_cluster() {
  Scenario s;
  s.name = "small";
  s.model = ModelSpec{"gpt", 8, 2048, 16, 8192, 2048, 51200};
  s.parallel.tensor_model_parallel_size = 8;
  s.parallel.pipeline_model_parallel_size = 2;
  s.parallel.data_parallel_size = 2;
  s.parallel.sequence_parallel = true;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 16;
  s.training.use_distributed_optimizer = true;
  s.training.overlap_grad_reduce = true;
  s.cluster.num_gpus = 32;
  return s;
}

std::string simulate_json(const Scenario& s, const SimulationOptions& opts) {
  return run_isolated([&] {
    const TopologySpec t = h100();
    const auto costs = make_roofline_cost_model(default_roofline_efficiency(t.gpu));
    return summary_json(s, t, simulate(s, t, *costs, opts), /*include_wall_time=*/false).dump(2);
  });
}

// Two runs of the same scenario give byte-identical summary.json.
TEST(Simulation, IsDeterministic) {
  SimulationOptions opts;
  opts.record_timeline = false;
  const std::string a = simulate_json(small_cluster(), opts);
  const std::string b = simulate_json(small_cluster(), opts);
  EXPECT_EQ(a, b);
  const auto j = nlohmann::json::parse(a);
  for (const char* key : {"iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
                          "mfu", "hfu", "pipeline_bubble_fraction", "exposed_comm_s", "compute_s",
                          "peak_memory_bytes", "fits_in_memory", "cost_sources", "busiest_links", "events"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_GT(j["iteration_time_s"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["cost_sources"]["roofline"].get<double>(), 1.0);
}

// Replaying TP rank 0 of each TP group only (rail symmetry) changes the iteration time by < 1 %
// against the fully expanded replay (here: not at all).
TEST(Simulation, TpAggregationMatchesTheFullReplay) {
  SimulationOptions full;
  full.record_timeline = false;
  full.exact_reductions = false;
  SimulationOptions agg = full;
  agg.aggregate_tp = true;
  const auto a = nlohmann::json::parse(simulate_json(small_cluster(), full));
  const auto b = nlohmann::json::parse(simulate_json(small_cluster(), agg));
  EXPECT_EQ(a["replayed_ranks"].get<int64_t>(), 32);
  EXPECT_EQ(b["replayed_ranks"].get<int64_t>(), 4);
  const double ta = a["iteration_time_s"].get<double>(), tb = b["iteration_time_s"].get<double>();
  EXPECT_NEAR(tb / ta, 1.0, 0.01);
}

/// Every number of a summary.json under `path` in `a` equals the one in `b` to `rel` (relative
/// to the larger); other values (strings, integers, booleans) exactly. Keys in `skip` (at the top
/// level) are not compared.
void expect_same_summary(const nlohmann::json& a, const nlohmann::json& b, double rel,
                         const std::vector<std::string>& skip, const std::string& path = "") {
  if (a.is_object()) {
    for (const auto& [key, value] : a.items()) {
      if (path.empty() && std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
      ASSERT_TRUE(b.contains(key)) << path << "/" << key;
      expect_same_summary(value, b[key], rel, skip, path + "/" + key);
    }
    EXPECT_EQ(a.size(), b.size()) << path;
  } else if (a.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << path;
    for (size_t i = 0; i < a.size(); ++i) {
      expect_same_summary(a[i], b[i], rel, skip, path + "[" + std::to_string(i) + "]");
    }
  } else if (a.is_number_float() || b.is_number_float()) {
    const double x = a.get<double>(), y = b.get<double>();
    EXPECT_NEAR(x, y, rel * std::max(std::abs(x), std::abs(y))) << path;
  } else {
    EXPECT_EQ(a, b) << path;
  }
}

// The exact reductions are on by default: on a layout where TP fills each node (TP 8, one rail
// per GPU, dense), TP rank 0 of each TP group is replayed for its group, the reduction is named,
// and every simulated figure of summary.json — iteration time, breakdowns per stage, link loads
// of every rail, hot links, utilization series, collective counts — is the full replay's to
// 1e-9; only the replay's own counters (ranks, ops, flows, events) differ.
TEST(Simulation, ExactReductionsAreOnByDefaultAndMatchTheFullReplay) {
  SimulationOptions fast;
  fast.record_timeline = false;
  SimulationOptions full = fast;
  full.exact_reductions = false;
  const auto a = nlohmann::json::parse(simulate_json(small_cluster(), fast));
  const auto b = nlohmann::json::parse(simulate_json(small_cluster(), full));
  EXPECT_EQ(a["replayed_ranks"].get<int64_t>(), 4);
  EXPECT_EQ(b["replayed_ranks"].get<int64_t>(), 32);
  ASSERT_EQ(a["reductions"].size(), 1u);
  EXPECT_THAT(a["reductions"][0].get<std::string>(), ::testing::HasSubstr("TP aggregation"));
  EXPECT_TRUE(b["reductions"].empty());
  expect_same_summary(b, a, 1e-9,
                      {"reductions", "replayed_ranks", "events", "ops", "flows", "group_flows",
                       "solver_flows", "max_solver_flows"});
  EXPECT_LT(a["flows"].get<int64_t>(), b["flows"].get<int64_t>());
}

std::string scenario_path(const std::string& name) {
  return std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/" + name + ".yaml";
}

/// Llama 3.1 70B on 64 H100 (TP 4 = half a node, CP 2, PP 4, DP 2) made a mixture of 8
/// experts, top-2, EP 8 across nodes (expert TP 1): expert groups that span TP.
Scenario moe_across_nodes() {
  Scenario s = load_scenario(scenario_path("llama3.1-70b-h100-64"));
  s.name = "moe-across-nodes";
  s.model.num_layers = 20;  // one layer per model chunk (PP 4 x 5 virtual stages)
  s.model.num_moe_experts = 8;
  s.model.moe_router_topk = 2;
  s.model.moe_grouped_gemm = true;
  s.parallel.expert_model_parallel_size = 8;
  s.parallel.expert_tensor_parallel_size = 1;
  s.parallel.rank_order = "tp-cp-dp-ep-pp";
  validate_scenario(s, s.name);
  return s;
}

// The same on layouts where TP is half a node (with CP), and with expert groups that span TP
// inside a node (Qwen3 30B-A3B: TP 4, EP 4, expert TP 1). Expert groups across nodes in which
// TP rank 0 ranks are unevenly spread are refused (a collective of a group spanning TP completes
// when its TP-rank-0 members have arrived).
TEST(Simulation, ExactReductionsMatchTheFullReplayWithHalfNodeTpAndExperts) {
  for (const char* name : {"llama3.1-70b-h100-64", "qwen3-30b-a3b-h100-16"}) {
    SCOPED_TRACE(name);
    const Scenario s = load_scenario(scenario_path(name));
    SimulationOptions fast;
    fast.record_timeline = false;
    SimulationOptions full = fast;
    full.exact_reductions = false;
    const auto a = nlohmann::json::parse(simulate_json(s, fast));
    const auto b = nlohmann::json::parse(simulate_json(s, full));
    EXPECT_EQ(a["replayed_ranks"].get<int64_t>(), s.cluster.num_gpus / 4);
    ASSERT_EQ(a["reductions"].size(), 1u);
    expect_same_summary(b, a, 1e-9,
                        {"reductions", "replayed_ranks", "events", "ops", "flows", "group_flows",
                         "solver_flows", "max_solver_flows"});
  }
  const Scenario moe = moe_across_nodes();
  EXPECT_THAT(tp_aggregation_blocker(layout_of(moe), h100(), SimulationOptions{}, true),
              ::testing::HasSubstr("groups do not each hold"));
  SimulationOptions fast;
  fast.record_timeline = false;
  EXPECT_TRUE(nlohmann::json::parse(simulate_json(moe, fast))["reductions"].empty());
}

// A reduction runs only where it is exact: TP aggregation is refused (and the reason named) for
// TP groups that are not consecutive GPUs of one node, fewer NIC rails than GPUs, a straggler,
// a degraded link, and a traced rank outside TP rank 0; TP smaller than a node is fine.
TEST(Simulation, TpAggregationRunsOnlyWhereExact) {
  const TopologySpec t = h100();
  const Scenario s = small_cluster();
  const RankLayout layout = layout_of(s);
  SimulationOptions opts;
  EXPECT_EQ(tp_aggregation_blocker(layout, t, opts), "");
  Scenario tp4 = s;
  tp4.parallel.tensor_model_parallel_size = 4;
  tp4.parallel.data_parallel_size = 4;
  EXPECT_EQ(tp_aggregation_blocker(layout_of(tp4), t, opts), "");
  EXPECT_THAT(tp_aggregation_blocker(RankLayout(3, 1, 1, 1), t, opts),
              ::testing::HasSubstr("consecutive"));
  EXPECT_THAT(tp_aggregation_blocker(RankLayout(8, 1, 2, 2, "dp-tp-cp-pp"), t, opts),
              ::testing::HasSubstr("consecutive"));
  TopologySpec four_nics = t;
  four_nics.nic.nics_per_node = 4;
  EXPECT_THAT(tp_aggregation_blocker(layout, four_nics, opts), ::testing::HasSubstr("rails"));
  SimulationOptions straggler = opts;
  straggler.straggler = Straggler{3, 1.5};
  EXPECT_THAT(tp_aggregation_blocker(layout, t, straggler), ::testing::HasSubstr("straggler"));
  SimulationOptions degraded = opts;
  degraded.scaling.degraded_links.push_back(DegradedLink{"node0-nic0-up", 0.5});
  EXPECT_THAT(tp_aggregation_blocker(layout, t, degraded), ::testing::HasSubstr("degraded"));
  SimulationOptions traced = opts;
  traced.trace_ranks = {0, 9};
  EXPECT_THAT(tp_aggregation_blocker(layout, t, traced), ::testing::HasSubstr("traced rank 9"));
}

// Flows alone on their links are timed in closed form, flows that meet only each other in
// closed-form groups, and the rest handed to SimGrid (sim/flow_network.hpp): the same
// iteration, breakdown and link loads as with every flow in SimGrid from its start, to SimGrid's
// precision, whether groups are on (none in the solver here) or off (lone flows only: those that
// meet go to the solver).
TEST(Simulation, ClosedFormFlowsMatchEveryFlowInSimGrid) {
  const Scenario s = small_cluster();
  SimulationOptions groups;
  groups.record_timeline = false;
  SimulationOptions lone = groups;
  lone.max_group_flows = 1;
  SimulationOptions reference = groups;
  reference.lone_flows_in_closed_form = false;
  const auto b = nlohmann::json::parse(simulate_json(s, reference));
  EXPECT_EQ(b["solver_flows"], b["flows"]);
  EXPECT_EQ(b["group_flows"], 0);
  const double tb = b["iteration_time_s"].get<double>();
  int64_t lone_solver_flows = 0;
  for (const SimulationOptions* o : {&lone, &groups}) {
    const bool grouped = o == &groups;
    SCOPED_TRACE(grouped ? "groups" : "lone flows only");
    const auto a = nlohmann::json::parse(simulate_json(s, *o));
    EXPECT_EQ(a["flows"], b["flows"]);
    EXPECT_LT(a["solver_flows"].get<int64_t>(), a["flows"].get<int64_t>());
    if (grouped) {
      EXPECT_GT(a["group_flows"].get<int64_t>(), 0);  // flows that met each other
      EXPECT_LT(a["solver_flows"].get<int64_t>(), lone_solver_flows);
    } else {
      EXPECT_EQ(a["group_flows"], 0);
      lone_solver_flows = a["solver_flows"].get<int64_t>();
      EXPECT_GT(lone_solver_flows, 0);  // some flows did meet
    }
    const double ta = a["iteration_time_s"].get<double>();
    EXPECT_NEAR(ta, tb, 1e-9 * tb);
    for (const char* k : {"tp", "pp", "dp"}) {
      EXPECT_NEAR(a["exposed_comm_s"][k].get<double>(), b["exposed_comm_s"][k].get<double>(),
                  1e-9 * tb)
          << k;
    }
    ASSERT_EQ(a["link_tiers"].size(), b["link_tiers"].size());
    for (size_t i = 0; i < a["link_tiers"].size(); ++i) {
      EXPECT_EQ(a["link_tiers"][i]["bytes_total"], b["link_tiers"][i]["bytes_total"]);
    }
  }
}

// The simulated nccl-tests: NVLS all-reduce inside a DGX H100 reaches the calibration busbw
// (480.16 GB/s at 8 GiB); a ring over 2 nodes (one GPU each) 46-48 GB/s per NIC at 1 GiB, the
// calibration file's two-node figure. Over 128 nodes the same ring pays NCCL's tuner latency,
// 8.4 us + 2 x 127 network steps of 14 us (Simple; one member per node: the tree's) plus the
// route (2 NICs, 3 switches): busbw = 2 x 127/128 S / (that + 2 x 127/128 S / 47 GB/s), below the
// two-node figure.
TEST(Simulation, CollectiveBenchReproducesNcclTestsFigures) {
  auto busbw = [](int64_t gpus, BenchGroup g, int64_t bytes) {
    return std::stod(run_isolated([&] {
      return std::to_string(simulate_collective(h100(), gpus, CollectiveKind::kAllReduce, g, bytes).busbw_GBps);
    }));
  };
  EXPECT_NEAR(busbw(8, BenchGroup::kTp, int64_t{8} << 30), 480.16, 480.16 * 0.02);
  const double S = static_cast<double>(int64_t{1} << 30);
  const double two_nodes = busbw(16, BenchGroup::kDp, int64_t{1} << 30);
  EXPECT_GT(two_nodes, 46.0);
  EXPECT_LT(two_nodes, 48.0);
  const TopologySpec t = h100();
  const double route = 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s;
  const double bytes = 2.0 * 127 / 128 * S;
  const double expected = bytes / (8.4e-6 + 254 * (14e-6 + route) + bytes / (50e9 * 0.94)) / 1e9;
  const double dp = busbw(1024, BenchGroup::kDp, int64_t{1} << 30);
  EXPECT_NEAR(dp, expected, expected * 0.01);
  EXPECT_LT(dp, two_nodes);
}

// The tuner's choice agrees with what the flows show (issue 24): a 1 GiB all-reduce over all 1,024
// GPUs (128 nodes, 4 scalable units) runs faster as a tree than as a ring when each is forced,
// and the default picks the tree at the tree's time; 128 MiB over the 32 nodes of one scalable
// unit (one GPU per node) runs its tree at the ideal 2 S / (NIC x 0.94) plus NCCL's tree latency
// (Simple: 8.4 us + 2 floor(log2 32) = 10 network steps of 14 us plus the route), its closed
// form's.
TEST(Simulation, DefaultAlgorithmIsTheFasterOneAsTheFlowsShow) {
  auto row = [](int64_t gpus, BenchGroup g, int64_t bytes, const std::string& algo) {
    return nlohmann::json::parse(run_isolated([&] {
      SimulationOptions opts;
      opts.collective_algorithm = algo;
      return nlohmann::json(simulate_collective(h100(), gpus, CollectiveKind::kAllReduce, g, bytes,
                                                opts))
          .dump();
    })).get<CollectiveRow>();
  };
  const int64_t gib = int64_t{1} << 30;
  const CollectiveRow ring = row(1024, BenchGroup::kAll, gib, "ring");
  const CollectiveRow tree = row(1024, BenchGroup::kAll, gib, "tree");
  const CollectiveRow chosen = row(1024, BenchGroup::kAll, gib, "");
  std::printf("1 GiB over 1024 GPUs: ring %.0f us, tree %.0f us, default %s %.0f us\n",
              ring.time_us, tree.time_us, chosen.algorithm.c_str(), chosen.time_us);
  EXPECT_LT(tree.time_us, ring.time_us);
  EXPECT_EQ(chosen.algorithm, "tree");
  EXPECT_DOUBLE_EQ(chosen.time_us, tree.time_us);
  const int64_t S = int64_t{128} << 20;
  const TopologySpec t = h100();
  const double route_us = (2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s) * 1e6;
  const double ideal_us =
      2.0 * static_cast<double>(S) / (50e9 * 0.94) * 1e6 + 8.4 + 10 * (14 + route_us);
  const CollectiveRow unit = row(256, BenchGroup::kDp, S, "tree");
  EXPECT_EQ(unit.protocol, "Simple");
  EXPECT_NEAR(unit.time_us, ideal_us, ideal_us * 0.02);
}

// One ring all-reduce of S bytes over the 8 GPUs of one NVSwitch node, through the replay engine:
// 2(n-1)/n S / B + NCCL's tuner latency with B = 450 GB/s x 0.80 and the latency 8.4 us + 2(n-1)
// NVLink steps of 3.4 us (Simple), within 1 %.
TEST(Simulation, RingAllReduceInsideANodeIsAlphaBeta) {
  const int64_t S = int64_t{1} << 30;
  const double us = std::stod(run_isolated([&] {
    SimulationOptions opts;
    opts.collective_algorithm = "ring";
    return std::to_string(simulate_collective(h100(), 8, CollectiveKind::kAllReduce, BenchGroup::kTp, S, opts).time_us);
  }));
  const double expected_us =
      (2.0 * 7 / 8 * static_cast<double>(S) / (450e9 * 0.80) + (8.4 + 14 * 3.4) * 1e-6) * 1e6;
  EXPECT_NEAR(us, expected_us, expected_us * 0.01);
}

// Cross-node traffic crossing the spine slows 2x with a 2:1 oversubscribed leaf: 512 GPUs, DP
// pairs between scalable unit 0 and 1 (node n with node n + 32), all 32 nodes of an SU sending
// up through their leaf at once; intra-SU pairs do not slow.
TEST(Simulation, OversubscriptionSlowsTrafficAcrossTheSpine) {
  auto time = [](int64_t oversub, const std::string& order) {
    return std::stod(run_isolated([&] {
      TopologySpec t = h100();
      t.fabric.oversubscription_down = oversub;
      t.fabric.oversubscription_up = 1;
      const RankLayout layout(8, 1, 2, 32, order);
      Scenario s;
      s.cluster.num_gpus = 512;
      Program prog{s, layout, {}, {}};
      for (int64_t r = 0; r < 512; ++r) {
        RankProgram rp;
        rp.rank = r;
        rp.coord = layout.coord(r);
        Op op;
        op.kind = OpKind::kCollective;
        op.group = GroupKind::kDp;
        op.bytes = 256 << 20;
        op.what = "all_reduce";
        rp.ops.push_back(op);
        prog.ranks.emplace(r, std::move(rp));
      }
      const testing::TableCostModel costs;  // no compute
      SimulationOptions opts;
      opts.collective_algorithm = "ring";
      opts.record_timeline = false;
      return std::to_string(simulate_program(prog, t, costs, opts).iteration_time_s);
    }));
  };
  // tp-pp-dp: DP peers 256 ranks = 32 nodes apart (across the spine); tp-dp-pp: adjacent nodes.
  const double across_1 = time(1, "tp-pp-dp"), across_2 = time(2, "tp-pp-dp");
  const double within_1 = time(1, "tp-dp-pp"), within_2 = time(2, "tp-dp-pp");
  EXPECT_NEAR(across_2 / across_1, 2.0, 0.05);
  EXPECT_NEAR(within_2 / within_1, 1.0, 0.01);
}

}  // namespace
}  // namespace traintwin
