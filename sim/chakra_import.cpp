// Chakra execution traces in (sim/chakra_import.hpp): the nodes of each rank's ET file (read by
// sim/chakra_et_file.hpp) as ops, the process groups as groups of a rank layout, and the replay.
#include "sim/chakra_import.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/kernel_catalogue.hpp"
#include "core/rank_layout.hpp"
#include "sim/chakra_et_file.hpp"
#include "sim/chakra_export.hpp"
#include "traces/chakra/et_def.pb.h"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
namespace pb = ChakraProtoMsg;
using namespace chakra;

/// Tags given to sends and recvs without comm_tag: above every int32 comm_tag.
constexpr int64_t kUntaggedBase = int64_t{1} << 32;

/// The attribute traintwin's export gives both halves of a ring exchange: its process group.
constexpr const char* kRingExchangeAttr = "traintwin.ring_exchange";

/// The rank layout traintwin's export writes in its GlobalMetadata, nullopt without it.
std::optional<RankLayout> metadata_layout(const fs::path& file, const pb::GlobalMetadata& meta,
                                          int64_t world, std::string& scenario_name,
                                          ParallelConfig& par, int64_t& dp_replicas) {
  std::map<std::string, const pb::AttributeProto*> attrs;
  for (const pb::AttributeProto& a : meta.attr()) attrs[a.name()] = &a;
  if (auto it = attrs.find("traintwin.scenario"); it != attrs.end()) {
    scenario_name = it->second->string_val();
  }
  if (!attrs.count("traintwin.rank_order")) return std::nullopt;
  const auto size = [&](const char* key) {
    auto it = attrs.find(std::string("traintwin.") + key);
    if (it == attrs.end() || it->second->value_case() != pb::AttributeProto::kInt64Val) {
      throw ChakraTraceError(
          fmt::format("{}: GlobalMetadata has traintwin.rank_order but no int64 traintwin.{}",
                      file.string(), key));
    }
    return it->second->int64_val();
  };
  if (size("world_size") != world) {
    throw ChakraTraceError(
        fmt::format("{}: written for {} ranks (traintwin.world_size), the trace "
                    "has {} files",
                    file.string(), size("world_size"), world));
  }
  par.rank_order = attrs.at("traintwin.rank_order")->string_val();
  par.tensor_model_parallel_size = size("tensor_model_parallel_size");
  par.context_parallel_size = size("context_parallel_size");
  par.data_parallel_size = size("data_parallel_size");
  par.pipeline_model_parallel_size = size("pipeline_model_parallel_size");
  par.expert_model_parallel_size = size("expert_model_parallel_size");
  par.expert_tensor_parallel_size = size("expert_tensor_parallel_size");
  dp_replicas = size("num_distributed_optimizer_instances");
  try {
    RankLayout layout(par.tensor_model_parallel_size, par.context_parallel_size,
                      par.data_parallel_size, par.pipeline_model_parallel_size, par.rank_order,
                      par.expert_model_parallel_size, par.expert_tp(), dp_replicas);
    if (layout.world_size() != world) {
      throw InvalidArgument(fmt::format("TP x CP x DP x PP = {}", layout.world_size()));
    }
    return layout;
  } catch (const InvalidArgument& e) {
    throw ChakraTraceError(
        fmt::format("{}: the rank layout of its GlobalMetadata is not one of {} "
                    "ranks: {}",
                    file.string(), world, e.what()));
  }
}

/// The all-gather convention file `file`'s GlobalMetadata names (kChakraAllGatherSizeAttr),
/// nullopt without one; refuses a value other than "input" and "output".
std::optional<ChakraAllGatherSize> metadata_all_gather_size(const fs::path& file,
                                                            const pb::GlobalMetadata& meta) {
  for (const pb::AttributeProto& a : meta.attr()) {
    if (a.name() != kChakraAllGatherSizeAttr) continue;
    const std::optional<ChakraAllGatherSize> c = parse_chakra_all_gather_size(a.string_val());
    if (!c) {
      throw ChakraTraceError(fmt::format(
          "{}: GlobalMetadata {} is \"{}\" (allowed: input, output)", file.string(),
          kChakraAllGatherSizeAttr, a.string_val()));
    }
    return c;
  }
  return std::nullopt;
}

/// A process group the collectives of the trace use, and where it was first met.
struct ProcessGroup {
  std::vector<int64_t> members;  // ascending
  std::string first_use;         // "<file>: node ..." for messages
  GroupKind kind = GroupKind::kWorld;
};

/// What one rank's file holds besides its RankProgram: the process group of each collective op.
struct ReadRank {
  RankProgram rp;
  std::vector<int32_t> pg_of_op;  // index into the process groups; -1 for other ops
  std::vector<bool> has_stream;   // the op's stream came from traintwin.stream
};

template <typename Enum, size_t N>
Enum enum_of(const fs::path& file, const pb::Node& n, const char* attr, const std::string& text) {
  std::string allowed;
  for (size_t i = 0; i < N; ++i) {
    const auto e = static_cast<Enum>(i);
    if (text == to_string(e)) return e;
    allowed += (allowed.empty() ? "" : ", ") + std::string(to_string(e));
  }
  refuse(file, n, fmt::format("{} \"{}\" (allowed: {})", attr, text, allowed));
}

