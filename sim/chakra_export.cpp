// Chakra execution traces out of a Program (sim/chakra_export.hpp).
#include "sim/chakra_export.hpp"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/posix_file.hpp"
#include "sim/chakra_et_file.hpp"
#include "traces/chakra/et_def.pb.h"

namespace traintwin {
namespace {

namespace pb = ChakraProtoMsg;

/// Tags of the sends/recvs a ring exchange becomes: above every pipeline tag.
constexpr int64_t kRingExchangeTagBase = int64_t{1} << 30;

void add_attr(pb::Node& n, const char* name, int64_t v) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_int64_val(v);
}

void add_attr_u64(pb::Node& n, const char* name, uint64_t v) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_uint64_val(v);
}

void add_attr_i32(pb::Node& n, const char* name, int64_t v) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    throw InvalidArgument(fmt::format("chakra: {} = {} does not fit Chakra's int32", name, v));
  }
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_int32_val(static_cast<int32_t>(v));
}

void add_attr(pb::Node& n, const char* name, bool v) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_bool_val(v);
}

void add_attr(pb::Node& n, const char* name, const std::string& v) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_string_val(v);
}

/// Writes `msg` preceded by its length as a varint (Chakra's protolib encodeMessage).
void write_delimited(const google::protobuf::Message& msg, std::ostream& out) {
  google::protobuf::io::OstreamOutputStream raw(&out);
  google::protobuf::io::CodedOutputStream coded(&raw);
  coded.WriteVarint32(static_cast<uint32_t>(msg.ByteSizeLong()));
  msg.SerializeWithCachedSizes(&coded);
  if (coded.HadError()) throw Error("chakra: writing a message failed");
}

/// The group's pg id: kind x world + lowest member + 1 (the same on every member). Never 0:
/// ASTRA-sim reserves pg_name "0" for the group of all ranks (before its commit 8817510, a
/// CommunicatorGroup with id 0 fails an assertion; since, "0" is read as the world group).
int64_t group_id(GroupKind kind, const std::vector<int64_t>& members, int64_t world) {
  return static_cast<int64_t>(kind) * world + *std::min_element(members.begin(), members.end()) +
         1;
}

}  // namespace

std::string chakra_kernels_json(const Program& prog, const Op& op) {
  nlohmann::json list = nlohmann::json::array();
  for (uint32_t k : op.kernels) {
    const Kernel& kernel = prog.kernels[k];
    list.push_back({{"name", kernel.key.name},
                    {"shape", kernel.key.shape},
                    {"dtype", to_string(kernel.key.dtype)},
                    {"tp", kernel.key.tp},
                    {"flops", kernel.flops},
                    {"bytes", kernel.bytes}});
  }
  return list.dump();
}

int64_t write_chakra_rank(const TimedProgram& timed, int64_t rank, int64_t program_rank,
                          std::ostream& out, ChakraCommGroups& groups,
                          const ChakraWriteOptions& options) {
  return write_chakra_rank(
      timed.program(), rank, program_rank,
      [&](uint32_t op) { return timed.compute_s(rank, program_rank, op); }, out, groups, options);
}

