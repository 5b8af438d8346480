// Collective validation cases; see collective_validation.hpp.
//
// The mCCS rows (published-runs-2026.yaml, artifact phoenix-dataplane/mCCS @86a25c7). GPU indices
// are those of placements/mccs-rtx3090-testbed.yaml: GPU g of host h is 2h + g, hosts in the order
// danyang-02 (h 0), danyang-03 (1), danyang-01 (2), danyang-05 (3); 02 and 03 under leaf 0.
//  * mccs-allreduce-alone (eval/plot/single_app/allreduce_{4,8}gpu.csv, solutions "NCCL GR" and
//    "NCCL BR"; the row's figures are their medians at 128 MiB): nccl-tests-mccs/microbenchmark/
//    run_nccl_once.sh runs all_reduce_perf with hostfile order 02,03,01,05 ("goodring") or
//    02,01,03,05 ("badring", the row's "default ring"), 1 or 2 slots per host. MPI ranks follow
//    the hostfile, NCCL's ring follows the ranks (NCCL_ALGO=Ring); with 1 slot the GPU is GPU 0
//    (CUDA_VISIBLE_DEVICES unset: device 0), with 2 slots GPUs 0 then 1 of each host.
//  * mccs-allreduce-three-tenants (setting 2; eval/plot/multi_app/setting2.csv, "NCCL GR"):
//    nccl-tests-mccs/setting2/run_all_jobs_once.sh runs three jobs at once: blue = GPU 0 of hosts
//    02,03,01,05 (good ring, run_nccl_job_blue.sh), green = GPU 1 of 02,01 and red = GPU 1 of
//    03,05 (run_nccl_job_small.sh); the same rank maps as eval/multi-app/gen_config.py's
//    allreduce_setup2. The row's tenant_a/b/c are red/green/blue: the CSV's medians of
//    "NCCL GR" are red 2.785, green 2.375, blue 2.75 GB/s and the row gives 2.79, 2.38, 2.75.
//  * mccs-allreduce-two-tenants (setting 3; setting3.csv, "NCCL GR"): blue = GPU 0 and red = GPU 1
//    of hosts 02,03,01,05, both good rings (setting3/run_nccl_job_small.sh goodring); medians
//    red 3.94, blue 3.94 = the row's tenant_a, tenant_b (equal: the order does not matter).
// All at 128 MiB (all_reduce_perf -b 128M -e 128M, --datatype=half).
#include "sim/collective_validation.hpp"

#include <fmt/format.h>

#include <functional>
#include <map>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/yaml_document.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

constexpr int64_t kMccsBytes = int64_t{128} << 20;
constexpr int64_t kMccsGpus = 8;
constexpr const char* kMccsTopology = "mccs-rtx3090-testbed.yaml";

/// GPU g of the mCCS host named `host` ("02", "03", "01", "05").
int64_t mccs_gpu(const std::string& host, int64_t g) {
  static const std::map<std::string, int64_t> index = {{"02", 0}, {"03", 1}, {"01", 2}, {"05", 3}};
  return 2 * index.at(host) + g;
}

/// A ring over `hosts` in that order, `gpus` (GPU 0, or GPUs 0 then 1) on each.
std::vector<int64_t> mccs_ring(const std::vector<std::string>& hosts, const std::vector<int64_t>& gpus) {
  std::vector<int64_t> ring;
  for (const std::string& h : hosts) {
    for (int64_t g : gpus) ring.push_back(mccs_gpu(h, g));
  }
  return ring;
}

const std::vector<std::string> kGoodRing = {"02", "03", "01", "05"};
const std::vector<std::string> kDefaultRing = {"02", "01", "03", "05"};

/// What one measured key of a row means: the tenants run together and the one measured.
struct KeyMeaning {
  std::string setting;
  std::vector<CollectiveTenant> tenants;
  std::string tenant;
};

CollectiveTenant tenant(std::string name, std::vector<int64_t> ring) {
  return CollectiveTenant{std::move(name), std::move(ring), kMccsBytes};
}