/// What the compute nodes gave over all files: their number, and with
/// ChakraReadOptions::kernels the kernels read from traintwin.kernels.
struct ComputeNodes {
  bool read_kernels = false;
  int64_t count = 0;                      // compute nodes (COMP_NODE and host ops)
  int64_t with_kernels = 0;               // of which run traintwin kernels
  std::map<std::string, uint32_t> index;  // a kernel's JSON text -> index in the kernels
};

/// The kernels `text` (a traintwin.kernels list) names, or nullopt when one of them is no
/// kernel of traintwin's catalogue (core/kernel_catalogue.hpp). Refuses text that is no such
/// list.
std::optional<std::vector<Kernel>> kernels_of(const fs::path& file, const pb::Node& n,
                                              const std::string& text) {
  const auto bad = [&](const std::string& why) {
    refuse(file, n,
           fmt::format("{} is not a list of {{\"name\", \"shape\", \"dtype\", \"tp\", "
                       "\"flops\", \"bytes\"}}: {}",
                       kChakraKernelsAttr, why));
  };
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad(e.what());
  }
  if (!list.is_array() || list.empty()) bad("not a non-empty list");
  std::vector<Kernel> out;
  for (const nlohmann::json& j : list) {
    if (!j.is_object()) bad("an item is no object");
    for (const char* key : {"name", "shape", "dtype", "tp", "flops", "bytes"}) {
      if (!j.contains(key)) bad(fmt::format("an item has no \"{}\"", key));
    }
    try {
      Kernel k;
      k.key.name = j.at("name").get<std::string>();
      if (!find_kernel(k.key.name)) return std::nullopt;
      k.key.shape = j.at("shape").get<std::vector<int64_t>>();
      const std::string dtype = j.at("dtype").get<std::string>();
      const std::optional<Precision> p = precision_from_string(dtype);
      if (!p) bad(fmt::format("dtype \"{}\" is no precision", dtype));
      k.key.dtype = *p;
      k.key.tp = j.at("tp").get<int64_t>();
      k.flops = j.at("flops").get<double>();
      k.bytes = j.at("bytes").get<double>();
      out.push_back(std::move(k));
    } catch (const nlohmann::json::exception& e) {
      bad(e.what());
    }
  }
  return out;
}

/// The per-rank reader: nodes -> ops in a topological order, with their dependencies.
class RankReader {
 public:
  RankReader(const fs::path& file, int64_t rank, int64_t world,
             const std::optional<std::map<std::string, std::vector<int64_t>>>& comm_groups,
             const fs::path& comm_groups_file, std::vector<ProcessGroup>& pgs,
             std::map<std::string, int32_t>& pg_index, std::deque<std::string>& names,
             std::vector<Kernel>& kernels,
             std::map<std::tuple<int64_t, int64_t, int64_t>, uint32_t>& kernel_index,
             std::map<std::tuple<int64_t, int64_t, bool>, int64_t>& untagged,
             ChakraAllGatherSize all_gather_size)
      : file_(file),
        rank_(rank),
        world_(world),
        comm_groups_(comm_groups),
        comm_groups_file_(comm_groups_file),
        pgs_(pgs),
        pg_index_(pg_index),
        names_(names),
        kernels_(kernels),
        kernel_index_(kernel_index),
        untagged_(untagged),
        all_gather_size_(all_gather_size) {}

  /// Compute nodes are counted in `c` (and read as their kernels when c.read_kernels).
  void count_compute_nodes(ComputeNodes& c) { compute_nodes_ = &c; }

  ReadRank read(const std::vector<pb::Node>& file_nodes) {
    std::vector<pb::Node> merged;
    const std::vector<pb::Node>& nodes =
        merge_ring_exchanges(file_nodes, merged) ? merged : file_nodes;
    const std::vector<uint32_t> order = topological_order(nodes);
    ReadRank out;
    out.rp.rank = rank_;
    out.rp.ops.resize(nodes.size());
    out.pg_of_op.assign(nodes.size(), -1);
    out.has_stream.assign(nodes.size(), false);
    std::vector<uint32_t> op_of_node(nodes.size());
    for (uint32_t i = 0; i < order.size(); ++i) op_of_node[order[i]] = i;
    // Untagged sends and recvs are numbered in file order (the order the rank posted them).
    std::vector<int64_t> untagged_tag(nodes.size(), -1);
    for (uint32_t k = 0; k < nodes.size(); ++k) untagged_tag[k] = untagged_number(nodes[k]);
    // One GPU compute node at a time and one CPU node at a time, in this order.
    std::array<int64_t, 2> last_on{-1, -1};  // GPU compute, CPU
    for (uint32_t i = 0; i < order.size(); ++i) {
      const pb::Node& n = nodes[order[i]];
      Op& op = out.rp.ops[i];
      op.id = i;
      for (uint32_t d : deps_[order[i]]) op.deps.push_back(op_of_node[d]);
      const bool cpu = is_cpu_op(n);
      if (cpu || n.type() == pb::COMP_NODE) {
        int64_t& last = last_on[cpu ? 1 : 0];
        if (last >= 0) op.deps.push_back(static_cast<uint32_t>(last));
        last = i;
      }
      std::sort(op.deps.begin(), op.deps.end());
      op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
      if (op.deps.size() >= UINT16_MAX) refuse(file_, n, "has too many dependencies");
      names_.push_back(n.name());
      op.what = names_.back().c_str();
      out.has_stream[i] = convert(n, op, out.pg_of_op[i], untagged_tag[order[i]]);
    }
    return out;
  }