int64_t write_chakra_rank(const Program& prog, int64_t rank, int64_t program_rank,
                          const std::function<double(uint32_t op)>& compute_s, std::ostream& out,
                          ChakraCommGroups& groups, const ChakraWriteOptions& options) {
  const int64_t world = prog.layout.world_size();
  if (rank < 0 || rank >= world) {
    throw InvalidArgument(fmt::format("chakra: rank {} outside the world of {}", rank, world));
  }
  const auto it = prog.ranks.find(program_rank);
  if (it == prog.ranks.end()) {
    throw InvalidArgument(fmt::format("chakra: no RankProgram for rank {}", program_rank));
  }
  const RankProgram& rp = it->second;
  pb::GlobalMetadata meta;
  meta.set_version(kChakraEtVersion);
  pb::AttributeProto* origin = meta.add_attr();
  origin->set_name("traintwin.scenario");
  origin->set_string_val(prog.scenario.name);
  pb::AttributeProto* all_gather = meta.add_attr();
  all_gather->set_name(kChakraAllGatherSizeAttr);
  all_gather->set_string_val(std::string(to_string(options.all_gather_size)));
  // The rank layout, so that a reader can give each process group its kind
  // (sim/chakra_import.hpp).
  const ParallelConfig& par = prog.scenario.parallel;
  const auto meta_attr = [&](const char* name, int64_t v) {
    pb::AttributeProto* a = meta.add_attr();
    a->set_name(name);
    a->set_int64_val(v);
  };
  meta_attr("traintwin.world_size", world);
  pb::AttributeProto* order = meta.add_attr();
  order->set_name("traintwin.rank_order");
  order->set_string_val(prog.layout.order());
  meta_attr("traintwin.tensor_model_parallel_size", par.tensor_model_parallel_size);
  meta_attr("traintwin.context_parallel_size", par.context_parallel_size);
  meta_attr("traintwin.data_parallel_size", par.data_parallel_size);
  meta_attr("traintwin.pipeline_model_parallel_size", par.pipeline_model_parallel_size);
  meta_attr("traintwin.expert_model_parallel_size", par.expert_model_parallel_size);
  meta_attr("traintwin.expert_tensor_parallel_size", par.expert_tp());
  meta_attr("traintwin.num_distributed_optimizer_instances",
            prog.scenario.training.num_distributed_optimizer_instances);
  write_delimited(meta, out);

  std::array<int64_t, kNumStreams> last_on_stream;
  last_on_stream.fill(-1);
  std::map<int64_t, int64_t> ring_exchanges;  // pg id -> ring exchanges issued so far
  // The node ids an op's dependents wait for: 2 id, and 2 id + 1 for a ring exchange's recv.
  const auto ids_of = [&](uint32_t op) {
    std::vector<uint64_t> ids{2 * uint64_t{op}};
    if (rp.ops[op].kind == OpKind::kCollective &&
        rp.ops[op].collective == CollectiveKind::kRingExchange) {
      ids.push_back(2 * uint64_t{op} + 1);
    }
    return ids;
  };
  int64_t nodes = 0;
  for (const Op& op : rp.ops) {
    pb::Node n;
    n.set_id(2 * uint64_t{op.id});
    n.set_name(prog.label(op));
    for (uint32_t d : op.deps) {
      for (uint64_t id : ids_of(d)) n.add_data_deps(id);
    }
    int64_t& prev = last_on_stream[static_cast<size_t>(op.stream)];
    if (prev >= 0) {
      for (uint64_t id : ids_of(static_cast<uint32_t>(prev))) n.add_ctrl_deps(id);
    }
    prev = op.id;
    add_attr(n, "is_cpu_op", false);
    add_attr(n, "traintwin.phase", std::string(to_string(op.phase)));
    add_attr(n, "traintwin.stream", std::string(to_string(op.stream)));
    add_attr(n, "traintwin.micro_batch", int64_t{op.micro_batch});
    add_attr(n, "traintwin.layer", int64_t{op.layer});
    switch (op.kind) {
      case OpKind::kHost:
        throw UnsupportedError("chakra export: " + prog.label(op) +
                               " is a host op of CPU offload, which the Chakra execution trace "
                               "export does not write yet (training.optimizer_cpu_offload and "
                               "training.cpu_offloading: false to export)");
      case OpKind::kCompute: {
        n.set_type(pb::COMP_NODE);
        const double us = compute_s(op.id) * 1e6;
        n.set_duration_micros(static_cast<uint64_t>(std::llround(us)));
        double flops = 0, bytes = 0;
        for (uint32_t k : op.kernels) {
          flops += prog.kernels[k].flops;
          bytes += prog.kernels[k].bytes;
        }
        add_attr(n, "num_ops", static_cast<int64_t>(std::llround(flops)));
        add_attr_u64(n, "tensor_size", static_cast<uint64_t>(std::llround(bytes)));
        if (!op.kernels.empty()) add_attr(n, kChakraKernelsAttr, chakra_kernels_json(prog, op));
        break;
      }
      case OpKind::kSend:
      case OpKind::kRecv: {
        const bool send = op.kind == OpKind::kSend;
        n.set_type(send ? pb::COMM_SEND_NODE : pb::COMM_RECV_NODE);
        add_attr_i32(n, "comm_src", send ? rank : op.peer);
        add_attr_i32(n, "comm_dst", send ? op.peer : rank);
        add_attr_i32(n, "comm_tag", op.tag);
        add_attr(n, "comm_size", op.bytes);
        break;
      }
      case OpKind::kCollective: {
        std::vector<int64_t> members = prog.layout.group(op.group, rank);
        const int64_t pg = group_id(op.group, members, world);
        std::vector<int64_t> sorted_members = members;
        std::sort(sorted_members.begin(), sorted_members.end());
        groups.emplace(pg, std::move(sorted_members));
        if (op.collective == CollectiveKind::kRingExchange) {
          // Every member sends to the next member (group order, cyclically) and receives from
          // the previous one; the k-th ring exchange of a group has tag base + k on every member.
          const auto me = std::find(members.begin(), members.end(), rank) - members.begin();
          const int64_t size = static_cast<int64_t>(members.size());
          const int64_t next = members[static_cast<size_t>((me + 1) % size)];
          const int64_t prev_member = members[static_cast<size_t>((me + size - 1) % size)];
          const int64_t tag = kRingExchangeTagBase + ring_exchanges[pg]++;
          // Both halves name the exchange's process group, so that the import rebuilds the
          // one ring exchange (sim/chakra_import.hpp); other readers see a send and a recv.
          add_attr(n, "traintwin.ring_exchange", std::to_string(pg));
          pb::Node recv = n;
          n.set_type(pb::COMM_SEND_NODE);
          add_attr_i32(n, "comm_src", rank);
          add_attr_i32(n, "comm_dst", next);
          add_attr_i32(n, "comm_tag", tag);
          add_attr(n, "comm_size", op.bytes);
          recv.set_id(2 * uint64_t{op.id} + 1);
          recv.set_type(pb::COMM_RECV_NODE);
          add_attr_i32(recv, "comm_src", prev_member);
          add_attr_i32(recv, "comm_dst", rank);
          add_attr_i32(recv, "comm_tag", tag);
          add_attr(recv, "comm_size", op.bytes);
          write_delimited(n, out);
          write_delimited(recv, out);
          nodes += 2;
          continue;
        }
        n.set_type(pb::COMM_COLL_NODE);
        add_attr(n, "comm_type", static_cast<int64_t>(chakra::comm_type(op.collective)));
        add_attr(n, "comm_size",
                 op.collective == CollectiveKind::kAllGather
                     ? chakra_all_gather_comm_size(options.all_gather_size, op.bytes,
                                                   static_cast<int64_t>(members.size()))
                     : op.bytes);
        add_attr(n, "pg_name", std::to_string(pg));
        break;
      }
    }
    write_delimited(n, out);
    ++nodes;
  }
  out.flush();
  if (!out) throw Error(fmt::format("chakra: writing rank {} failed", rank));
  return nodes;
}

