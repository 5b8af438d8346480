#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <functional>
#include <thread>
#include <vector>

#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "core/error.hpp"
#include "sim/collective_bench.hpp"
#include "sim/collective_tenants.hpp"
#include "sim/isolated.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {
namespace {

CollectiveKind parse_op(const std::string& op) {
  if (op == "all_reduce") return CollectiveKind::kAllReduce;
  if (op == "all_gather") return CollectiveKind::kAllGather;
  if (op == "reduce_scatter") return CollectiveKind::kReduceScatter;
  if (op == "broadcast") return CollectiveKind::kBroadcast;
  if (op == "all_to_all") return CollectiveKind::kAllToAll;
  throw ConfigError("--op: '" + op +
                    "' unknown (allowed: all_reduce, all_gather, reduce_scatter, broadcast, "
                    "all_to_all)");
}

/// `--tenants FILE`: every tenant's ring all-reduce loop run together on the file's fabric, one
/// nccl-tests-like row per tenant (sim/collective_tenants.hpp).
void print_tenants(const std::string& file) {
  const TenantsFile f = load_tenants(file);
  const TopologySpec topo = load_topology(f.topology_file);
  const std::vector<TenantBandwidth> rows =
      simulate_ring_tenants(topo, f.num_gpus, f.tenants, f.routing);
  fmt::print("# traintwin collective --tenants (simulated steady state): {} ring all-reduce "
             "tenant(s) together on {} GPUs of {} ({}), routing {}{}\n#\n",
             rows.size(), f.num_gpus, topo.name, topo.gpu.name, to_string(f.routing),
             f.routing == TenantRouting::kEcmp ? " (mean over the hash outcomes)" : "");
  fmt::print("# {:<12} {:>5} {:>12} {:>10} {:>8} {:>8}  {}\n", "tenant", "GPUs", "size (B)",
             "time (us)", "algbw", "busbw", "limited by");
  for (size_t i = 0; i < rows.size(); ++i) {
    const TenantBandwidth& r = rows[i];
    fmt::print("  {:<12} {:>5} {:>12} {:>10.1f} {:>8.2f} {:>8.2f}  {}\n", r.name, r.gpus, r.bytes,
               r.time_s * 1e6, r.algbw_GBps, r.busbw_GBps,
               r.bottleneck.empty() ? "its own slowest link" : r.bottleneck);
  }
  fmt::print("# rings: {}\n", [&] {
    std::string s;
    for (const CollectiveTenant& t : f.tenants) {
      s += fmt::format("{}{} [{}]", s.empty() ? "" : "; ", t.name, fmt::join(t.ring, " "));
    }
    return s;
  }());
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
    std::string protocol;
    std::string tenants;
    std::optional<int64_t> node;
    std::string node_group;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("collective", "Simulated nccl-tests: one collective over a group, by size");
  cmd->add_option("--topology", o->topology, "Topology file (required without --tenants)");
  cmd->add_option("--tenants", o->tenants,
                  "Tenants file: several ring all-reduce loops (GPU sets, ring orders, sizes) run "
                  "together on the file's topology, each tenant's busbw (max-min fair share)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--num-gpus", o->num_gpus, "Cluster size")->capture_default_str();
  cmd->add_option("--op", o->op, "all_reduce | all_gather | reduce_scatter | broadcast | all_to_all")
      ->capture_default_str();
  cmd->add_option("--group", o->group, "tp (one node) | dp (one GPU per node) | all")->capture_default_str();
  auto* node_opt = cmd->add_option(
      "--node", o->node,
      "With --group tp: the node (NVLink domain) whose GPUs run it, 0 .. num_gpus / "
      "gpus_per_node - 1 (default 0; on a mixed cluster a node of any node group)");
  cmd->add_option("--node-group", o->node_group,
                  "With --group tp: the first node of this node group (topology node_groups[].name)")
      ->excludes(node_opt);
  cmd->add_option("-b,--minbytes", o->min_bytes, "Smallest size (nccl-tests -b)")->capture_default_str();
  cmd->add_option("-e,--maxbytes", o->max_bytes, "Largest size (nccl-tests -e)")->capture_default_str();
  cmd->add_option("--algorithm", o->algorithm, "Force ring | tree | nvls (NCCL_ALGO)")
      ->check(CLI::IsMember({"ring", "tree", "nvls"}));
  cmd->add_option("--protocol", o->protocol, "Force LL | LL128 | Simple (NCCL_PROTO)")
      ->check(CLI::IsMember({"LL", "LL128", "Simple"}));
  cmd->callback([o] {
    if (!o->tenants.empty()) {
      if (!o->topology.empty()) {
        throw ConfigError("collective: --topology: the --tenants file names its topology (give one "
                          "of them)");
      }
      return print_tenants(o->tenants);
    }
    if (o->topology.empty()) throw ConfigError("collective: --topology FILE is required (or --tenants FILE)");
    const auto [min_bytes, max_bytes] = parse_nccl_size_range(o->min_bytes, o->max_bytes);
    const TopologySpec topo = load_topology(o->topology);
    check_cluster_size(topo, o->num_gpus);
    const CollectiveKind kind = parse_op(o->op);
    const BenchGroup group = parse_bench_group(o->group);
    const int64_t node =
        !o->node_group.empty() ? first_node_of_group(topo, o->node_group) : o->node.value_or(0);
    const auto members = bench_group_members(group, topo, o->num_gpus, node);
    const GpuSpec& gpu = gpu_of_node(topo, place_rank(topo, members.front()).node);
    fmt::print("# traintwin collective (simulated): {} over {} GPUs ({} group{} of {} GPUs; {})\n",
               o->op, members.size(), o->group,
               group == BenchGroup::kTp ? fmt::format(" on node {}", node) : std::string(),
               o->num_gpus, group == BenchGroup::kTp ? gpu.name : job_gpus(topo, o->num_gpus).describe());
    fmt::print("#\n{}", nccl_tests_inplace_header("algorithm  protocol"));
    // One worker process per size (SimGrid: one engine per process), as many at once as cores.
    const std::vector<int64_t> sizes =
        nccl_tests_sizes(min_bytes, max_bytes);
    std::vector<std::function<std::string()>> work;
    for (int64_t bytes : sizes) {
      work.push_back([&o, &topo, kind, group, bytes, node] {
        SimulationOptions opts;
        opts.collective_algorithm = o->algorithm;
        opts.collective_protocol = o->protocol;
        return nlohmann::json(simulate_collective(topo, o->num_gpus, kind, group, bytes, opts, node))
            .dump();
      });
    }
    const int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const auto outcomes = run_isolated_concurrently(work, jobs);
    const bool reduces =
        kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter;
    double busbw_sum = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (!outcomes[i].ok) throw Error(outcomes[i].error);
      const auto r = nlohmann::json::parse(outcomes[i].output).get<CollectiveRow>();
      fmt::print("{}", nccl_tests_inplace_row(r.bytes, r.bytes / 4, reduces ? "sum" : "none",
                                              r.time_us, r.algbw_GBps, r.busbw_GBps,
                                              fmt::format("{:<9}  {}", r.algorithm, r.protocol)));
      busbw_sum += r.busbw_GBps;
    }
    // nccl-tests' closing line: the mean bus bandwidth over the sizes run.
    fmt::print("# Avg bus bandwidth    : {:.3f} \n#\n",
               busbw_sum / static_cast<double>(sizes.size()));
  });
}

}  // namespace traintwin::cli