 private:
  /// Pairs the send and the recv traintwin's export wrote for one ring exchange (both with the
  /// string attribute traintwin.ring_exchange = its process group, and the same comm_tag) into
  /// one node: the first of the two in the file, waiting for the data_deps of both; dependencies
  /// on the other one point to it. Returns false, leaving `out` empty, when the file has no
  /// such node. Refuses a node with the attribute that is no send or recv, a half without its
  /// other half, a half met twice, halves of different comm_size.
  bool merge_ring_exchanges(const std::vector<pb::Node>& nodes, std::vector<pb::Node>& out) {
    // (process group, comm_tag) -> node index of the send, of the recv
    std::map<std::pair<std::string, int64_t>, std::array<int64_t, 2>> halves;
    for (uint32_t k = 0; k < nodes.size(); ++k) {
      const pb::Node& n = nodes[k];
      const std::optional<std::string> pg = string_attr(file_, n, kRingExchangeAttr);
      if (!pg) continue;
      if (n.type() != pb::COMM_SEND_NODE && n.type() != pb::COMM_RECV_NODE) {
        refuse(file_, n,
               fmt::format("has {} but is a {} (allowed: COMM_SEND_NODE, COMM_RECV_NODE)",
                           kRingExchangeAttr,
                           pb::NodeType_IsValid(n.type()) ? pb::NodeType_Name(n.type())
                                                          : std::to_string(n.type())));
      }
      const int64_t tag = required_int_attr(file_, n, "comm_tag");
      const size_t side = n.type() == pb::COMM_SEND_NODE ? 0 : 1;
      auto& h = halves.try_emplace({*pg, tag}, std::array<int64_t, 2>{-1, -1}).first->second;
      if (h[side] >= 0) {
        refuse(file_, n,
               fmt::format("is a second ring exchange {} of {} \"{}\" with comm_tag {} (the "
                           "first: {})",
                           side == 0 ? "send" : "recv", kRingExchangeAttr, *pg, tag,
                           node_ref(nodes[static_cast<size_t>(h[side])])));
      }
      h[side] = k;
    }
    if (halves.empty()) return false;
    std::unordered_map<uint64_t, uint64_t> alias;    // id of the half dropped -> id of the kept
    std::vector<int64_t> partner(nodes.size(), -1);  // kept half -> the dropped one
    std::vector<bool> dropped(nodes.size(), false);
    for (const auto& [key, h] : halves) {
      for (size_t side = 0; side < 2; ++side) {
        if (h[1 - side] < 0) {
          refuse(file_, nodes[static_cast<size_t>(h[side])],
                 fmt::format("is a ring exchange {} ({} \"{}\", comm_tag {}) without its {}",
                             side == 0 ? "send" : "recv", kRingExchangeAttr, key.first, key.second,
                             side == 0 ? "recv" : "send"));
        }
      }
      const auto keep = static_cast<size_t>(std::min(h[0], h[1]));
      const auto drop = static_cast<size_t>(std::max(h[0], h[1]));
      const int64_t keep_bytes = required_int_attr(file_, nodes[keep], "comm_size");
      const int64_t drop_bytes = required_int_attr(file_, nodes[drop], "comm_size");
      if (keep_bytes != drop_bytes) {
        refuse(file_, nodes[drop],
               fmt::format("comm_size {} differs from its ring exchange partner {} ({})",
                           drop_bytes, node_ref(nodes[keep]), keep_bytes));
      }
      partner[keep] = static_cast<int64_t>(drop);
      dropped[drop] = true;
      alias[nodes[drop].id()] = nodes[keep].id();
    }
    out.reserve(nodes.size() - halves.size());
    for (uint32_t k = 0; k < nodes.size(); ++k) {
      if (dropped[k]) continue;
      pb::Node n = nodes[k];
      if (partner[k] >= 0) {
        for (uint64_t d : nodes[static_cast<size_t>(partner[k])].data_deps()) n.add_data_deps(d);
      }
      std::vector<uint64_t> deps(n.data_deps().begin(), n.data_deps().end());
      n.clear_data_deps();
      for (uint64_t d : deps) {
        if (auto it = alias.find(d); it != alias.end()) d = it->second;
        // A half that waited for its partner waits for nothing within the exchange.
        if (d != n.id()) n.add_data_deps(d);
      }
      out.push_back(std::move(n));
    }
    return true;
  }

