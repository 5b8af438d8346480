// sim/chakra_export.hpp: Chakra ET files read back with the schema's own parser. Every op is a
// node with the Program's dependencies; compute durations are the timing layer's; collectives
// keep their kind, size and group (the comm groups hold each member); every send has the recv
// of the same size and tag on its peer, including the sends and recvs a ring exchange (CP's KV
// ring) becomes; the version and the length-delimited framing are Chakra's.
#include "sim/chakra_export.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "topologies/topology.hpp"
#include "traces/chakra/et_def.pb.h"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
namespace pb = ChakraProtoMsg;

struct EtFile {
  pb::GlobalMetadata meta;
  std::vector<pb::Node> nodes;
};

/// Reads one ET file as Chakra's feeder does: length-delimited messages, metadata first.
EtFile read_et(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  google::protobuf::io::IstreamInputStream raw(&in);
  google::protobuf::io::CodedInputStream coded(&raw);
  EtFile et;
  auto next = [&](google::protobuf::Message& m) {
    uint32_t size = 0;
    if (!coded.ReadVarint32(&size)) return false;
    const auto limit = coded.PushLimit(static_cast<int>(size));
    EXPECT_TRUE(m.ParseFromCodedStream(&coded)) << file;
    coded.PopLimit(limit);
    return true;
  };
  EXPECT_TRUE(next(et.meta)) << file;
  pb::Node n;
  while (next(n)) et.nodes.push_back(n);
  return et;
}

