// Several jobs on one fabric (sim/multi_job.hpp, sim/placement.hpp): jobs that share no link run
// at their alone times, jobs whose flows meet on a link split it as max-min says, a job alone in a
// placement is `simulate`'s replay, and bad placements are errors naming the job, node and key.
// SimGrid allows one engine per process: every replay here runs in a child (run_isolated), and
// each TEST runs in its own process under ctest.
#include "sim/multi_job.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <sstream>

#include "sim_test_support.hpp"

#include "core/error.hpp"
#include "core/rank_layout.hpp"
#include "sim/isolated.hpp"
#include "sim/placement.hpp"
#include "sim/replay.hpp"
#include "sim/session.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::h100;
using testing::TableCostModel;

namespace fs = std::filesystem;
const fs::path kSource = TRAINTWIN_SOURCE_DIR;

/// The 4-node lab fabric: 2 SUs of 2 nodes, one leaf-spine cable per leaf and rail.
TopologySpec lab() { return load_topology(kSource / "placements/two-leaf-h100-lab.yaml"); }

/// The scenario of one_collective() programs here (one tiny GPT layer).
Scenario collective_scenario() {
  Scenario s;
  s.name = "one-collective";
  s.model = ModelSpec{"gpt", 1, 64, 8, 256, 32, 1024};
  return s;
}

/// A Program of `layout` where every rank runs one all-reduce of `bytes` over `group`.
Program one_collective(const RankLayout& layout, GroupKind group, int64_t bytes) {
  return testing::one_collective(collective_scenario(), layout, group, bytes);
}

SimulationOptions ring_simple() {
  SimulationOptions o;
  o.collective_algorithm = "ring";
  o.collective_protocol = "Simple";
  o.record_timeline = false;
  return o;
}

JobInput job(const std::string& name, const Program& p, const CostModel& c,
             std::vector<int64_t> nodes, int64_t iterations = 1, double start_s = 0,
             SimulationOptions o = ring_simple()) {
  JobInput in;
  in.name = name;
  in.program = &p;
  in.costs = &c;
  in.options = std::move(o);
  in.nodes = std::move(nodes);
  in.iterations = iterations;
  in.start_s = start_s;
  return in;
}

/// Two jobs whose DP rings cross the lab's leaf-spine cables: a on nodes 0 and 2, b on 1 and 3,
/// starting while a's first all-reduce runs; 3 iterations each.
std::vector<JobInput> crossing_jobs(const Program& p, const CostModel& c,
                                    const SimulationOptions& o = ring_simple()) {
  return {job("a", p, c, {0, 2}, 3, 0, o), job("b", p, c, {1, 3}, 3, 3e-4, o)};
}

/// The iteration times of every job of replay_jobs(jobs), run in a child process.
std::vector<std::vector<double>> times_in_child(const std::vector<JobInput>& jobs,
                                                const TopologySpec& topo, int64_t num_nodes) {
  const std::string text = run_isolated([&] {
    const JobsReplay r = replay_jobs(jobs, topo, num_nodes);
    std::string out;
    for (const JobReplay& j : r.jobs) {
      for (const JobIteration& it : j.iterations) out += fmt::format("{:.17g} ", it.time_s());
      out += "\n";
    }
    return out;
  });
  std::vector<std::vector<double>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    out.emplace_back();
    for (double t; ls >> t;) out.back().push_back(t);
  }
  return out;
}