  /// The nodes' dependencies (indices into `nodes`: their data_deps, without repeats) and a
  /// topological order that keeps the file's order wherever it can (Kahn's algorithm, smallest
  /// file position first). Throws for a repeated id, a dependency on a node the file lacks, a
  /// cycle.
  std::vector<uint32_t> topological_order(const std::vector<pb::Node>& nodes) {
    std::unordered_map<uint64_t, uint32_t> index;
    index.reserve(nodes.size());
    for (uint32_t k = 0; k < nodes.size(); ++k) {
      if (!index.emplace(nodes[k].id(), k).second) {
        refuse(file_, nodes[k], "its id is used by another node of the file");
      }
    }
    deps_.assign(nodes.size(), {});
    std::vector<std::vector<uint32_t>> succ(nodes.size());
    std::vector<uint32_t> waiting(nodes.size(), 0);
    for (uint32_t k = 0; k < nodes.size(); ++k) {
      const pb::Node& n = nodes[k];
      std::vector<uint32_t>& d = deps_[k];
      for (uint64_t id : n.data_deps()) {
        auto it = index.find(id);
        if (it == index.end()) {
          refuse(file_, n,
                 fmt::format("depends on node {} (data_deps), which the file does not hold", id));
        }
        d.push_back(it->second);
      }
      std::sort(d.begin(), d.end());
      d.erase(std::unique(d.begin(), d.end()), d.end());
      waiting[k] = static_cast<uint32_t>(d.size());
      for (uint32_t p : d) succ[p].push_back(k);
    }
    std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> ready;
    for (uint32_t k = 0; k < nodes.size(); ++k) {
      if (waiting[k] == 0) ready.push(k);
    }
    std::vector<uint32_t> order;
    order.reserve(nodes.size());
    while (!ready.empty()) {
      const uint32_t k = ready.top();
      ready.pop();
      order.push_back(k);
      for (uint32_t s : succ[k]) {
        if (--waiting[s] == 0) ready.push(s);
      }
    }
    if (order.size() < nodes.size()) refuse_cycle(nodes, waiting);
    return order;
  }

  /// Throws naming a cycle among the nodes Kahn's algorithm left (waiting > 0).
  [[noreturn]] void refuse_cycle(const std::vector<pb::Node>& nodes,
                                 const std::vector<uint32_t>& waiting) {
    // From any node left, follow a dependency that is left too: the walk meets a cycle.
    uint32_t k = 0;
    while (waiting[k] == 0) ++k;
    std::vector<uint32_t> path;
    std::vector<int64_t> at(nodes.size(), -1);
    while (at[k] < 0) {
      at[k] = static_cast<int64_t>(path.size());
      path.push_back(k);
      for (uint32_t d : deps_[k]) {
        if (waiting[d] > 0) {
          k = d;
          break;
        }
      }
    }
    std::string cycle;
    for (size_t i = static_cast<size_t>(at[k]); i < path.size(); ++i) {
      cycle += node_ref(nodes[path[i]]) + " <- ";
    }
    cycle += node_ref(nodes[k]);
    refuse(file_, nodes[k], "is on a dependency cycle: " + cycle);
  }

  /// The number of an untagged send or recv among the untagged ones between its two ranks, -1
  /// for every other node.
  int64_t untagged_number(const pb::Node& n) {
    const bool send = n.type() == pb::COMM_SEND_NODE;
    if ((!send && n.type() != pb::COMM_RECV_NODE) || find_attr(n, "comm_tag")) return -1;
    const int64_t src = send ? rank_ : int_attr(file_, n, "comm_src").value_or(-1);
    const int64_t dst = send ? int_attr(file_, n, "comm_dst").value_or(-1) : rank_;
    return untagged_[{src, dst, send}]++;
  }

  /// Whether `n` is a host (CPU) op: is_cpu_op true.
  bool is_cpu_op(const pb::Node& n) const {
    const pb::AttributeProto* a = find_attr(n, "is_cpu_op");
    if (!a) return false;
    if (a->value_case() != pb::AttributeProto::kBoolVal) {
      refuse(file_, n, "attribute is_cpu_op is not a bool");
    }
    return a->bool_val();
  }

  /// Fills `op` from node `n`; returns whether traintwin.stream gave its stream.
  bool convert(const pb::Node& n, Op& op, int32_t& pg, int64_t untagged_tag) {
    const bool memory = n.type() == pb::MEM_LOAD_NODE || n.type() == pb::MEM_STORE_NODE;
    switch (is_cpu_op(n) && !memory ? pb::COMP_NODE : n.type()) {
      case pb::COMP_NODE:
        compute(n, op);
        break;
      case pb::METADATA_NODE:
        op.kind = OpKind::kCompute;
        break;
      case pb::COMM_COLL_NODE:
        pg = collective(n, op);
        break;
      case pb::COMM_SEND_NODE:
      case pb::COMM_RECV_NODE:
        if (auto ring = string_attr(file_, n, kRingExchangeAttr)) {
          pg = ring_exchange(n, op, *ring);
        } else {
          p2p(n, op, untagged_tag);
        }
        break;
      default:
        refuse(file_, n,
               fmt::format("node type {} is not replayed (allowed: COMP_NODE, METADATA_NODE, "
                           "COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE)",
                           pb::NodeType_IsValid(n.type()) ? pb::NodeType_Name(n.type())
                                                          : std::to_string(n.type())));
    }
    if (auto phase = string_attr(file_, n, "traintwin.phase")) {
      op.phase = enum_of<Phase, static_cast<size_t>(Phase::kWeightGrad) + 1>(
          file_, n, "traintwin.phase", *phase);
    }
    if (auto mb = int_attr(file_, n, "traintwin.micro_batch")) {
      op.micro_batch = static_cast<int32_t>(*mb);
    }
    if (auto layer = int_attr(file_, n, "traintwin.layer")) op.layer = static_cast<int32_t>(*layer);
    if (auto stream = string_attr(file_, n, "traintwin.stream")) {
      op.stream = enum_of<Stream, kNumStreams>(file_, n, "traintwin.stream", *stream);
      return true;
    }
    return false;
  }