/// The known rows: row id -> key -> meaning (file comment).
const std::map<std::string, std::map<std::string, KeyMeaning>>& mccs_rows() {
  static const auto rows = [] {
    std::map<std::string, std::map<std::string, KeyMeaning>> r;
    auto& alone = r["mccs-allreduce-alone"];
    alone["good_ring_4gpu"] = {"alone: GPU 0 of hosts 02,03,01,05 (good ring)",
                               {tenant("ring", mccs_ring(kGoodRing, {0}))}, "ring"};
    alone["good_ring_8gpu"] = {"alone: GPUs 0,1 of hosts 02,03,01,05 (good ring)",
                               {tenant("ring", mccs_ring(kGoodRing, {0, 1}))}, "ring"};
    alone["default_ring_4gpu"] = {"alone: GPU 0 of hosts 02,01,03,05 (default ring)",
                                  {tenant("ring", mccs_ring(kDefaultRing, {0}))}, "ring"};
    alone["default_ring_8gpu"] = {"alone: GPUs 0,1 of hosts 02,01,03,05 (default ring)",
                                  {tenant("ring", mccs_ring(kDefaultRing, {0, 1}))}, "ring"};
    const std::vector<CollectiveTenant> setting2 = {
        tenant("red", mccs_ring({"03", "05"}, {1})), tenant("green", mccs_ring({"02", "01"}, {1})),
        tenant("blue", mccs_ring(kGoodRing, {0}))};
    auto& three = r["mccs-allreduce-three-tenants"];
    three["tenant_a"] = {"setting 2: red = GPU 1 of hosts 03,05, beside green and blue", setting2, "red"};
    three["tenant_b"] = {"setting 2: green = GPU 1 of hosts 02,01, beside red and blue", setting2,
                         "green"};
    three["tenant_c"] = {"setting 2: blue = GPU 0 of hosts 02,03,01,05 (good ring), beside red and "
                         "green", setting2, "blue"};
    const std::vector<CollectiveTenant> setting3 = {tenant("red", mccs_ring(kGoodRing, {1})),
                                                    tenant("blue", mccs_ring(kGoodRing, {0}))};
    auto& two = r["mccs-allreduce-two-tenants"];
    two["tenant_a"] = {"setting 3: red = GPU 1 of hosts 02,03,01,05 (good ring), beside blue",
                       setting3, "red"};
    two["tenant_b"] = {"setting 3: blue = GPU 0 of hosts 02,03,01,05 (good ring), beside red",
                       setting3, "blue"};
    return r;
  }();
  return rows;
}

std::string at(const std::string& file, const YAML::Node& n) {
  return fmt::format("{}:{}", file, n.Mark().line + 1);
}

}  // namespace

std::vector<CollectiveValidationCase> load_collective_validation_cases(
    const YAML::Node& root, const std::string& file, const std::filesystem::path& topologies_dir) {
  std::vector<CollectiveValidationCase> out;
  const YAML::Node runs = root["runs"];
  if (!runs || !runs.IsSequence()) return out;
  for (const YAML::Node& run : runs) {
    if (!run.IsMap() || !run["measured"] || !run["measured"].IsMap()) continue;
    const YAML::Node busbw = run["measured"]["busbw_GBps"];
    if (!busbw) continue;
    const std::string id = run["id"] ? run["id"].as<std::string>() : std::string("?");
    if (!busbw.IsMap() || busbw.size() == 0) {
      throw ConfigError(fmt::format("{}: {}.measured.busbw_GBps: must be a mapping of key: GB/s",
                                    at(file, busbw), id));
    }
    const auto row = mccs_rows().find(id);
    for (const auto& kv : busbw) {
      CollectiveValidationCase c;
      const std::string key = kv.first.as<std::string>();
      c.id = id + "/" + key;
      c.source = run["source"] ? run["source"].as<std::string>() : std::string();
      try {
        c.measured_busbw_GBps = kv.second.as<double>();
      } catch (const YAML::Exception&) {
        throw ConfigError(fmt::format("{}: {}.measured.busbw_GBps.{}: '{}' is not a number (GB/s)",
                                      at(file, kv.second), id, key, kv.second.Scalar()));
      }
      if (row == mccs_rows().end()) {
        c.unsupported = "a bus bandwidth row whose GPUs, ring order and tenants traintwin does not "
                        "know (sim/collective_validation.cpp encodes the mccs-* rows)";
      } else if (row->second.count(key) == 0) {
        c.unsupported = fmt::format("{}: key '{}' not encoded (which GPUs, ring and tenants it "
                                    "measures is not known)", id, key);
      } else {
        const KeyMeaning& m = row->second.at(key);
        c.setting = m.setting;
        c.tenants = m.tenants;
        c.tenant = m.tenant;
        c.num_gpus = kMccsGpus;
        c.topology_file = topologies_dir / ".." / "placements" / kMccsTopology;
        // RoCE over SN2100 switches: ECMP spreads the flows over the 2 spines by a hash, so ring
        // edges of tenants that leave one leaf collide on a spine in some outcomes (mCCS,
        // SIGCOMM 2024, section 2.2: the cause of the shared rings' lower bandwidth).
        c.routing = TenantRouting::kEcmp;
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<CollectiveValidationCase> load_collective_validation_cases(
    const std::filesystem::path& calibration_file, const std::filesystem::path& topologies_dir) {
  const std::string file = calibration_file.string();
  const YAML::Node root = load_single_yaml_document(
      read_input_file(calibration_file, "calibration file", kMaxConfigFileBytes), file,
      "calibration file");
  return load_collective_validation_cases(root, file, topologies_dir);
}

CollectivePrediction simulate_collective_validation_case(const CollectiveValidationCase& c) {
  if (!c.unsupported.empty()) {
    throw ConfigError(fmt::format("{}: not supported: {}", c.id, c.unsupported));
  }
  const TopologySpec topo = load_topology(c.topology_file);
  const std::vector<TenantBandwidth> bw =
      simulate_ring_tenants(topo, c.num_gpus, c.tenants, c.routing);
  for (const TenantBandwidth& b : bw) {
    if (b.name == c.tenant) return CollectivePrediction{b.busbw_GBps, b.bottleneck};
  }
  throw InvalidArgument(fmt::format("{}: tenant '{}' is not among its tenants", c.id, c.tenant));
}

}  // namespace traintwin
