// sim/chakra_import.hpp: Chakra ET files back into a Program and through the replay.
// Round trip: a shipped scenario exported (sim/chakra_export.hpp), read back and replayed gives the
// ops, dependencies, groups and iteration time of the direct replay. The export rounds each
// compute op's time to the microsecond; these tests cost kernels in whole microseconds (the
// roofline rounded), so nothing is lost but floating-point summation (an op's kernels summed in
// the direct replay, its total read back): iteration times agree to 1e-9 relative; CP ring
// exchanges (a send and a recv in the trace) come back as one collective. Refusals: an unknown
// node or collective type, a dependency on a missing node, a cycle, an unresolved process group,
// a ring exchange half alone, each naming the file and the node. --cost-model: the kernels our
// export lists are priced by a cost model, other nodes keep their durations. SimGrid allows one
// engine per process, so each replay runs in a forked child (tests/bounded_child.hpp).
#include "sim/chakra_import.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "../bounded_child.hpp"
#include "core/scenario.hpp"
#include "sim/chakra_export.hpp"
#include "sim/cost_model.hpp"
#include "topologies/topology.hpp"
#include "traces/chakra/et_def.pb.h"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
namespace pb = ChakraProtoMsg;

/// The calibrated roofline with every kernel rounded to whole microseconds (at least 1 us).
class WholeMicrosecondCosts : public CostModel {
 public:
  explicit WholeMicrosecondCosts(const GpuSpec& gpu)
      : roofline_(make_roofline_cost_model(default_roofline_efficiency(gpu))) {}
  KernelCost duration(const Kernel& k, const GpuSpec& gpu) const override {
    KernelCost c = roofline_->duration(k, gpu);
    c.seconds = std::max(1.0, std::round(c.seconds * 1e6)) * 1e-6;
    return c;
  }

 private:
  std::unique_ptr<CostModel> roofline_;
};