  void compute(const pb::Node& n, Op& op) {
    op.kind = OpKind::kCompute;
    op.stream = Stream::kCompute;
    if (n.duration_micros() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      refuse(file_, n, fmt::format("duration_micros {} is too large", n.duration_micros()));
    }
    if (compute_nodes_) {
      ++compute_nodes_->count;
      if (compute_nodes_->read_kernels && traintwin_kernels(n, op)) return;
    }
    const auto us = static_cast<int64_t>(n.duration_micros());
    const int64_t flops = int_attr(file_, n, "num_ops").value_or(0);
    const int64_t bytes = int_attr(file_, n, "tensor_size").value_or(0);
    auto [it, fresh] =
        kernel_index_.try_emplace({us, flops, bytes}, static_cast<uint32_t>(kernels_.size()));
    if (fresh) {
      Kernel k;
      k.key.name = kChakraComputeKernel;
      k.key.shape = {us};
      k.flops = static_cast<double>(flops);
      k.bytes = static_cast<double>(bytes);
      kernels_.push_back(std::move(k));
    }
    op.kernels = {it->second};
    op.kernel_roles = {Role::kNone};
  }

  /// Gives `op` the kernels the node's traintwin.kernels lists, when it has the attribute and
  /// every kernel is one of traintwin's; returns whether it did.
  bool traintwin_kernels(const pb::Node& n, Op& op) {
    const std::optional<std::string> text = string_attr(file_, n, kChakraKernelsAttr);
    if (!text) return false;
    std::optional<std::vector<Kernel>> ks = kernels_of(file_, n, *text);
    if (!ks) return false;
    op.kernels.clear();
    for (Kernel& k : *ks) {
      const std::string id = fmt::format("{} {} {}", k.key.to_string(), k.flops, k.bytes);
      auto [it, fresh] =
          compute_nodes_->index.try_emplace(id, static_cast<uint32_t>(kernels_.size()));
      if (fresh) kernels_.push_back(std::move(k));
      op.kernels.push_back(it->second);
    }
    op.kernel_roles.assign(op.kernels.size(), Role::kNone);
    ++compute_nodes_->with_kernels;
    return true;
  }

  /// Returns the index of the collective's process group.
  int32_t collective(const pb::Node& n, Op& op) {
    op.kind = OpKind::kCollective;
    const int64_t type = required_int_attr(file_, n, "comm_type");
    const std::optional<CollectiveKind> kind = collective_of(type);
    if (!kind) {
      refuse(file_, n,
             fmt::format("collective comm_type {} is not replayed (allowed: {})",
                         type >= 0 && type <= INT_MAX &&
                                 pb::CollectiveCommType_IsValid(static_cast<int>(type))
                             ? pb::CollectiveCommType_Name(static_cast<pb::CollectiveCommType>(type))
                             : std::to_string(type),
                         replayed_comm_types()));
    }
    op.collective = *kind;
    op.bytes = required_int_attr(file_, n, "comm_size");
    if (op.bytes < 0) refuse(file_, n, fmt::format("comm_size {} < 0", op.bytes));
    const int32_t pg = process_group(n, string_attr(file_, n, "pg_name").value_or(""), "pg_name");
    if (op.collective == CollectiveKind::kAllGather) {
      const auto members = static_cast<int64_t>(pgs_[static_cast<size_t>(pg)].members.size());
      try {
        op.bytes = program_all_gather_bytes(all_gather_size_, op.bytes, members);
      } catch (const InvalidArgument& e) {
        refuse(file_, n, e.what());
      }
    }
    return pg;
  }

  /// The ring exchange merge_ring_exchanges() made of a send and a recv, over process group
  /// `pg`; returns the index of the process group.
  int32_t ring_exchange(const pb::Node& n, Op& op, const std::string& pg) {
    op.kind = OpKind::kCollective;
    op.collective = CollectiveKind::kRingExchange;
    op.bytes = required_int_attr(file_, n, "comm_size");
    if (op.bytes < 0) refuse(file_, n, fmt::format("comm_size {} < 0", op.bytes));
    if (pg.empty()) {
      refuse(file_, n, fmt::format("{} is empty (a process group)", kRingExchangeAttr));
    }
    return process_group(n, pg, kRingExchangeAttr);
  }

  /// The index of process group `pg` (named by attribute `key` of `n`), resolved in the comm
  /// groups the first time; "" spans every rank. Refuses a group it cannot resolve and one
  /// the file's rank is no member of.
  int32_t process_group(const pb::Node& n, const std::string& pg, const char* key) {
    auto [it, fresh] = pg_index_.try_emplace(pg, static_cast<int32_t>(pgs_.size()));
    if (fresh) {
      ProcessGroup g;
      g.first_use = fmt::format("{}: {}", file_.string(), node_ref(n));
      if (pg.empty()) {
        for (int64_t r = 0; r < world_; ++r) g.members.push_back(r);
      } else if (!comm_groups_) {
        refuse(file_, n,
               fmt::format("process group {} \"{}\" cannot be resolved: no {} "
                           "(a collective without pg_name spans every rank)",
                           key, pg, comm_groups_file_.string()));
      } else {
        auto m = comm_groups_->find(pg);
        if (m == comm_groups_->end()) {
          refuse(file_, n,
                 fmt::format("process group {} \"{}\" is not in {}", key, pg,
                             comm_groups_file_.string()));
        }
        g.members = m->second;
      }
      pgs_.push_back(std::move(g));
    }
    const std::vector<int64_t>& members = pgs_[static_cast<size_t>(it->second)].members;
    if (!std::binary_search(members.begin(), members.end(), rank_)) {
      refuse(file_, n, fmt::format("rank {} is no member of its process group \"{}\"", rank_, pg));
    }
    return it->second;
  }