// Two flows on one link each get half of it (max-min, equal route latencies): a DP all-reduce of
// S bytes whose ring crosses the leaf-spine cable together with another job's takes what the
// same all-reduce of 2 S bytes takes alone (the ring's latency terms unchanged, its transfer
// time doubled), i.e. S / (line rate x IB efficiency) more than alone: hand-worked from the
// alpha-beta form of Replay.CrossNodeAllReduceMatchesAlphaBeta for a ring of 2 nodes.
TEST(MultiJob, TwoJobsOnOneUplinkEachGetHalfOfIt) {
  const TopologySpec t = lab();
  const RankLayout layout(8, 1, 2, 1);  // TP 8 x DP 2: one node per DP rank, 8 rails
  const int64_t S = 64 << 20;
  const Program p = one_collective(layout, GroupKind::kDp, S);
  const Program p2 = one_collective(layout, GroupKind::kDp, 2 * S);
  TableCostModel costs;
  // Job a on nodes 0 and 2, job b on 1 and 3: both rings cross SU 0 <-> SU 1 on every rail.
  const auto alone = times_in_child({job("a", p, costs, {0, 2})}, t, 4);
  const auto alone_2s = times_in_child({job("a", p2, costs, {0, 2})}, t, 4);
  const auto together =
      times_in_child({job("a", p, costs, {0, 2}), job("b", p, costs, {1, 3})}, t, 4);
  ASSERT_EQ(together.size(), 2u);
  const double a = alone.at(0).at(0), a2 = alone_2s.at(0).at(0);
  // To 1 ns: SimGrid's timing precision per flow (the closed forms round as it does).
  EXPECT_NEAR(together[0].at(0), a2, 1e-9);
  EXPECT_NEAR(together[1].at(0), a2, 1e-9);
  const FabricEfficiency eff;
  const double transfer_s = static_cast<double>(S) / (t.nic.line_rate_Bps * eff.ib);
  EXPECT_NEAR(together[0][0] - a, transfer_s, transfer_s * 0.01);
  // Inside one SU the two jobs share no link: each runs at its alone time.
  const auto same_su =
      times_in_child({job("a", p, costs, {0, 1}), job("b", p, costs, {2, 3})}, t, 4);
  const auto alone_su = times_in_child({job("a", p, costs, {0, 1})}, t, 4);
  EXPECT_NEAR(same_su.at(0).at(0), alone_su.at(0).at(0), alone_su[0][0] * 1e-9);
  EXPECT_NEAR(same_su.at(1).at(0), alone_su[0][0], alone_su[0][0] * 1e-9);
}

