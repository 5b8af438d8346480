// The SimGrid platform of a cluster: built with SimGrid's C++ builders from a TopologySpec for
// `num_gpus` GPUs. Layout (rail-optimized DGX SuperPOD):
//  - one zone per node: a star through the NVSwitch, each GPU host with its own split-duplex
//    NVLink (per-direction bandwidth and latency of node.nvlink_*), so intra-node transfers share
//    only their endpoints' NVLinks;
//  - one fat-tree zone per rail r: an endpoint ("NIC host") per node for its r-th NIC, NIC link
//    at nic.line_rate, leaves/spines(/cores) as the fabric states (oversubscription, link rate,
//    hop latency).
// A transfer between GPUs of one node uses the GPU hosts; between nodes it travels on the
// sender's rail from the sender node's NIC host to the receiver node's NIC host of that rail
// (NCCL's PXN places any NVLink hop on the sender side; that hop is not modelled).
// SimGrid allows one Engine per process: build one Platform per process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "topologies/topology.hpp"

namespace simgrid::s4u {
class Engine;
class Host;
class Link;
}  // namespace simgrid::s4u

namespace traintwin {

/// Multiplicative what-if factors applied when building the platform (1.0 = as the file says).
struct PlatformScaling {
  double nvlink_bandwidth = 1.0;
  double ib_bandwidth = 1.0;  ///< NICs and switch-to-switch links
};

/// A link of the platform, for metrics.
struct PlatformLink {
  std::string name;          ///< e.g. "node3-gpu5-nvlink", "rail2-leaf0-spine7"
  std::string tier;          ///< "nvlink" | "nic" | "leaf-spine" | "spine-core"
  double bandwidth_Bps = 0;  ///< per direction
  simgrid::s4u::Link* link = nullptr;
};

class Platform {
 public:
  /// Pins the network model (CM02, no cross-traffic, no TCP-gamma; see SIMGRID-NOTES.md), then
  /// builds the zones. Throws ConfigError when num_gpus does not fit the topology
  /// (check_cluster_size).
  static std::unique_ptr<Platform> build(simgrid::s4u::Engine& engine, const TopologySpec& topo,
                                         int64_t num_gpus, const PlatformScaling& scaling = {});
  virtual ~Platform() = default;

  /// Hosts a transfer from GPU `src` to GPU `dst` goes between (src != dst).
  virtual std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*> endpoints(int64_t src, int64_t dst) const = 0;
  /// Every link, for utilization metrics.
  virtual const std::vector<PlatformLink>& links() const = 0;
  virtual const TopologySpec& topology() const = 0;
  virtual int64_t num_gpus() const = 0;
};

}  // namespace traintwin