  void p2p(const pb::Node& n, Op& op, int64_t untagged_tag) {
    const bool send = n.type() == pb::COMM_SEND_NODE;
    op.kind = send ? OpKind::kSend : OpKind::kRecv;
    op.stream = Stream::kPpComm;
    const char* self_key = send ? "comm_src" : "comm_dst";
    const char* peer_key = send ? "comm_dst" : "comm_src";
    if (auto self = int_attr(file_, n, self_key); self && *self != rank_) {
      refuse(file_, n, fmt::format("{} {} in the file of rank {}", self_key, *self, rank_));
    }
    op.peer = required_int_attr(file_, n, peer_key);
    if (op.peer < 0 || op.peer >= world_ || op.peer == rank_) {
      refuse(file_, n,
             fmt::format("{} {} (allowed: another rank in [0, {}))", peer_key, op.peer, world_));
    }
    op.bytes = required_int_attr(file_, n, "comm_size");
    if (op.bytes < 0) refuse(file_, n, fmt::format("comm_size {} < 0", op.bytes));
    op.role = Role::kPipeline;
    op.tag =
        untagged_tag >= 0 ? kUntaggedBase + untagged_tag : required_int_attr(file_, n, "comm_tag");
  }

  const fs::path& file_;
  int64_t rank_, world_;
  const std::optional<std::map<std::string, std::vector<int64_t>>>& comm_groups_;
  const fs::path& comm_groups_file_;
  std::vector<ProcessGroup>& pgs_;
  std::map<std::string, int32_t>& pg_index_;
  std::deque<std::string>& names_;
  std::vector<Kernel>& kernels_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, uint32_t>& kernel_index_;
  std::map<std::tuple<int64_t, int64_t, bool>, int64_t>& untagged_;
  ChakraAllGatherSize all_gather_size_;
  ComputeNodes* compute_nodes_ = nullptr;
  std::vector<std::vector<uint32_t>> deps_;
};

std::vector<int64_t> sorted_group(const RankLayout& layout, GroupKind g, int64_t rank) {
  std::vector<int64_t> m = layout.group(g, rank);
  std::sort(m.begin(), m.end());
  return m;
}

/// The group kinds of the dense layout searched for a process group, in order.
constexpr std::array<GroupKind, 8> kDenseKinds = {
    GroupKind::kTp,   GroupKind::kCp,      GroupKind::kDp,    GroupKind::kPp,
    GroupKind::kDpCp, GroupKind::kModelParallel, GroupKind::kTpDpCp, GroupKind::kWorld};

/// The first kind of `kinds` whose group of members[0] in `layout` is `members`.
std::optional<GroupKind> kind_of(const RankLayout& layout, const std::vector<int64_t>& members,
                                 const std::vector<GroupKind>& kinds) {
  for (GroupKind g : kinds) {
    try {
      if (sorted_group(layout, g, members[0]) == members) return g;
    } catch (const InvalidArgument&) {
      // expert groups unusable in this layout
    }
  }
  return std::nullopt;
}

std::string members_text(const std::vector<int64_t>& m) {
  std::string s;
  for (size_t i = 0; i < m.size() && i < 16; ++i) s += (i ? "," : "") + std::to_string(m[i]);
  if (m.size() > 16) s += fmt::format(",... ({} ranks)", m.size());
  return "[" + s + "]";
}

/// Gives each process group of the traintwin layout `layout` its kind: the one its pg_name
/// encodes (kind x world + lowest member + 1) when it matches, else any kind holding it.
void kinds_from_metadata(const RankLayout& layout, const std::map<std::string, int32_t>& pg_index,
                         std::vector<ProcessGroup>& pgs) {
  const int64_t world = layout.world_size();
  std::vector<GroupKind> all;
  for (size_t g = 0; g < kNumGroupKinds; ++g) all.push_back(static_cast<GroupKind>(g));
  for (const auto& [name, i] : pg_index) {
    ProcessGroup& pg = pgs[static_cast<size_t>(i)];
    std::optional<GroupKind> kind;
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos &&
        name.size() < 18) {
      const int64_t id = std::stoll(name) - 1;
      const int64_t k = id / world;
      if (id >= 0 && k < static_cast<int64_t>(kNumGroupKinds) && id % world == pg.members[0]) {
        kind = kind_of(layout, pg.members, {static_cast<GroupKind>(k)});
      }
    }
    if (!kind) kind = kind_of(layout, pg.members, all);
    if (!kind) {
      throw ChakraTraceError(fmt::format(
          "{}: process group \"{}\" {} is no group of the trace's rank layout (TP {}, CP {}, DP "
          "{}, PP {}, order {})",
          pg.first_use, name, members_text(pg.members), layout.size(GroupKind::kTp),
          layout.size(GroupKind::kCp), layout.size(GroupKind::kDp), layout.size(GroupKind::kPp),
          layout.order()));
    }
    pg.kind = *kind;
  }
}

