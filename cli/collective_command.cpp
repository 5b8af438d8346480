#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "sim/collective_bench.hpp"
#include "sim/isolated.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {
namespace {

CollectiveKind parse_op(const std::string& op) {
  if (op == "all_reduce") return CollectiveKind::kAllReduce;
  if (op == "all_gather") return CollectiveKind::kAllGather;
  if (op == "reduce_scatter") return CollectiveKind::kReduceScatter;
  if (op == "broadcast") return CollectiveKind::kBroadcast;
  throw ConfigError("--op: '" + op + "' unknown (allowed: all_reduce, all_gather, reduce_scatter, broadcast)");
}

/// The largest message size a sweep may reach: 1 TiB (nccl-tests' own sizes end far below).
constexpr int64_t kMaxCollectiveBytes = int64_t{1} << 40;

/// A message size of nccl-tests -b/-e: a positive integer with an optional K, M or G
/// (2^10 steps), at most 1 TiB. Throws ConfigError naming the flag and the allowed form.
int64_t parse_size(const std::string& flag, const std::string& text) {
  const auto invalid = [&](const std::string& why) {
    return ConfigError(flag + " '" + text + "': " + why +
                       " (allowed: an integer number of bytes from 1 to 1T, with an optional "
                       "unit K, M or G as nccl-tests -b/-e, e.g. 8, 64K, 8G)");
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) throw invalid("not a size");
  const std::string unit = text.substr(digits);
  int shift = 0;
  if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (!unit.empty()) throw invalid("unknown unit '" + unit + "'");
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (ec != std::errc() || end != text.data() + digits ||
      value > (kMaxCollectiveBytes >> shift)) {
    throw invalid("larger than 1 TiB");
  }
  if (value == 0) throw invalid("zero bytes");
  return value << shift;
}

}  // namespace

void register_collective_command(CLI::App& app) {
  struct Options {
    std::string topology;
    int64_t num_gpus = 8;
    std::string op = "all_reduce";
    std::string group = "tp";
    std::string min_bytes = "8", max_bytes = "8G";
    std::string algorithm;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("collective", "Simulated nccl-tests: one collective over a group, by size");
  cmd->add_option("--topology", o->topology, "Topology file")->required();
  cmd->add_option("--num-gpus", o->num_gpus, "Cluster size")->capture_default_str();
  cmd->add_option("--op", o->op, "all_reduce | all_gather | reduce_scatter | broadcast")->capture_default_str();
  cmd->add_option("--group", o->group, "tp (one node) | dp (one GPU per node) | all")->capture_default_str();
  cmd->add_option("-b,--minbytes", o->min_bytes, "Smallest size (nccl-tests -b)")->capture_default_str();
  cmd->add_option("-e,--maxbytes", o->max_bytes, "Largest size (nccl-tests -e)")->capture_default_str();
  cmd->add_option("--algorithm", o->algorithm, "Force ring | tree | nvls")->check(CLI::IsMember({"ring", "tree", "nvls"}));
  cmd->callback([o] {
    const int64_t min_bytes = parse_size("-b/--minbytes", o->min_bytes);
    const int64_t max_bytes = parse_size("-e/--maxbytes", o->max_bytes);
    if (min_bytes > max_bytes) {
      throw ConfigError(fmt::format("-b/--minbytes {} ({} bytes) is larger than -e/--maxbytes {} "
                                    "({} bytes) (rule: minbytes <= maxbytes)",
                                    o->min_bytes, min_bytes, o->max_bytes, max_bytes));
    }
    const TopologySpec topo = load_topology(o->topology);
    check_cluster_size(topo, o->num_gpus);
    const CollectiveKind kind = parse_op(o->op);
    const BenchGroup group = parse_bench_group(o->group);
    const auto members = bench_group_members(group, topo, o->num_gpus);
    fmt::print("# traintwin collective (simulated): {} over {} GPUs ({} group of {} x {})\n", o->op,
               members.size(), o->group, o->num_gpus, topo.gpu.name);
    fmt::print("#\n# {:>12} {:>12} {:>8} {:>6} {:>10} {:>9} {:>9}  {}\n", "size", "count", "type", "redop",
               "time", "algbw", "busbw", "algorithm");
    fmt::print("# {:>12} {:>12} {:>8} {:>6} {:>10} {:>9} {:>9}\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)");
    for (int64_t bytes : nccl_tests_sizes(min_bytes, max_bytes)) {
      const auto j = nlohmann::json::parse(run_isolated([&] {
        SimulationOptions opts;
        opts.collective_algorithm = o->algorithm;
        const CollectiveRow r = simulate_collective(topo, o->num_gpus, kind, group, bytes, opts);
        return nlohmann::json{{"time_us", r.time_us}, {"algbw", r.algbw_GBps}, {"busbw", r.busbw_GBps},
                              {"algorithm", r.algorithm}}.dump();
      }));
      fmt::print("  {:>12} {:>12} {:>8} {:>6} {:>10.2f} {:>9.2f} {:>9.2f}  {}\n", bytes, bytes / 4, "float",
                 kind == CollectiveKind::kAllGather || kind == CollectiveKind::kBroadcast ? "none" : "sum",
                 j["time_us"].get<double>(), j["algbw"].get<double>(), j["busbw"].get<double>(),
                 j["algorithm"].get<std::string>());
      std::fflush(stdout);
    }
  });
}

}  // namespace traintwin::cli