std::string chakra_comm_groups_json(const ChakraCommGroups& groups) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [id, members] : groups) j[std::to_string(id)] = members;
  return j.dump(2) + "\n";
}

namespace {
/// export_chakra with rank r timed on gpu_of(r).
template <typename GpuOf>
ChakraExport export_ranks(const Scenario& s, const CostModel& costs, GpuOf&& gpu_of,
                          const std::filesystem::path& dir, const std::vector<int64_t>& ranks,
                          const ChakraWriteOptions& options) {
  std::vector<int64_t> wanted = ranks;
  if (wanted.empty()) {
    for (int64_t r = 0; r < s.cluster.num_gpus; ++r) wanted.push_back(r);
  }
  ChakraExport out;
  ChakraCommGroups groups;
  for (int64_t r : wanted) {
    // One rank at a time: its Program, its costs, its file.
    const Program prog = build_program(s, {r});
    const TimedProgram timed(prog, costs, gpu_of(r));
    const std::filesystem::path file = dir / fmt::format("{}.{}.et", s.name, r);
    AtomicFile f(file);
    out.nodes += write_chakra_rank(timed, r, r, f.stream(), groups, options);
    f.commit();
    out.files.push_back(file);
  }
  out.comm_groups = dir / fmt::format("{}.comm_groups.json", s.name);
  AtomicFile g(out.comm_groups);
  g.write(chakra_comm_groups_json(groups));
  g.commit();
  return out;
}
}  // namespace

ChakraExport export_chakra(const Scenario& s, const CostModel& costs, const GpuSpec& gpu,
                           const std::filesystem::path& dir, const std::vector<int64_t>& ranks,
                           const ChakraWriteOptions& options) {
  return export_ranks(
      s, costs, [&gpu](int64_t) -> const GpuSpec& { return gpu; }, dir, ranks, options);
}

ChakraExport export_chakra(const Scenario& s, const CostModel& costs, const TopologySpec& topo,
                           const std::filesystem::path& dir, const std::vector<int64_t>& ranks,
                           const ChakraWriteOptions& options) {
  return export_ranks(
      s, costs,
      [&topo](int64_t r) -> const GpuSpec& { return gpu_of_node(topo, place_rank(topo, r).node); },
      dir, ranks, options);
}

}  // namespace traintwin