/// The first dense layout (TP, then CP, then PP ascending, DP the rest; order tp-cp-dp-pp
/// first) in which every process group is a group of one of kDenseKinds.
RankLayout infer_layout(int64_t world, const std::map<std::string, int32_t>& pg_index,
                        std::vector<ProcessGroup>& pgs) {
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= world; ++d) {
    if (world % d == 0) divisors.push_back(d);
  }
  std::array<std::string, 4> dims = {"tp", "cp", "dp", "pp"};
  std::vector<std::string> orders;
  do {
    orders.push_back(dims[0] + "-" + dims[1] + "-" + dims[2] + "-" + dims[3]);
  } while (std::next_permutation(dims.begin(), dims.end(), [](const auto& a, const auto& b) {
    const std::string rank_of = "tp cp dp pp";
    return rank_of.find(a) < rank_of.find(b);
  }));
  const std::vector<GroupKind> kinds(kDenseKinds.begin(), kDenseKinds.end());
  for (int64_t tp : divisors) {
    for (int64_t cp : divisors) {
      if ((world / tp) % cp != 0) continue;
      for (int64_t pp : divisors) {
        if ((world / tp / cp) % pp != 0) continue;
        const int64_t dp = world / tp / cp / pp;
        for (const std::string& order : orders) {
          const RankLayout layout(tp, cp, dp, pp, order);
          std::vector<GroupKind> found;
          for (const ProcessGroup& pg : pgs) {
            const std::optional<GroupKind> k = kind_of(layout, pg.members, kinds);
            if (!k) break;
            found.push_back(*k);
          }
          if (found.size() < pgs.size()) continue;
          for (size_t i = 0; i < pgs.size(); ++i) pgs[i].kind = found[i];
          return layout;
        }
      }
    }
  }
  // Name the first process group that no layout holds on its own.
  for (const auto& [name, i] : pg_index) {
    const ProcessGroup& pg = pgs[static_cast<size_t>(i)];
    bool alone = false;
    for (int64_t tp : divisors) {
      for (int64_t cp : divisors) {
        if (alone || (world / tp) % cp != 0) continue;
        for (int64_t pp : divisors) {
          if (alone || (world / tp / cp) % pp != 0) continue;
          for (const std::string& order : orders) {
            const RankLayout layout(tp, cp, world / tp / cp / pp, pp, order);
            if (kind_of(layout, pg.members, kinds)) {
              alone = true;
              break;
            }
          }
        }
      }
    }
    if (!alone) {
      throw ChakraTraceError(fmt::format(
          "{}: process group \"{}\" {} is no TP, CP, DP, PP, DP x CP, model-parallel, TP x DP "
          "x CP or world "
          "group of any rank layout TP x CP x DP x PP of {} ranks (the replay runs collectives "
          "over such groups only)",
          pg.first_use, name, members_text(pg.members), world));
    }
  }
  throw ChakraTraceError(fmt::format(
      "{}: the process groups of the trace are not the groups of one rank layout TP x CP x DP x "
      "PP of {} ranks (each is alone, not all together; the replay runs collectives over the "
      "groups of one layout)",
      pgs.front().first_use, world));
}

Stream stream_of(GroupKind g) {
  switch (g) {
    case GroupKind::kTp:
      return Stream::kTpComm;
    case GroupKind::kCp:
      return Stream::kCpComm;
    case GroupKind::kPp:
      return Stream::kPpComm;
    case GroupKind::kEp:
    case GroupKind::kEtp:
    case GroupKind::kEtpEp:
      return Stream::kEpComm;
    default:
      return Stream::kDpComm;
  }
}

/// Costs kChakraComputeKernel {d} at d microseconds, every other kernel with `kernels` when
/// given.
class ChakraDurationCostModel : public CostModel {
 public:
  explicit ChakraDurationCostModel(const CostModel* kernels = nullptr) : kernels_(kernels) {}

  KernelCost duration(const Kernel& k, const GpuSpec& gpu) const override {
    if (kernels_ && k.key.name != kChakraComputeKernel) return kernels_->duration(k, gpu);
    if (k.key.name != kChakraComputeKernel || k.key.shape.size() != 1) {
      throw CostModelError(
          fmt::format("chakra trace durations: no duration for kernel {} on {} "
                      "(only {} {{duration_micros}} of a trace)",
                      k.key.to_string(), gpu.name, kChakraComputeKernel));
    }
    return {static_cast<double>(k.key.shape[0]) * 1e-6, CostSource::kMeasured};
  }

 private:
  const CostModel* kernels_;
};

}  // namespace