/// A fresh folder under the temporary directory, removed at the end of the test.
struct TempDir {
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() /
             ("chakra_import_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

/// What a replay gives, as text (read back by the parent process): iteration time (hex float,
/// exact), ops, flows and the critical rank's breakdown.
std::string result_text(const SimulationResult& r) {
  char t[64];
  std::snprintf(t, sizeof t, "%a", r.iteration_time_s);
  std::ostringstream o;
  o << t << ' ' << r.ops << ' ' << r.flows << ' ' << r.critical.compute_s << ' '
    << r.critical.exposed_tp_s << ' ' << r.critical.exposed_pp_s << ' ' << r.critical.exposed_dp_s
    << ' ' << r.critical.exposed_ep_s;
  return o.str();
}

struct Replayed {
  double iteration_time_s = 0;
  int64_t ops = 0, flows = 0;
  double compute_s = 0, exposed_tp_s = 0, exposed_pp_s = 0, exposed_dp_s = 0, exposed_ep_s = 0;
};

/// Runs `fn` (one replay) in a child process and parses its result_text().
Replayed replay_in_child(const std::function<SimulationResult()>& fn) {
  const testing::BoundedResult r = testing::run_bounded(
      [&] {
        try {
          return result_text(fn());
        } catch (const std::exception& e) {
          return std::string("error: ") + e.what();
        }
      },
      300, 8ull << 30);
  EXPECT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.text.rfind("error: ", 0), std::string::npos) << r.text;
  Replayed out;
  std::istringstream in(r.text);
  std::string t;
  in >> t >> out.ops >> out.flows >> out.compute_s >> out.exposed_tp_s >> out.exposed_pp_s >>
      out.exposed_dp_s >> out.exposed_ep_s;
  out.iteration_time_s = std::strtod(t.c_str(), nullptr);
  return out;
}

std::vector<uint32_t> unique_sorted(std::vector<uint32_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

/// What round_trip() met over all ranks: ops by kind, and the ring exchanges among the
/// collectives.
struct RoundTripOps {
  std::array<int64_t, 4> kinds{};  // compute, collective, send, recv
  int64_t ring_exchanges = 0;
};

/// Exports shipped scenario `file` (with `write`), reads it back and checks it op by op against
/// build_program; then replays both (the direct one with every rank replayed, as the import does)
/// and compares.
RoundTripOps round_trip(const std::string& file, const std::string& tag,
                        const ChakraWriteOptions& write = {}) {
  const Scenario s = load_scenario(fs::path(TRAINTWIN_SOURCE_DIR) / "scenarios" / file);
  const TopologySpec topo = load_topology(s.cluster.topology);
  const WholeMicrosecondCosts costs(topo.gpu);
  TempDir dir(tag);
  const ChakraExport e = export_chakra(s, costs, topo.gpu, dir.path, {}, write);
  const ChakraTrace trace = read_chakra_trace(dir.path);
  EXPECT_EQ(trace.all_gather_size, write.all_gather_size);
  EXPECT_EQ(trace.all_gather_size_source, "traintwin metadata");

  // The Program read back is the Program lowered: ops, dependencies, peers, tags, groups.
  const Program direct = build_program(s);
  const Program& back = trace.program;
  EXPECT_EQ(trace.name, s.name);
  EXPECT_EQ(trace.layout_source, "traintwin metadata");
  EXPECT_EQ(trace.nodes, e.nodes);
  EXPECT_EQ(back.layout.order(), direct.layout.order());
  for (GroupKind g : {GroupKind::kTp, GroupKind::kCp, GroupKind::kDp, GroupKind::kPp}) {
    EXPECT_EQ(back.layout.size(g), direct.layout.size(g)) << to_string(g);
  }
  RoundTripOps met;
  std::array<int64_t, 4>& kinds = met.kinds;
  EXPECT_EQ(back.ranks.size(), direct.ranks.size());
  if (back.ranks.size() != direct.ranks.size()) return met;
  const TimedProgram timed(direct, costs, topo.gpu);
  const auto trace_costs = chakra_duration_cost_model();
  const TimedProgram timed_back(back, *trace_costs, topo.gpu);
  for (const auto& [r, rp] : direct.ranks) {
    const RankProgram& bp = back.ranks.at(r);
    EXPECT_EQ(bp.coord, rp.coord) << "rank " << r;
    EXPECT_EQ(bp.ops.size(), rp.ops.size()) << "rank " << r;
    if (bp.ops.size() != rp.ops.size()) return met;
    for (size_t i = 0; i < rp.ops.size(); ++i) {
      const Op& a = rp.ops[i];
      const Op& b = bp.ops[i];
      ++kinds[static_cast<size_t>(a.kind)];
      EXPECT_EQ(b.kind, a.kind) << "rank " << r << " op " << i << ": " << direct.label(a);
      if (b.kind != a.kind) return met;
      if (a.kind == OpKind::kCollective && a.collective == CollectiveKind::kRingExchange) {
        ++met.ring_exchanges;
      }
      EXPECT_EQ(unique_sorted(b.deps), unique_sorted(a.deps)) << direct.label(a);
      EXPECT_EQ(b.stream, a.stream) << direct.label(a);
      EXPECT_EQ(b.phase, a.phase) << direct.label(a);
      EXPECT_EQ(b.micro_batch, a.micro_batch) << direct.label(a);
      EXPECT_EQ(std::string(b.what), direct.label(a));
      switch (a.kind) {
        case OpKind::kCompute:
          EXPECT_NEAR(timed_back.compute_s(r, r, b.id), timed.compute_s(r, r, a.id), 1e-15)
              << direct.label(a);
          break;
        case OpKind::kCollective:
          EXPECT_EQ(b.collective, a.collective) << direct.label(a);
          EXPECT_EQ(b.group, a.group) << direct.label(a);
          EXPECT_EQ(b.bytes, a.bytes) << direct.label(a);
          break;
        case OpKind::kSend:
        case OpKind::kRecv:
          EXPECT_EQ(b.peer, a.peer) << direct.label(a);
          EXPECT_EQ(b.tag, a.tag) << direct.label(a);
          EXPECT_EQ(b.bytes, a.bytes) << direct.label(a);
          break;
      }
    }
  }

  // The same iteration in both replays.
  SimulationOptions full;
  full.exact_reductions = false;
  const Replayed d = replay_in_child([&] { return simulate(s, topo, costs, full); });
  const Replayed i = replay_in_child([&] { return simulate_chakra_trace(trace, topo); });
  EXPECT_GT(d.iteration_time_s, 0);
  EXPECT_NEAR(i.iteration_time_s, d.iteration_time_s, 1e-9 * d.iteration_time_s);
  int64_t ops = 0;
  for (int64_t k : kinds) ops += k;
  EXPECT_EQ(d.ops, ops);
  EXPECT_EQ(i.ops, d.ops);
  EXPECT_EQ(i.flows, d.flows);
  EXPECT_NEAR(i.compute_s, d.compute_s, 1e-9 * d.iteration_time_s);
  EXPECT_NEAR(i.exposed_tp_s, d.exposed_tp_s, 1e-9 * d.iteration_time_s);
  EXPECT_NEAR(i.exposed_pp_s, d.exposed_pp_s, 1e-9 * d.iteration_time_s);
  EXPECT_NEAR(i.exposed_dp_s, d.exposed_dp_s, 1e-9 * d.iteration_time_s);
  EXPECT_NEAR(i.exposed_ep_s, d.exposed_ep_s, 1e-9 * d.iteration_time_s);
  return met;
}

// A dense GPT, TP 2 x PP 2 x DP 2 with sequence parallelism (1F1B sends and recvs, TP
// all-gathers and reduce-scatters, DP gradient reduce) on one DGX H100.
TEST(ChakraImport, RoundTripOfGptTinyGivesTheDirectReplay) {
  const RoundTripOps met = round_trip("gpt-tiny-brown.yaml", "gpt");
  EXPECT_GT(met.kinds[static_cast<size_t>(OpKind::kCollective)], 0);
  EXPECT_GT(met.kinds[static_cast<size_t>(OpKind::kSend)], 0);
}

// The same with the all-gathers' comm_size as the gathered output (SimAI's reading): the metadata
// says so and the import reads it back as the same Program.
TEST(ChakraImport, RoundTripWithOutputSizedAllGathersGivesTheDirectReplay) {
  const RoundTripOps met = round_trip("gpt-tiny-brown.yaml", "gpt_output",
                                      {.all_gather_size = ChakraAllGatherSize::kOutput});
  EXPECT_GT(met.kinds[static_cast<size_t>(OpKind::kCollective)], 0);
}

// A mixture of experts, EP 2 over DP 8 (all-to-all token dispatch and combine over EP, expert
// gradients over expert-DP).
TEST(ChakraImport, RoundTripOfMoeTinyGivesTheDirectReplay) {
  const RoundTripOps met = round_trip("moe-tiny-brown.yaml", "moe");
  EXPECT_GT(met.kinds[static_cast<size_t>(OpKind::kCollective)], 0);
}

// Context parallelism with p2p cp_comm_type (ring attention), CP 2 x DP 4 on one DGX H100: each
// ring exchange goes out as a send and a recv marked traintwin.ring_exchange and comes back as
// the one collective over the CP group, so ops and iteration time are the direct replay's.
TEST(ChakraImport, RoundTripOfContextParallelRingExchangesGivesTheDirectReplay) {
  const RoundTripOps met = round_trip("llama3.1-8b-h100-8.yaml", "cp");
  EXPECT_GT(met.ring_exchanges, 0);
}

// Issue 30's "round trip exact on the shipped scenarios": every scenario under scenarios/ (and
// scenarios/device/) of at most 16 GPUs, besides the three above (about 3 s in all). Left out,
// since exporting and replaying every rank twice takes long: qwen3-30b-a3b-h100-16 (its 16 ranks'
// MoE all-to-alls: about 65 s; it passed when last run by hand) and every scenario of 64 GPUs
// and more (llama3.1-70b, llama3.1-8b-128k, mixtral-8x7b, gpt3-175b, grok1, llama3.1-405b,
// megatron-145b, gpt-400b, whatif-175b).
TEST(ChakraImport, RoundTripOfEveryShippedScenarioUpTo16GpusGivesTheDirectReplay) {
  const fs::path root = fs::path(TRAINTWIN_SOURCE_DIR) / "scenarios";
  const std::set<std::string> own_test = {"gpt-tiny-brown.yaml", "moe-tiny-brown.yaml",
                                          "llama3.1-8b-h100-8.yaml"};
  const std::set<std::string> too_long = {"qwen3-30b-a3b-h100-16.yaml"};
  std::vector<std::string> files;
  for (const fs::path sub : {fs::path(), fs::path("device")}) {
    for (const auto& entry : fs::directory_iterator(root / sub)) {
      if (entry.path().extension() != ".yaml") continue;
      const std::string file = (sub / entry.path().filename()).string();
      if (own_test.count(file) || too_long.count(file)) continue;
      if (load_scenario(entry.path()).cluster.num_gpus > 16) continue;
      files.push_back(file);
    }
  }
  std::sort(files.begin(), files.end());
  EXPECT_GE(files.size(), 6u);
  int n = 0;
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const auto t0 = std::chrono::steady_clock::now();
    round_trip(file, "all" + std::to_string(n++));
    // Informational: what each scenario costs this test.
    std::printf("%s: %.1f s\n", file.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

// ---- hand-written traces ------------------------------------------------------------------------

void write_delimited(const google::protobuf::Message& m, std::ostream& out) {
  google::protobuf::io::OstreamOutputStream raw(&out);
  google::protobuf::io::CodedOutputStream coded(&raw);
  coded.WriteVarint32(static_cast<uint32_t>(m.ByteSizeLong()));
  m.SerializeWithCachedSizes(&coded);
}

pb::Node node(uint64_t id, pb::NodeType type, const std::vector<uint64_t>& deps = {}) {
  pb::Node n;
  n.set_id(id);
  n.set_name("n" + std::to_string(id));
  n.set_type(type);
  for (uint64_t d : deps) n.add_data_deps(d);
  return n;
}

void attr(pb::Node& n, const std::string& name, int64_t v) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_int64_val(v);
}

void attr(pb::Node& n, const std::string& name, const std::string& v) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_string_val(v);
}

pb::Node compute(uint64_t id, uint64_t us, const std::vector<uint64_t>& deps = {}) {
  pb::Node n = node(id, pb::COMP_NODE, deps);
  n.set_duration_micros(us);
  return n;
}

pb::Node all_reduce(uint64_t id, int64_t bytes, const std::vector<uint64_t>& deps) {
  pb::Node n = node(id, pb::COMM_COLL_NODE, deps);
  attr(n, "comm_type", int64_t{pb::ALL_REDUCE});
  attr(n, "comm_size", bytes);
  return n;
}

/// Writes DIR/t.<rank>.et for every rank: `nodes_of(rank)` after a GlobalMetadata (1.0.0).
void write_trace(const fs::path& dir, int64_t ranks,
                 const std::function<std::vector<pb::Node>(int64_t)>& nodes_of) {
  for (int64_t r = 0; r < ranks; ++r) {
    std::ofstream out(dir / ("t." + std::to_string(r) + ".et"), std::ios::binary);
    pb::GlobalMetadata meta;
    meta.set_version("1.0.0");
    write_delimited(meta, out);
    for (const pb::Node& n : nodes_of(r)) write_delimited(n, out);
  }
}

/// The message read_chakra_trace throws for `dir` ("" when it does not throw).
std::string refusal(const fs::path& dir) {
  try {
    read_chakra_trace(dir);
  } catch (const ChakraTraceError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ChakraImport, RefusesAnUnknownNodeTypeNamingFileAndNode) {
  TempDir dir("node_type");
  write_trace(dir.path, 1, [](int64_t) {
    return std::vector<pb::Node>{compute(1, 5), node(2, pb::MEM_LOAD_NODE, {1})};
  });
  const std::string msg = refusal(dir.path);
  EXPECT_TRUE(has(msg, "t.0.et")) << msg;
  EXPECT_TRUE(has(msg, "node 2 (n2)")) << msg;
  EXPECT_TRUE(has(msg, "MEM_LOAD_NODE")) << msg;
}

TEST(ChakraImport, RefusesAnUnknownCollectiveTypeByName) {
  TempDir dir("coll_type");
  write_trace(dir.path, 1, [](int64_t) {
    pb::Node n = node(4, pb::COMM_COLL_NODE);
    attr(n, "comm_type", int64_t{pb::REDUCE_SCATTER_BLOCK});
    attr(n, "comm_size", int64_t{1024});
    return std::vector<pb::Node>{n};
  });
  const std::string msg = refusal(dir.path);
  EXPECT_TRUE(has(msg, "node 4 (n4)")) << msg;
  EXPECT_TRUE(has(msg, "REDUCE_SCATTER_BLOCK")) << msg;
}

TEST(ChakraImport, RefusesADanglingDependencyNamingBothNodes) {
  TempDir dir("dangling");
  write_trace(dir.path, 1, [](int64_t) {
    return std::vector<pb::Node>{compute(1, 5), compute(2, 5, {1, 7})};
  });
  const std::string msg = refusal(dir.path);
  EXPECT_TRUE(has(msg, "t.0.et")) << msg;
  EXPECT_TRUE(has(msg, "node 2 (n2)")) << msg;
  EXPECT_TRUE(has(msg, "node 7")) << msg;
}

TEST(ChakraImport, ReadsControlDependenciesAsNoDependencies) {
  TempDir dir("ctrl");
  write_trace(dir.path, 1, [](int64_t) {
    pb::Node b = compute(2, 5, {1});
    b.add_ctrl_deps(77);  // a host op the converter dropped
    // A host op (PyTorch's c10d:: calls are collective nodes run on the CPU), launched by 2.
    pb::Node c = node(3, pb::COMM_COLL_NODE);
    c.set_duration_micros(9);
    pb::AttributeProto* cpu = c.add_attr();
    cpu->set_name("is_cpu_op");
    cpu->set_bool_val(true);
    c.add_ctrl_deps(2);
    return std::vector<pb::Node>{compute(1, 5), b, c, compute(4, 5)};
  });
  const ChakraTrace t = read_chakra_trace(dir.path);
  const RankProgram& rp = t.program.ranks.at(0);
  ASSERT_EQ(rp.ops.size(), 4u);
  EXPECT_EQ(rp.ops[1].deps, std::vector<uint32_t>{0});
  // The host op waits for nothing (its ctrl_deps are none, no CPU op before it); it is a compute
  // op of its duration.
  EXPECT_TRUE(rp.ops[2].deps.empty());
  EXPECT_EQ(rp.ops[2].kind, OpKind::kCompute);
  EXPECT_EQ(t.program.kernels.at(rp.ops[2].kernels.at(0)).key.shape, std::vector<int64_t>{9});
  // GPU compute nodes run one at a time, in order.
  EXPECT_EQ(rp.ops[3].deps, std::vector<uint32_t>{1});
}

TEST(ChakraImport, RefusesACycleNamingItsNodes) {
  TempDir dir("cycle");
  write_trace(dir.path, 1, [](int64_t) {
    // 3 <- 5 <- 4 <- 3, and 2 before them; control dependencies are no dependencies.
    pb::Node c = compute(6, 5, {2});
    c.add_ctrl_deps(99);
    return std::vector<pb::Node>{compute(2, 5), compute(3, 5, {2, 5}), compute(4, 5, {3}),
                                 compute(5, 5, {4}), c};
  });
  const std::string msg = refusal(dir.path);
  EXPECT_TRUE(has(msg, "dependency cycle")) << msg;
  for (const char* n : {"node 3 (n3)", "node 4 (n4)", "node 5 (n5)"}) {
    EXPECT_TRUE(has(msg, n)) << msg;
  }
  EXPECT_FALSE(has(msg, "node 6")) << msg;  // not on the cycle
}

TEST(ChakraImport, RefusesAProcessGroupItCannotResolve) {
  TempDir dir("pg");
  write_trace(dir.path, 2, [](int64_t) {
    pb::Node n = all_reduce(1, 4096, {});
    attr(n, "pg_name", std::string("7"));
    return std::vector<pb::Node>{n};
  });
  const std::string msg = refusal(dir.path);
  EXPECT_TRUE(has(msg, "pg_name \"7\"")) << msg;
  EXPECT_TRUE(has(msg, "t.comm_groups.json")) << msg;
  // With the groups given it resolves.
  std::ofstream(dir.path / "t.comm_groups.json") << R"({"7": [0, 1]})";
  EXPECT_EQ(refusal(dir.path), "");
}

TEST(ChakraImport, RefusesAProcessGroupNoRankLayoutHolds) {
  TempDir dir("pg_layout");
  write_trace(dir.path, 4, [](int64_t r) {
    pb::Node n = all_reduce(1, 4096, {});
    attr(n, "pg_name", std::string(r < 3 ? "1" : "2"));
    return std::vector<pb::Node>{n};
  });
  std::ofstream(dir.path / "t.comm_groups.json") << R"({"1": [0, 1, 2], "2": [3]})";
  const std::string msg = refusal(dir.path);
  EXPECT_TRUE(has(msg, "process group \"1\" [0,1,2]")) << msg;
  EXPECT_TRUE(has(msg, "t.0.et: node 1 (n1)")) << msg;
}

// A ring exchange half (traintwin.ring_exchange) whose other half is missing is refused by name;
// with both halves it reads back as one collective over the group, and sends and recvs without
// the attribute stay sends and recvs (ForeignTraceWithoutGroupsOrTagsSimulates).
TEST(ChakraImport, RebuildsARingExchangeFromItsHalvesAndRefusesAHalfAlone) {
  TempDir dir("ring");
  const auto half = [](uint64_t id, bool send, int64_t r, const std::vector<uint64_t>& deps) {
    pb::Node n = node(id, send ? pb::COMM_SEND_NODE : pb::COMM_RECV_NODE, deps);
    attr(n, send ? "comm_dst" : "comm_src", 1 - r);
    attr(n, "comm_size", int64_t{1} << 20);
    pb::AttributeProto* tag = n.add_attr();
    tag->set_name("comm_tag");
    tag->set_int32_val(1 << 30);
    attr(n, "traintwin.ring_exchange", std::string("3"));
    return n;
  };
  bool with_recv = false;
  write_trace(dir.path, 2, [&](int64_t r) {
    std::vector<pb::Node> nodes = {compute(1, 5), half(2, true, r, {1})};
    if (with_recv) nodes.push_back(half(3, false, r, {1}));
    nodes.push_back(compute(4, 5, {2, 3}));
    return nodes;
  });
  std::ofstream(dir.path / "t.comm_groups.json") << R"({"3": [0, 1]})";
  const std::string msg = refusal(dir.path);
  EXPECT_TRUE(has(msg, "t.0.et: node 2 (n2)")) << msg;
  EXPECT_TRUE(has(msg, "ring exchange send (traintwin.ring_exchange \"3\"")) << msg;
  EXPECT_TRUE(has(msg, "without its recv")) << msg;

  with_recv = true;
  write_trace(dir.path, 2, [&](int64_t r) {
    std::vector<pb::Node> nodes = {compute(1, 5), half(2, true, r, {1})};
    if (with_recv) nodes.push_back(half(3, false, r, {1}));
    nodes.push_back(compute(4, 5, {2, 3}));
    return nodes;
  });
  const ChakraTrace t = read_chakra_trace(dir.path);
  const RankProgram& rp = t.program.ranks.at(1);
  ASSERT_EQ(rp.ops.size(), 3u);
  EXPECT_EQ(rp.ops[1].kind, OpKind::kCollective);
  EXPECT_EQ(rp.ops[1].collective, CollectiveKind::kRingExchange);
  EXPECT_EQ(rp.ops[1].bytes, int64_t{1} << 20);
  EXPECT_EQ(rp.ops[2].deps, std::vector<uint32_t>({0, 1}));
  EXPECT_EQ(t.nodes, 8);  // nodes in the files

  // A recv alone (its send dropped, nothing depends on it) is refused as a half.
  write_trace(dir.path, 2, [&](int64_t r) {
    return std::vector<pb::Node>{compute(1, 5), half(3, false, r, {1})};
  });
  const std::string alone = refusal(dir.path);
  EXPECT_TRUE(has(alone, "node 3 (n3)")) << alone;
  EXPECT_TRUE(has(alone, "ring exchange recv")) << alone;
  EXPECT_TRUE(has(alone, "without its send")) << alone;
}

TEST(ChakraImport, RefusesAMissingRankNamingItsFile) {
  TempDir dir("missing");
  write_trace(dir.path, 3, [](int64_t) { return std::vector<pb::Node>{compute(1, 5)}; });
  fs::remove(dir.path / "t.1.et");
  const std::string msg = refusal(dir.path);
  EXPECT_TRUE(has(msg, "rank 1")) << msg;
  EXPECT_TRUE(has(msg, "t.1.et")) << msg;
}

// A trace as other tools write it (no traintwin attributes, no comm groups, no tags, nodes out of
// dependency order): compute, an all-reduce over every rank, then a ring of untagged sends and
// recvs. The layout is inferred (DP over all 8 ranks); the iteration is the compute, the
// all-reduce and the transfer, on each of the 8 GPUs of one DGX H100.
TEST(ChakraImport, ForeignTraceWithoutGroupsOrTagsSimulates) {
  TempDir dir("foreign");
  constexpr int64_t kRanks = 8;
  write_trace(dir.path, kRanks, [](int64_t r) {
    pb::Node send = node(30, pb::COMM_SEND_NODE, {20});
    attr(send, "comm_dst", (r + 1) % kRanks);
    attr(send, "comm_size", int64_t{1} << 20);
    pb::Node recv = node(31, pb::COMM_RECV_NODE, {20});
    attr(recv, "comm_src", (r + kRanks - 1) % kRanks);
    attr(recv, "comm_size", int64_t{1} << 20);
    // The last compute node comes first in the file: it waits for the recv.
    return std::vector<pb::Node>{compute(40, 7, {30, 31}), compute(10, 100),
                                 all_reduce(20, int64_t{64} << 20, {10}), send, recv};
  });
  const ChakraTrace t = read_chakra_trace(dir.path / "t");  // ASTRA-sim's prefix form
  EXPECT_EQ(t.layout_source, "inferred from the process groups");
  EXPECT_EQ(t.program.layout.size(GroupKind::kDp), kRanks);
  const RankProgram& rp = t.program.ranks.at(3);
  ASSERT_EQ(rp.ops.size(), 5u);
  EXPECT_EQ(std::string(rp.ops[0].what), "n10");  // topological order: the compute first
  EXPECT_EQ(std::string(rp.ops[4].what), "n40");
  EXPECT_EQ(rp.ops[2].kind, OpKind::kSend);
  EXPECT_EQ(rp.ops[2].peer, 4);
  EXPECT_EQ(rp.ops[3].peer, 2);
  EXPECT_EQ(rp.ops[1].stream, Stream::kDpComm);
  const TopologySpec topo =
      load_topology(fs::path(TRAINTWIN_SOURCE_DIR) / "topologies/dgx-h100-superpod.yaml");
  const Replayed r = replay_in_child([&] { return simulate_chakra_trace(t, topo); });
  EXPECT_EQ(r.ops, 5 * kRanks);
  EXPECT_NEAR(r.compute_s, 107e-6, 1e-12);
  // Compute, then an all-reduce and a transfer that take time on NVLink.
  EXPECT_GT(r.iteration_time_s, 107e-6 + 1e-6);
  EXPECT_LT(r.iteration_time_s, 107e-6 + 10e-3);
}

/// A 4-rank trace of one ALL_GATHER of `comm_size` bytes over every rank, each file's
/// GlobalMetadata naming convention `said[rank]` (none where empty).
void write_all_gather_trace(const fs::path& dir, int64_t comm_size,
                            const std::vector<std::string>& said) {
  for (int64_t r = 0; r < 4; ++r) {
    std::ofstream out(dir / ("t." + std::to_string(r) + ".et"), std::ios::binary);
    pb::GlobalMetadata meta;
    meta.set_version("1.0.0");
    if (!said[static_cast<size_t>(r)].empty()) {
      pb::AttributeProto* a = meta.add_attr();
      a->set_name(kChakraAllGatherSizeAttr);
      a->set_string_val(said[static_cast<size_t>(r)]);
    }
    write_delimited(meta, out);
    pb::Node n = node(1, pb::COMM_COLL_NODE);
    attr(n, "comm_type", int64_t{pb::ALL_GATHER});
    attr(n, "comm_size", comm_size);
    write_delimited(n, out);
  }
}

// An ALL_GATHER's comm_size: each rank's input unless the trace or the caller says otherwise.
// 1 MiB per rank over 4 ranks is a 4 MiB gathered output, the Program op's bytes (nccl-tests'
// size); read as the output it stays 1 MiB.
TEST(ChakraImport, ReadsAnAllGatherSizeAsTheTraceOrTheCallerSays) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  const auto bytes = [](const ChakraTrace& t) { return t.program.ranks.at(2).ops.at(0).bytes; };
  {
    TempDir dir("ag_default");
    write_all_gather_trace(dir.path, kMiB, {"", "", "", ""});
    const ChakraTrace t = read_chakra_trace(dir.path);
    EXPECT_EQ(bytes(t), 4 * kMiB);
    EXPECT_EQ(t.all_gather_size_source, "ASTRA-sim's reading (default)");
    const ChakraTrace o =
        read_chakra_trace(dir.path, {.all_gather_size = ChakraAllGatherSize::kOutput});
    EXPECT_EQ(bytes(o), kMiB);
    EXPECT_EQ(o.all_gather_size_source, "--all-gather-comm-size");
  }
  {
    TempDir dir("ag_said");
    write_all_gather_trace(dir.path, kMiB, {"output", "output", "output", "output"});
    const ChakraTrace t = read_chakra_trace(dir.path);
    EXPECT_EQ(bytes(t), kMiB);
    EXPECT_EQ(t.all_gather_size_source, "traintwin metadata");
    // The caller contradicting the trace is refused, naming both.
    try {
      read_chakra_trace(dir.path, {.all_gather_size = ChakraAllGatherSize::kInput});
      ADD_FAILURE() << "no refusal";
    } catch (const ChakraTraceError& e) {
      EXPECT_TRUE(has(e.what(), "counts the output")) << e.what();
      EXPECT_TRUE(has(e.what(), "not the input")) << e.what();
    }
  }
  {
    TempDir dir("ag_mixed");
    write_all_gather_trace(dir.path, kMiB, {"input", "input", "output", "input"});
    const std::string msg = refusal(dir.path);
    EXPECT_TRUE(has(msg, "t.2.et")) << msg;
    EXPECT_TRUE(has(msg, "is \"output\", in rank 0's file \"input\"")) << msg;
  }
  {
    TempDir dir("ag_missing");
    write_all_gather_trace(dir.path, kMiB, {"input", "", "input", "input"});
    const std::string msg = refusal(dir.path);
    EXPECT_TRUE(has(msg, "t.1.et")) << msg;
    EXPECT_TRUE(has(msg, "is absent")) << msg;
  }
  {
    TempDir dir("ag_bad");
    write_all_gather_trace(dir.path, kMiB, {"whole", "whole", "whole", "whole"});
    const std::string msg = refusal(dir.path);
    EXPECT_TRUE(has(msg, "\"whole\" (allowed: input, output)")) << msg;
  }
}

// A trace from Chakra's own repository (tests/sim/chakra_fixture/NOTICE.md: 12 nodes of the
// PyTorch-recorded, Chakra-converted trace its feeder tests read): GPU kernels, host ops
// (is_cpu_op: PyTorch's c10d::broadcast_ calls, collective nodes run as host compute), two NCCL
// broadcasts without process group, and ctrl_deps on host ops the converter left out. It loads
// and simulates on one H100: every node runs, and the compute time is the trace's durations.
TEST(ChakraImport, TraceFromChakraRepositoryLoadsAndSimulates) {
  const ChakraTrace t =
      read_chakra_trace(fs::path(TRAINTWIN_SOURCE_DIR) / "tests/sim/chakra_fixture");
  EXPECT_EQ(t.name, "chakra");
  EXPECT_EQ(t.nodes, 12);
  ASSERT_EQ(t.program.ranks.size(), 1u);
  const RankProgram& rp = t.program.ranks.at(0);
  int64_t broadcasts = 0;
  double compute_us = 0, longest_us = 0;
  for (const Op& op : rp.ops) {
    if (op.kind == OpKind::kCollective) {
      ++broadcasts;
      EXPECT_EQ(op.collective, CollectiveKind::kBroadcast);
      EXPECT_GT(op.bytes, 0);
    }
    for (uint32_t k : op.kernels) {
      const double us = static_cast<double>(t.program.kernels[k].key.shape.at(0));
      compute_us += us;
      longest_us = std::max(longest_us, us);
    }
  }
  EXPECT_EQ(broadcasts, 2);
  EXPECT_GT(compute_us, 0);
  const TopologySpec topo =
      load_topology(fs::path(TRAINTWIN_SOURCE_DIR) / "topologies/cuda-h100-1gpu.yaml");
  const Replayed r = replay_in_child([&] { return simulate_chakra_trace(t, topo); });
  EXPECT_EQ(r.ops, 12);
  EXPECT_NEAR(r.compute_s, compute_us * 1e-6, 1e-12);
  EXPECT_GE(r.iteration_time_s, longest_us * 1e-6);
  EXPECT_LE(r.iteration_time_s, compute_us * 1e-6 + 1e-3);
}

// ---- --cost-model ------------------------------------------------------------------------------

// Our export lists each compute node's kernels (traintwin.kernels): read with
// ChakraReadOptions::kernels, every compute node runs them, and the replay with a cost model (the
// calibrated roofline, not the whole-microsecond one the export timed with) is the direct
// simulation with that cost model.
TEST(ChakraImport, CostModelPricesExportedKernelsAsTheDirectSimulation) {
  const Scenario s =
      load_scenario(fs::path(TRAINTWIN_SOURCE_DIR) / "scenarios/gpt-tiny-brown.yaml");
  const TopologySpec topo = load_topology(s.cluster.topology);
  const WholeMicrosecondCosts exported_with(topo.gpu);
  TempDir dir("cost_model");
  export_chakra(s, exported_with, topo.gpu, dir.path, {});
  const ChakraTrace trace = read_chakra_trace(dir.path, {.kernels = true});
  EXPECT_GT(trace.compute_nodes, 0);
  EXPECT_EQ(trace.kernel_nodes, trace.compute_nodes);
  const std::unique_ptr<CostModel> roofline =
      make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  SimulationOptions full;
  full.exact_reductions = false;
  const Replayed d = replay_in_child([&] { return simulate(s, topo, *roofline, full); });
  const Replayed i =
      replay_in_child([&] { return simulate_chakra_trace(trace, topo, {}, roofline.get()); });
  const Replayed at_durations =
      replay_in_child([&] { return simulate_chakra_trace(read_chakra_trace(dir.path), topo); });
  EXPECT_NEAR(i.iteration_time_s, d.iteration_time_s, 1e-9 * d.iteration_time_s);
  EXPECT_NEAR(i.compute_s, d.compute_s, 1e-9 * d.iteration_time_s);
  EXPECT_EQ(i.ops, d.ops);
  // The whole-microsecond durations give another time: the cost model did price the nodes.
  EXPECT_GT(std::abs(at_durations.iteration_time_s - d.iteration_time_s),
            1e-6 * d.iteration_time_s);
}

// Nodes without traintwin.kernels, or naming a kernel traintwin does not know, keep their trace
// durations and are counted apart; a traintwin.kernels that is no kernel list is refused.
TEST(ChakraImport, CostModelKeepsTheDurationsOfUnknownKernels) {
  TempDir dir("cost_model_unknown");
  const std::string known = R"([{"name":"gemm_fwd","shape":[1024,1024,1024],"dtype":"bf16","tp":1,)"
                            R"("flops":2147483648.0,"bytes":6291456.0}])";
  const std::string unknown =
      R"([{"name":"aten::mm","shape":[1],"dtype":"bf16","tp":1,"flops":1.0,"bytes":1.0}])";
  std::string third = unknown;
  write_trace(dir.path, 1, [&](int64_t) {
    pb::Node a = compute(1, 1000);
    attr(a, "traintwin.kernels", known);
    pb::Node b = compute(2, 70, {1});
    attr(b, "traintwin.kernels", third);
    return std::vector<pb::Node>{a, b, compute(3, 30, {2})};
  });
  const ChakraTrace t = read_chakra_trace(dir.path, {.kernels = true});
  EXPECT_EQ(t.compute_nodes, 3);
  EXPECT_EQ(t.kernel_nodes, 1);
  const RankProgram& rp = t.program.ranks.at(0);
  EXPECT_EQ(t.program.kernels[rp.ops[0].kernels.at(0)].key.name, "gemm_fwd");
  EXPECT_EQ(t.program.kernels[rp.ops[1].kernels.at(0)].key.name, kChakraComputeKernel);
  EXPECT_EQ(t.program.kernels[rp.ops[2].kernels.at(0)].key.name, kChakraComputeKernel);
  // Without the option every node keeps its duration.
  EXPECT_EQ(read_chakra_trace(dir.path).kernel_nodes, 0);

  third = R"({"name":"gemm_fwd"})";
  write_trace(dir.path, 1, [&](int64_t) {
    pb::Node a = compute(1, 1000);
    attr(a, "traintwin.kernels", third);
    return std::vector<pb::Node>{a};
  });
  std::string msg;
  try {
    read_chakra_trace(dir.path, {.kernels = true});
  } catch (const ChakraTraceError& e) {
    msg = e.what();
  }
  EXPECT_TRUE(has(msg, "t.0.et: node 1 (n1)")) << msg;
  EXPECT_TRUE(has(msg, "traintwin.kernels")) << msg;
}

}  // namespace
}  // namespace traintwin
