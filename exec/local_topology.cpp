// This host as a cluster; see local_topology.hpp.
#include "exec/local_topology.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/posix_file.hpp"
#include "traces/collective_fit.hpp"

namespace traintwin::exec {
namespace {

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "host";
  std::string h;
  for (char c : std::string(buf)) h += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return h;
}

bool is_gemm(const std::string& name) { return name.rfind("gemm_", 0) == 0; }
bool is_attention(const std::string& name) {
  return name.rfind("attention_", 0) == 0 || name.rfind("flash_attention_", 0) == 0;
}

}  // namespace

std::pair<double, double> fit_link(const CostDatabase& db) {
  std::vector<CollectiveMeasurement> rows;
  for (const CollectiveMeasurement& c : db.collectives()) {
    if (c.op == "send_recv" && c.ranks == 2) rows.push_back(c);
  }
  const AlphaBeta fit = fit_alpha_beta(rows);
  return {fit.beta_Bps, fit.alpha_s};
}

LocalTopology local_topology(const CostDatabase& db, const CostDbDevice& device,
                             const std::string& device_id) {
  if (!device.threads) throw InvalidArgument("local topology: device has no thread count");
  LocalTopology t;
  t.name = "local-" + hostname();
  t.device = device_id;
  t.ranks_per_node = std::max<int64_t>(1, device.sm_count / *device.threads);
  for (const KernelMeasurement& m : db.kernels()) {
    const double s = m.median_us * 1e-6;
    if (is_gemm(m.key.name)) {
      t.peak_FLOPs = std::max(t.peak_FLOPs, m.flops / s);
    } else if (!is_attention(m.key.name)) {
      t.memory_Bps = std::max(t.memory_Bps, m.bytes / s);
    }
  }
  if (t.peak_FLOPs <= 0 || t.memory_Bps <= 0) {
    throw InvalidArgument("local topology: the database has no GEMM or no memory-bound kernel "
                          "rows; profile a scenario first");
  }
  t.memory_bytes = static_cast<double>(device.memory_bytes) / static_cast<double>(t.ranks_per_node);
  const auto [beta, alpha] = fit_link(db);
  if (beta > 0) {
    t.link_Bps = beta;
    t.link_latency_s = std::max(alpha, 1e-9);
    t.link_source = "fitted to the database's send_recv rows";
  } else {
    t.link_Bps = t.memory_Bps / 2;  // a copy reads and writes
    t.link_latency_s = 1e-6;
    t.link_source = "assumed (half the memory bandwidth, 1 us: no send_recv rows; run mpirun -np "
                    "2 traintwin profile --collectives first)";
  }
  return t;
}

void write_topology(const std::filesystem::path& file, const LocalTopology& t) {
  // Whole or not at all, and never through a link planted at `file` (core/posix_file.hpp).
  AtomicFile out(file);
  const double tflops = t.peak_FLOPs * 1e-12;
  out.write(fmt::format(
      "# This host as a cluster, written by traintwin profile --topology-out: each \"GPU\" is a\n"
      "# rank pinned to its share of the cores ({} per node). Peak FLOP/s: best GEMM rate of the\n"
      "# cost database; memory bandwidth: best rate of its memory-bound kernels; the node link\n"
      "# (\"nvlink\"): {}. The NIC and fabric only make the file valid: the host is one node.\n"
      "name: {}\n"
      "description: this host, {} rank(s) of device {}\n"
      "gpu:\n"
      "  name: {}\n"
      "  memory: {:.0f}MiB\n"
      "  hbm_bandwidth: {:.3f}GBps\n"
      "  peak_flops:\n"
      "    fp32: {:.6f}TFLOPs\n"
      "    fp16: {:.6f}TFLOPs\n"
      "    bf16: {:.6f}TFLOPs\n"
      "node:\n"
      "  gpus_per_node: {}\n"
      "  nvlink_bandwidth: {:.4f}GBps\n"
      "  nvlink_latency: {:.3f}us\n"
      "  nvls: false\n"
      "  collectives: mpi\n"
      "nic:\n"
      "  nics_per_node: 1\n"
      "  line_rate: 100Gbps\n"
      "  latency: 1us\n"
      "fabric:\n"
      "  kind: rail_optimized_fat_tree\n"
      "  tiers: 2\n"
      "  nodes_per_scalable_unit: 1\n"
      "  leaf_switches_per_scalable_unit: 1\n"
      "  switch_radix: 64\n"
      "  oversubscription: \"1:1\"\n"
      "  link_rate: 100Gbps\n"
      "  hop_latency: 1us\n",
      t.ranks_per_node, t.link_source, t.name, t.ranks_per_node, t.device, t.device,
      t.memory_bytes / (1024.0 * 1024.0), t.memory_Bps * 1e-9, tflops, tflops, tflops,
      t.ranks_per_node, t.link_Bps * 1e-9, t.link_latency_s * 1e6));
  out.commit();
}

}  // namespace traintwin::exec