ChakraTrace read_chakra_trace(const std::filesystem::path& where,
                              const ChakraReadOptions& options) {
  auto [name, files] = find_files(where);
  const auto world = static_cast<int64_t>(files.size());
  const fs::path groups_file = files.front().parent_path() / (name + ".comm_groups.json");
  std::optional<std::map<std::string, std::vector<int64_t>>> comm_groups;
  if (fs::exists(groups_file)) comm_groups = read_comm_groups(groups_file, world);

  std::vector<ProcessGroup> pgs;
  std::map<std::string, int32_t> pg_index;
  std::map<std::tuple<int64_t, int64_t, int64_t>, uint32_t> kernel_index;
  std::map<std::tuple<int64_t, int64_t, bool>, int64_t> untagged;
  std::vector<ReadRank> ranks;
  std::optional<RankLayout> layout;
  Scenario s;
  s.name = name;
  int64_t dp_replicas = 1;
  std::deque<std::string> names;
  std::vector<Kernel> kernels;
  int64_t nodes = 0;
  ComputeNodes compute_nodes;
  compute_nodes.read_kernels = options.kernels;
  ChakraAllGatherSize all_gather_size = options.all_gather_size.value_or(ChakraAllGatherSize::kInput);
  std::string all_gather_size_source =
      options.all_gather_size ? "--all-gather-comm-size" : "ASTRA-sim's reading (default)";
  std::optional<ChakraAllGatherSize> rank0_said;
  for (int64_t r = 0; r < world; ++r) {
    const fs::path& file = files[static_cast<size_t>(r)];
    const EtFile et = read_et_file(file);
    if (r == 0) {
      layout = metadata_layout(file, et.meta, world, s.name, s.parallel, dp_replicas);
    }
    // Every file says the same or nothing (rank 0 decides, the others must agree).
    const std::optional<ChakraAllGatherSize> said = metadata_all_gather_size(file, et.meta);
    if (r == 0) {
      rank0_said = said;
      if (said && options.all_gather_size && *options.all_gather_size != *said) {
        throw ChakraTraceError(fmt::format(
            "{}: its all-gathers' comm_size counts the {} ({} in its GlobalMetadata), not the "
            "{} that --all-gather-comm-size asks for (leave the flag out for traintwin's traces)",
            file.string(), to_string(*said), kChakraAllGatherSizeAttr,
            to_string(*options.all_gather_size)));
      }
      if (said) {
        all_gather_size = *said;
        all_gather_size_source = "traintwin metadata";
      }
    } else if (said != rank0_said) {
      const auto text = [](const std::optional<ChakraAllGatherSize>& c) {
        return c ? fmt::format("\"{}\"", to_string(*c)) : std::string("absent");
      };
      throw ChakraTraceError(fmt::format("{}: GlobalMetadata {} is {}, in rank 0's file {}",
                                         file.string(), kChakraAllGatherSizeAttr, text(said),
                                         text(rank0_said)));
    }
    RankReader reader(file, r, world, comm_groups, groups_file, pgs, pg_index, names, kernels,
                      kernel_index, untagged, all_gather_size);
    reader.count_compute_nodes(compute_nodes);
    ranks.push_back(reader.read(et.nodes));
    nodes += static_cast<int64_t>(et.nodes.size());
  }

  std::string layout_source;
  if (layout) {
    kinds_from_metadata(*layout, pg_index, pgs);
    layout_source = "traintwin metadata";
  } else {
    layout = infer_layout(world, pg_index, pgs);
    layout_source = "inferred from the process groups";
    ParallelConfig& p = s.parallel;
    p.tensor_model_parallel_size = layout->size(GroupKind::kTp);
    p.context_parallel_size = layout->size(GroupKind::kCp);
    p.data_parallel_size = layout->size(GroupKind::kDp);
    p.pipeline_model_parallel_size = layout->size(GroupKind::kPp);
    p.rank_order = layout->order();
  }
  s.training.num_distributed_optimizer_instances = dp_replicas;
  s.cluster.num_gpus = world;
  ChakraTrace t(Program{std::move(s), *layout, std::move(kernels), {}});
  t.name = name;
  t.files = std::move(files);
  if (comm_groups) t.comm_groups = groups_file;
  t.layout_source = layout_source;
  t.all_gather_size = all_gather_size;
  t.all_gather_size_source = all_gather_size_source;
  t.nodes = nodes;
  t.compute_nodes = compute_nodes.count;
  t.kernel_nodes = compute_nodes.with_kernels;
  t.names = std::move(names);  // the ops point into its strings, which a move keeps in place
  for (ReadRank& rr : ranks) {
    rr.rp.coord = layout->coord(rr.rp.rank);
    for (Op& op : rr.rp.ops) {
      const int32_t pg = rr.pg_of_op[op.id];
      if (pg < 0) continue;
      op.group = pgs[static_cast<size_t>(pg)].kind;
      if (!rr.has_stream[op.id]) op.stream = stream_of(op.group);
    }
    t.program.ranks.emplace(rr.rp.rank, std::move(rr.rp));
  }
  return t;
}

std::unique_ptr<CostModel> chakra_duration_cost_model() {
  return std::make_unique<ChakraDurationCostModel>();
}

SimulationResult simulate_chakra_trace(const ChakraTrace& trace, const TopologySpec& topo,
                                       SimulationOptions opts, const CostModel* kernel_costs) {
  check_cluster_size(topo, trace.program.layout.world_size());
  opts.exact_reductions = false;
  opts.aggregate_tp = false;
  const ChakraDurationCostModel costs(kernel_costs);
  return simulate_program(trace.program, topo, costs, opts);
}

}  // namespace traintwin