// The shared cable's split is the flow network's closed form (a closed-form group of the two
// jobs' flows): SimGrid's own solver, every flow in it, gives the same times.
TEST(MultiJob, SharedLinkClosedFormMatchesSimGridsSolver) {
  const TopologySpec t = lab();
  const RankLayout layout(8, 1, 2, 1);
  const Program p = one_collective(layout, GroupKind::kDp, 64 << 20);
  TableCostModel costs;
  SimulationOptions in_simgrid = ring_simple();
  in_simgrid.lone_flows_in_closed_form = false;
  const auto closed = times_in_child(crossing_jobs(p, costs), t, 4);
  const auto solver = times_in_child(crossing_jobs(p, costs, in_simgrid), t, 4);
  for (size_t j = 0; j < 2; ++j) {
    ASSERT_EQ(closed.at(j).size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(closed[j][k], solver.at(j).at(k), 2e-8) << j << " " << k;
  }
  // b starts while a's first all-reduce runs: they share the cables for part of it, so a's first
  // iteration is slower than alone, and no iteration of either is faster than alone.
  const double alone = times_in_child({job("a", p, costs, {0, 2})}, t, 4).at(0).at(0);
  EXPECT_GT(closed[0][0], alone * (1 + 1e-6));
  for (const auto& j : closed) {
    for (double it : j) EXPECT_GE(it, alone * (1 - 1e-12));
  }
}

// The shared links' series hold the bytes each bin really carried: two jobs whose DP rings cross
// the same leaf-spine cables, b starting while a's first all-reduce runs, 3 iterations each. On
// every shared link, the jobs' utilizations summed in a bin never exceed 1 (max-min gives the
// flows on a link at most its bandwidth), both jobs fill it in some bin, and each job's bins add
// up to the bytes it put on the link. The same whether the shared cables' flows are closed-form
// groups or SimGrid's solver holds every flow (rates read from its remaining bytes).
void shared_series_within_capacity(bool lone_flows_in_closed_form) {
  const TopologySpec t = lab();
  const RankLayout layout(8, 1, 2, 1);
  const Program p = one_collective(layout, GroupKind::kDp, 64 << 20);
  TableCostModel costs;
  SimulationOptions o = ring_simple();
  o.lone_flows_in_closed_form = lone_flows_in_closed_form;
  const std::string text = run_isolated([&] {
    const JobsReplay r = replay_jobs(crossing_jobs(p, costs, o), t, 4);
    std::string out;
    for (const SharedLinkSeries& ls : r.shared_series) {
      size_t l = 0;
      while (r.links[l].name != ls.name) ++l;
      out += fmt::format("{:.17g} {:.17g} {}", ls.bin_s, r.links[l].bandwidth_Bps,
                         ls.utilization.at(0).size());
      for (size_t j = 0; j < 2; ++j) {
        out += fmt::format(" {:.17g}", r.jobs[j].link_bytes[l]);
        for (double u : ls.utilization.at(j)) out += fmt::format(" {:.17g}", u);
      }
      out += "\n";
    }
    return out;
  });
  std::istringstream in(text);
  int links = 0;
  for (std::string line; std::getline(in, line);) {
    ++links;
    std::istringstream ls(line);
    double bin_s = 0, bw = 0;
    size_t bins = 0;
    ls >> bin_s >> bw >> bins;
    ASSERT_EQ(bins, static_cast<size_t>(kSharedLinkBins));
    std::vector<double> sum(bins, 0.0);
    for (int j = 0; j < 2; ++j) {
      double bytes = 0, binned = 0;
      ls >> bytes;
      for (size_t b = 0; b < bins; ++b) {
        double u = 0;
        ls >> u;
        sum[b] += u;
        binned += u * bw * bin_s;
      }
      EXPECT_NEAR(binned, bytes, 1e-6 * bytes) << line.substr(0, 40) << " job " << j;
    }
    double peak = 0;
    for (double u : sum) {
      EXPECT_LE(u, 1 + 1e-9);
      peak = std::max(peak, u);
    }
    EXPECT_GT(peak, 0.99);
  }
  EXPECT_GT(links, 0);
}

TEST(MultiJob, SharedLinkSeriesNeverAboveCapacityInClosedForm) {
  shared_series_within_capacity(true);
}
TEST(MultiJob, SharedLinkSeriesNeverAboveCapacityInSimGrid) {
  shared_series_within_capacity(false);
}

/// The lab fabric made dual-plane (fabric.kind dual_plane_rail_fat_tree: a leaf per rail and
/// plane, NIC ports of 200 Gb/s), with `ports_down` (fabric.ports_down) when not empty.
TopologySpec lab_dual_plane(const std::string& ports_down = "") {
  std::ifstream in(kSource / "placements/two-leaf-h100-lab.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  };
  replace("kind: rail_optimized_fat_tree", "kind: dual_plane_rail_fat_tree");
  replace("leaf_switches_per_scalable_unit: 8", "leaf_switches_per_scalable_unit: 16");
  if (!ports_down.empty()) text += "  ports_down: " + ports_down + "\n";
  return parse_topology(text, "two-leaf-h100-lab-dual-plane.yaml", kSource / "placements");
}

// Dual plane, worked by hand: a DP all-reduce of S between two nodes of one SU (TP 8 x DP 2: a
// ring of 2 on each of the 8 rails, each rank sending S) on the lab's NICs of B = 400 Gb/s. Split
// over both planes, each rank's S goes as S / 2 on each of two ports of B / 2: S / B, the same
// time as on the single-plane lab fabric (to 1 ns), and S more bytes per rank take S / (B x IB
// efficiency) more: the collective gets both planes' bandwidth. With node 1's NIC 0 port on plane
// 1 down, rail 0 to and from node 1 runs on one port (B / 2): S takes what 2 S takes on both
// planes, S / (B x efficiency) more than with both up.
TEST(MultiJob, DualPlaneCollectiveGetsBothPlanesAndAPortDownHalvesIt) {
  const RankLayout layout(8, 1, 2, 1);
  const int64_t S = 64 << 20;
  const Program p = one_collective(layout, GroupKind::kDp, S);
  const Program p2 = one_collective(layout, GroupKind::kDp, 2 * S);
  TableCostModel costs;
  const double single = times_in_child({job("a", p, costs, {0, 1})}, lab(), 4).at(0).at(0);
  const TopologySpec dual = lab_dual_plane();
  const double both = times_in_child({job("a", p, costs, {0, 1})}, dual, 4).at(0).at(0);
  const double both_2s = times_in_child({job("a", p2, costs, {0, 1})}, dual, 4).at(0).at(0);
  const double down =
      times_in_child({job("a", p, costs, {0, 1})}, lab_dual_plane("node1-nic0-plane1"), 4)
          .at(0)
          .at(0);
  const FabricEfficiency eff;
  const double transfer_s = static_cast<double>(S) / (dual.nic.line_rate_Bps * eff.ib);
  EXPECT_NEAR(both, single, 1e-9);
  EXPECT_NEAR(both_2s - both, transfer_s, transfer_s * 0.01);
  EXPECT_NEAR(down, both_2s, 1e-9);
  EXPECT_NEAR(down - both, transfer_s, transfer_s * 0.01);
}

// Pipeline jobs (compute, PP send/recv, DP all-reduce) on disjoint nodes of one SU share no link:
// every iteration of each, together, takes its alone time exactly, and its critical rank's
// breakdown (measured from the iteration's start) adds up to it and equals the alone one's.
TEST(MultiJob, JobsThatShareNoLinkRunAtTheirAloneTimes) {
  Scenario s;
  s.name = "pipeline";
  s.model = ModelSpec{"gpt", 4, 64, 8, 256, 32, 1024};
  s.parallel.pipeline_model_parallel_size = 2;
  s.parallel.data_parallel_size = 8;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 32;
  s.cluster.num_gpus = 16;
  const Program p = build_program(s, layout_of(s).first_rank_of_each_stage());
  TableCostModel costs({{"attention_fwd", 1e-3}, {"attention_bwd", 2e-3}});
  SimulationOptions o;
  o.record_timeline = false;
  // Per iteration: its time, its critical breakdown's total, exposed communication and bubble.
  const auto run = [&](const std::vector<JobInput>& jobs) {
    const std::string text = run_isolated([&] {
      const JobsReplay r = replay_jobs(jobs, h100(), 4);
      std::string out;
      for (const JobReplay& j : r.jobs) {
        for (const JobIteration& it : j.iterations) {
          out += fmt::format("{:.17g} {:.17g} {:.17g} {:.17g}\n", it.time_s(), it.critical.total_s(),
                             it.critical.exposed_comm_s(), it.critical.bubble_s);
        }
      }
      return out;
    });
    std::vector<std::array<double, 4>> rows;
    std::istringstream in(text);
    for (std::array<double, 4> r{}; in >> r[0] >> r[1] >> r[2] >> r[3];) rows.push_back(r);
    return rows;
  };
  const auto alone = run({job("a", p, costs, {0, 1}, 1, 0, o)});
  const auto together =
      run({job("a", p, costs, {0, 1}, 4, 0, o), job("b", p, costs, {3, 2}, 4, 2.5e-3, o)});
  ASSERT_EQ(alone.size(), 1u);
  ASSERT_EQ(together.size(), 8u);  // 4 iterations of a, then 4 of b
  const auto& a = alone[0];
  EXPECT_GT(a[2], 0);  // some exposed communication to compare
  EXPECT_GT(a[3], 0);  // and a pipeline bubble
  for (const auto& it : together) {
    EXPECT_NEAR(it[0] / a[0], 1.0, 1e-9);
    EXPECT_NEAR(it[1], it[0], it[0] * 1e-9);  // the breakdown adds up to the iteration
    EXPECT_NEAR(it[2], a[2], a[0] * 1e-9);
    EXPECT_NEAR(it[3], a[3], a[0] * 1e-9);
  }
}

// ---- placement files ------------------------------------------------------------------------

/// A temporary folder with files, removed at the end.
struct TempDir {
  fs::path dir;
  TempDir() {
    dir = fs::temp_directory_path() / ("tt-multijob-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~TempDir() { fs::remove_all(dir); }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name) << text;
    return dir / name;
  }
};

const std::string kHead = "topology: " + (kSource / "placements/two-leaf-h100-lab.yaml").string() +
                          "\njobs:\n";
const std::string kTiny = (kSource / "scenarios/gpt-tiny-brown.yaml").string();

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(Placement, ReadsNodesRangesHostListsAndDefaults) {
  TempDir d;
  const fs::path f = d.write("p.yaml", kHead +
                                           "  - {name: a, scenario: " + kTiny +
                                           ", nodes: [0-1, 5], iterations: 3, start: 2ms,"
                                           " set: [cluster.num_gpus=24]}\n"
                                           "  - {name: b, scenario: " + kTiny +
                                           ", hosts: 'dgx[002-003],dgx007'}\n");
  const Placement p = load_placement(f);
  ASSERT_EQ(p.jobs.size(), 2u);
  EXPECT_EQ(p.name, "p");
  EXPECT_EQ(p.num_nodes, 8);  // one more than the highest node used
  EXPECT_EQ(p.jobs[0].nodes, (std::vector<int64_t>{0, 1, 5}));
  EXPECT_EQ(p.jobs[0].iterations, 3);
  EXPECT_DOUBLE_EQ(p.jobs[0].start_s, 2e-3);
  ASSERT_EQ(p.jobs[0].overrides.size(), 1u);
  EXPECT_EQ(p.jobs[0].overrides[0].key, "cluster.num_gpus");
  EXPECT_EQ(p.jobs[1].nodes, (std::vector<int64_t>{2, 3, 7}));
  EXPECT_EQ(p.jobs[1].iterations, kDefaultJobIterations);
  EXPECT_EQ(parse_host_list("node[1-2,4],n9", 1, "w"), (std::vector<int64_t>{0, 1, 3, 8}));
}

TEST(Placement, BadInputNamesTheFileJobNodeAndKey) {
  TempDir d;
  const std::string a = "  - {name: a, scenario: " + kTiny + ", nodes: [0-1]}\n";
  auto err = [&](const std::string& body) {
    const fs::path f = d.write("bad.yaml", kHead + body);
    return error_of([&] { load_placement(f); });
  };
  // Two jobs on one node.
  EXPECT_THAT(err(a + "  - {name: b, scenario: " + kTiny + ", nodes: [1-2]}\n"),
              AllOf(HasSubstr("bad.yaml:4: jobs[1] (b): nodes: node 1 is job a's too")));
  // A node the fabric lacks.
  EXPECT_THAT(error_of([&] {
                load_placement(d.write("n.yaml", kHead + a + "num_nodes: 1\n"));
              }),
              AllOf(HasSubstr("n.yaml:3: jobs[0] (a): nodes: node 1 is not in the fabric of "
                              "num_nodes 1")));
  EXPECT_THAT(err("  - {name: a, scenario: x.yaml, nodes: [3-1]}\n"),
              HasSubstr("jobs[0] (a): nodes: '3-1' is not a node index or range"));
  EXPECT_THAT(err("  - {name: a, scenario: x.yaml, hosts: 'node[1-'}\n"),
              HasSubstr("jobs[0] (a): hosts: 'node[1-' is not a host name"));
  EXPECT_THAT(err("  - {name: a, scenario: x.yaml, nodes: [0], iteration: 3}\n"),
              AllOf(HasSubstr("jobs[0].iteration: unknown key; did you mean iterations?")));
  EXPECT_THAT(err("  - {name: a, scenario: x.yaml, nodes: [0], start: 5}\n"),
              HasSubstr("jobs[0] (a): start"));
  EXPECT_THAT(err(a + "  - {name: a, scenario: x.yaml, nodes: [4]}\n"),
              HasSubstr("a second job named a"));
}

TEST(Placement, JobsCheckedAgainstTheirScenarios) {
  TempDir d;
  // The lab fabric holds at most 4 nodes (2 SUs of 2: 16 leaves for a radix of 16).
  EXPECT_THAT(error_of([&] {
                run_cluster(load_placement(d.write(
                    "big.yaml", kHead + "  - {name: a, scenario: " + kTiny + ", nodes: [9]}\n")));
              }),
              AllOf(HasSubstr("big.yaml: num_nodes: 10 nodes of"), HasSubstr("two-leaf-h100-lab")));
  // Fewer GPUs than the scenario needs: 1 node of 8 GPUs for 16.
  EXPECT_THAT(error_of([&] {
                run_cluster(load_placement(d.write(
                    "few.yaml", kHead + "  - {name: a, scenario: " + kTiny +
                                    ", set: [cluster.num_gpus=16], nodes: [2]}\n")));
              }),
              AllOf(HasSubstr("few.yaml:3: jobs[0] (a): nodes: 1 nodes hold 8 GPUs, fewer than "
                              "the 16 its scenario needs (cluster.num_gpus")));
  // A TP group larger than a node's NVLink domain (16 GPUs of 8-GPU nodes).
  d.write("tp16.yaml",
          "name: tp16\nmodel: {architecture: gpt, num_layers: 2, hidden_size: 256, "
          "num_attention_heads: 16, seq_length: 128, vocab_size: 1024}\n"
          "parallelism: {tensor_model_parallel_size: 16, pipeline_model_parallel_size: 1, "
          "sequence_parallel: true}\n"
          "training: {micro_batch_size: 1, global_batch_size: 1, precision: bf16}\n"
          "cluster: {topology: " + (kSource / "topologies/dgx-h100-superpod.yaml").string() +
          ", num_gpus: 16}\n");
  EXPECT_THAT(error_of([&] {
                run_cluster(load_placement(d.write(
                    "dom.yaml", kHead + "  - {name: wide, scenario: tp16.yaml, nodes: [0-1]}\n")));
              }),
              AllOf(HasSubstr("dom.yaml:3: jobs[0] (wide)"),
                    HasSubstr("tensor_model_parallel_size"), HasSubstr("gpus_per_node")));
  // A scenario key the job's overrides get wrong names the job and the key.
  EXPECT_THAT(error_of([&] {
                run_cluster(load_placement(d.write(
                    "key.yaml", kHead + "  - {name: a, scenario: " + kTiny +
                                    ", set: [training.micro_batch=2], nodes: [0]}\n")));
              }),
              AllOf(HasSubstr("jobs[0] (a): scenario:"), HasSubstr("training.micro_batch")));
}

// A job alone in a placement, on the nodes simulate would use, is simulate's replay: the same
// iteration time (every iteration) and the same exposed communication.
TEST(MultiJob, OneJobAloneIsSimulate) {
  TempDir d;
  const fs::path f = d.write("one.yaml", kHead + "  - {name: tiny, scenario: " + kTiny +
                                             ", nodes: [0], iterations: 3}\n");
  const ClusterResult r = run_cluster(load_placement(f));
  const std::string text = run_isolated([&] {
    Scenario s = load_scenario(kTiny);
    s.cluster.topology = kSource / "placements/two-leaf-h100-lab.yaml";
    const SimulationSession session(s, SessionCostSource{}, SimulationOptions{});
    const SimulationResult sr = session.run();
    return fmt::format("{:.17g} {:.17g}", sr.iteration_time_s, sr.critical.exposed_comm_s());
  });
  std::istringstream in(text);
  double t = 0, comm = 0;
  in >> t >> comm;
  ASSERT_EQ(r.jobs.size(), 1u);
  const ClusterJobResult& j = r.jobs[0];
  EXPECT_EQ(j.alone.mean_s, t);  // bit-identical: the same engine on the same GPUs
  EXPECT_NEAR(j.together.min_s, t, t * 1e-12);
  EXPECT_NEAR(j.together.max_s, t, t * 1e-12);
  EXPECT_NEAR(j.slowdown, 1.0, 1e-12);
  EXPECT_NEAR(j.alone_breakdown.exposed_comm_s(), comm, 1e-15);
  EXPECT_EQ(j.together_iterations.size(), 3u);
}

}  // namespace
}  // namespace traintwin
