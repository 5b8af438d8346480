// Collective tenants: several ring all-reduce loops (nccl-tests all_reduce_perf, one per tenant)
// over given GPU sets and ring orders, run together on one fabric, each with its bus bandwidth.
// The input of `traintwin collective --tenants FILE` (cli/collective_command.cpp) and of the
// multi-tenant rows of `traintwin validate` (sim/collective_validation.hpp, next in the flow).
//
// Model (steady state of loops that run back to back, as nccl-tests' timed iterations do):
// every ring edge of a tenant is a transfer from a GPU to the next one in its ring order, routed
// on the topology's graph exactly as the replay's SimGrid platform routes it (topologies/graph.hpp:
// same links, D-mod-K up, one direction of a cable = one link). NCCL's ring is a pipeline paced by
// its slowest edge, so a tenant is one max-min variable whose rate r runs on every edge at once:
// it consumes r on each directed link once per ring edge crossing it (a ring that crosses a
// spine cable twice in one direction takes 2r of it). The rates of all tenants are the weighted
// max-min share of sim/max_min.hpp (the closed form the replay's flow network uses), with
// penalty 1 (plain max-min fair share) and each tenant bounded by the slowest link on its ring.
// One all-reduce of S bytes over n GPUs then takes
//   T = 2(n-1) x alpha + 2(n-1)/n x S / r,   alpha = the slowest route latency of its edges,
// and nccl-tests' columns follow: algbw = S / T, busbw = algbw x 2(n-1)/n (-> r for large S).
//
// Routing (TenantRouting): D-mod-K, as above, or ECMP. Ethernet/RoCE fabrics such as the mCCS
// testbed's spread flows over a leaf's uplinks by a hash of each flow's header (ECMP), so two
// ring edges that leave one leaf can land on one spine and share its cables while another spine
// idles: the cause mCCS (Wu et al., SIGCOMM 2024, sections 2.2 and 7) names for multi-tenant
// all-reduces below their fair share, and what its explicit path control removes. Under kEcmp
// every ring edge that leaves its leaf takes each of the pod's spines with equal probability,
// independently (one flow per ring edge, as NCCL's ring with one QP per connection); the model
// is solved for every outcome (spines ^ such edges, at most kMaxEcmpOutcomes) and each tenant's
// figures are the mean over them. Two tiers in one pod only (a leaf's uplinks all go to spines).
// Not modelled: NCCL's channels and protocol latencies, and the phases of tenants drifting
// against each other (a steady state, not a replay over time).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "topologies/topology.hpp"

namespace traintwin {

/// How the fabric's leaves spread flows over their uplinks (file comment).
enum class TenantRouting {
  kDModK,  ///< destination-based, as SimGrid's fat tree (the replay's): one route per ring edge
  kEcmp,   ///< a hash per flow: each spine equally likely; figures are the mean over outcomes
};

/// "d_mod_k" | "ecmp" (a tenants file's `routing`).
const char* to_string(TenantRouting r);

/// Most ECMP outcomes simulate_ring_tenants() solves (spines ^ ring edges leaving a leaf).
inline constexpr int64_t kMaxEcmpOutcomes = int64_t{1} << 20;

/// One tenant: a ring all-reduce loop over `ring` (GPU indices of the fabric, in ring order).
struct CollectiveTenant {
  std::string name;
  std::vector<int64_t> ring;  ///< >= 2 distinct GPUs, each < the fabric's GPUs
  int64_t bytes = 0;          ///< all-reduce size (nccl-tests -b), > 0
};

/// A tenants file as read: the fabric and its tenants.
struct TenantsFile {
  std::filesystem::path file;           ///< "" when parsed from text
  std::filesystem::path topology_file;  ///< resolved against the file's folder
  int64_t num_gpus = 0;                 ///< GPUs of the fabric built from the topology
  TenantRouting routing = TenantRouting::kDModK;  ///< the file's `routing` (default d_mod_k)
  std::vector<CollectiveTenant> tenants;
};

/// One tenant's result.
struct TenantBandwidth {
  std::string name;
  int64_t gpus = 0;
  int64_t bytes = 0;
  double edge_rate_Bps = 0;  ///< max-min rate of every edge of its ring, bytes/s
  double time_s = 0;         ///< one all-reduce (file comment)
  double algbw_GBps = 0;     ///< bytes / time_s / 1e9
  double busbw_GBps = 0;     ///< algbw x 2(n-1)/n
  /// The directed link that limits it ("rail0-leaf0->rail0-spine0"), with how many of its ring
  /// edges cross it and the tenants that share it; "" when its own bound limits it. Under ECMP:
  /// in how many of the outcomes a shared link limits it.
  std::string bottleneck;
};

/// Bus bandwidth factor of an all-reduce over n ranks (nccl-tests): 2(n-1)/n.
double all_reduce_busbw_factor(int64_t n);

/// Runs `tenants` together on `num_gpus` GPUs of `topo` (file comment), routed by `routing`.
/// Throws ConfigError "tenants[i] (<name>): ring: ..." for a ring of fewer than 2 GPUs, a GPU
/// given twice or outside [0, num_gpus), and "tenants[i] (<name>): bytes: ..." for bytes <= 0;
/// for ECMP on a fabric of more than one pod or with more than kMaxEcmpOutcomes outcomes; what
/// plan_fabric() throws for a fabric of that size.
std::vector<TenantBandwidth> simulate_ring_tenants(const TopologySpec& topo, int64_t num_gpus,
                                                   const std::vector<CollectiveTenant>& tenants,
                                                   TenantRouting routing = TenantRouting::kDModK);

/// Reads a tenants file (YAML, at most kMaxConfigFileBytes):
///   topology: mccs-rtx3090-testbed.yaml   # relative to the file
///   num_gpus: 8
///   routing: ecmp                         # optional: d_mod_k (the default) or ecmp
///   tenants:
///     - {name: blue, ring: [0, 2, 4, 6], bytes: 128MiB}
/// Throws ConfigError "<file>:<line>: <key>: <problem> (allowed: ...)" for unknown or missing
/// keys, a bytes value without a unit, duplicate tenant names, and (through
/// check_tenant_rings()) bad rings.
TenantsFile load_tenants(const std::filesystem::path& file);

/// Same as load_tenants() from YAML text; `origin` names it in messages and the topology path
/// resolves against `base_dir`.
TenantsFile parse_tenants(const std::string& yaml_text, const std::string& origin,
                          const std::filesystem::path& base_dir);

/// Checks each tenant's ring and bytes against a fabric of `num_gpus` GPUs; `where` prefixes the
/// messages. Throws ConfigError as simulate_ring_tenants() documents.
void check_tenant_rings(const std::vector<CollectiveTenant>& tenants, int64_t num_gpus,
                        const std::string& where);

}  // namespace traintwin