const pb::AttributeProto* attr(const pb::Node& n, const std::string& name) {
  for (const auto& a : n.attr()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

/// A GPT with TP 2, CP 2 (ring attention: a ring exchange), PP 2 (sends and recvs) and DP 1 on
/// 8 GPUs of a DGX H100.
Scenario tiny() {
  const std::string yaml =
      "name: chakra-tiny\n"
      "model: {num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 64,\n"
      "        vocab_size: 256}\n"
      "parallelism: {tensor_model_parallel_size: 2, context_parallel_size: 2,\n"
      "              pipeline_model_parallel_size: 2, sequence_parallel: true}\n"
      "training: {micro_batch_size: 1, global_batch_size: 4, precision: bf16}\n"
      "cluster: {topology: " TRAINTWIN_SOURCE_DIR
      "/topologies/dgx-h100-superpod.yaml, num_gpus: 8}\n";
  return parse_scenario(yaml, "chakra-tiny", TRAINTWIN_SOURCE_DIR);
}

TEST(ChakraExport, EveryRankReadsBackWithItsOpsDependenciesAndCosts) {
  const Scenario s = tiny();
  const TopologySpec topo = load_topology(s.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const fs::path dir =
      fs::temp_directory_path() / ("chakra_export_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const ChakraExport e = export_chakra(s, *costs, topo.gpu, dir, {});
  ASSERT_EQ(e.files.size(), 8u);
  const nlohmann::json groups = nlohmann::json::parse(std::ifstream(e.comm_groups));

  // (src, dst, tag) -> size, for sends and recvs separately.
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> sends, recvs;
  int64_t ring_sends = 0;
  int64_t all_gathers = 0;
  const Program all = build_program(s);
  const TimedProgram timed(all, *costs, topo.gpu);
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(e.files[static_cast<size_t>(r)].filename(),
              "chakra-tiny." + std::to_string(r) + ".et");
    const EtFile et = read_et(e.files[static_cast<size_t>(r)]);
    EXPECT_EQ(et.meta.version(), kChakraEtVersion);
    // The all-gather convention, ASTRA-sim's by default, in the metadata.
    const auto said = std::find_if(et.meta.attr().begin(), et.meta.attr().end(),
                                   [](const auto& a) { return a.name() == kChakraAllGatherSizeAttr; });
    ASSERT_NE(said, et.meta.attr().end());
    EXPECT_EQ(said->string_val(), "input");
    const RankProgram& rp = all.ranks.at(r);
    std::set<uint64_t> seen;
    size_t op_nodes = 0;
    for (const pb::Node& n : et.nodes) {
      // Ids unique; every dependency on a node written before (the order is a topological one).
      EXPECT_TRUE(seen.insert(n.id()).second) << n.name();
      for (uint64_t d : n.data_deps()) EXPECT_TRUE(seen.count(d)) << n.name() << " <- " << d;
      for (uint64_t d : n.ctrl_deps()) EXPECT_TRUE(seen.count(d)) << n.name() << " <- " << d;
      if (n.id() % 2 == 1) {  // a ring exchange's recv, marked with its CP group
        EXPECT_EQ(n.type(), pb::COMM_RECV_NODE);
        ASSERT_NE(attr(n, "traintwin.ring_exchange"), nullptr) << n.name();
        EXPECT_TRUE(groups.contains(attr(n, "traintwin.ring_exchange")->string_val()));
        continue;
      }
      ++op_nodes;
      const Op& op = rp.ops.at(n.id() / 2);
      EXPECT_GE(n.data_deps_size(), static_cast<int>(op.deps.size())) << n.name();
      EXPECT_EQ(n.name(), all.label(op));
      switch (op.kind) {
        case OpKind::kCompute:
          EXPECT_EQ(n.type(), pb::COMP_NODE);
          EXPECT_EQ(n.duration_micros(),
                    static_cast<uint64_t>(std::llround(timed.compute_s(r, r, op.id) * 1e6)));
          EXPECT_EQ(attr(n, "num_ops")->int64_val(), std::llround(all.op_flops(op)));
          if (!op.kernels.empty()) {
            // The op's kernels, in order, with their keys and work.
            const nlohmann::json ks =
                nlohmann::json::parse(attr(n, kChakraKernelsAttr)->string_val());
            ASSERT_EQ(ks.size(), op.kernels.size()) << n.name();
            for (size_t i = 0; i < ks.size(); ++i) {
              const Kernel& k = all.kernels[op.kernels[i]];
              EXPECT_EQ(ks[i].at("name"), k.key.name);
              EXPECT_EQ(ks[i].at("shape").get<std::vector<int64_t>>(), k.key.shape);
              EXPECT_EQ(ks[i].at("flops").get<double>(), k.flops);
              EXPECT_EQ(ks[i].at("bytes").get<double>(), k.bytes);
            }
          }
          break;
        case OpKind::kCollective:
          if (op.collective == CollectiveKind::kRingExchange) {
            EXPECT_EQ(n.type(), pb::COMM_SEND_NODE);
            ASSERT_NE(attr(n, "traintwin.ring_exchange"), nullptr) << n.name();
            const nlohmann::json& members =
                groups.at(attr(n, "traintwin.ring_exchange")->string_val());
            EXPECT_EQ(members.size(), all.layout.group(GroupKind::kCp, r).size());
            ++ring_sends;
          } else {
            EXPECT_EQ(n.type(), pb::COMM_COLL_NODE);
            // Each rank's input: an all-gather's output over its group, the rest whole.
            const auto group_size = static_cast<int64_t>(all.layout.group(op.group, r).size());
            if (op.collective == CollectiveKind::kAllGather) {
              EXPECT_EQ(attr(n, "comm_size")->int64_val() * group_size, op.bytes) << n.name();
              EXPECT_EQ(op.bytes % group_size, 0) << n.name();
              ++all_gathers;
            } else {
              EXPECT_EQ(attr(n, "comm_size")->int64_val(), op.bytes) << n.name();
            }
            // ASTRA-sim reads pg_name "0" as the group of all ranks: never a subgroup's id.
            EXPECT_NE(attr(n, "pg_name")->string_val(), "0") << n.name();
            const nlohmann::json& members = groups.at(attr(n, "pg_name")->string_val());
            EXPECT_EQ(members.size(), all.layout.group(op.group, r).size());
            EXPECT_NE(std::find(members.begin(), members.end(), r), members.end());
          }
          break;
        case OpKind::kSend:
          EXPECT_EQ(n.type(), pb::COMM_SEND_NODE);
          break;
        case OpKind::kRecv:
          EXPECT_EQ(n.type(), pb::COMM_RECV_NODE);
          break;
      }
    }
    // Every send and recv (the ring exchanges' included) by (src, dst, tag).
    for (const pb::Node& n : et.nodes) {
      if (n.type() != pb::COMM_SEND_NODE && n.type() != pb::COMM_RECV_NODE) continue;
      const auto key =
          std::make_tuple(attr(n, "comm_src")->int32_val(), attr(n, "comm_dst")->int32_val(),
                          attr(n, "comm_tag")->int32_val());
      auto& table = n.type() == pb::COMM_SEND_NODE ? sends : recvs;
      EXPECT_TRUE(table.emplace(key, attr(n, "comm_size")->int64_val()).second) << n.name();
    }
    EXPECT_EQ(op_nodes, rp.ops.size());
  }
  EXPECT_GT(ring_sends, 0);   // CP 2's KV ring
  EXPECT_GT(all_gathers, 0);  // sequence parallelism's
  EXPECT_FALSE(sends.empty());
  EXPECT_EQ(sends, recvs);  // every send meets its recv: same peers, tag and size
  fs::remove_all(dir);
}

}  // namespace
}  // namespace traintwin
