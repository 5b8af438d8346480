// The cluster topology file (topologies/*.yaml): GPU, node, NIC and fabric of a GPU cluster, as
// read and validated from YAML. The graph, routes and SimGrid platform built from it live
// elsewhere; this is the data and its loader.
//
// Field of study: the shipped files follow NVIDIA's DGX SuperPOD reference architectures
// (DGX A100: RA-09950-001, 2020; DGX H100: RA-11333-001, 2023, "Compute Fabric" section and
// its component-count table). A DGX node holds 8 GPUs on NVLink/NVSwitch and one InfiniBand NIC
// per GPU; NIC i of every node of a scalable unit (SU) plugs into leaf switch i of that SU (a
// "rail"), so same-rail traffic inside an SU crosses one switch. Leaves connect to spines (two
// tiers) and, in larger builds, spines of a pod connect to core switches (three tiers), as a
// folded Clos ("fat tree") of radix-k switches:
//   leaf: d down ports (one per node of its SU on its rail), u = k - d up ports;
//         oversubscription is d:u ("1:1" = non-blocking);
//   2 tiers: at most k leaves (each spine reaches every leaf once);
//   3 tiers: at most k pods of k/2 leaves (spines have k/2 down, k/2 up ports).
// A cluster of N nodes fits when its SUs' leaves fit: ceil(N / nodes_per_SU) * rails <= max
// leaves. Example: radix 64, 1:1, 8 rails, 32 nodes/SU gives 64 leaves = 8 SU = 256 nodes on
// two tiers (the RA's largest two-tier build) and 2048 leaves = 256 SU = 8192 nodes on three.
//
// File format: the keys, their types and units, which are required and an example of each are
// the schema's (topologies/topology_schema.hpp), listed in topologies/README.md (generated);
// unknown keys are errors. The loader below adds the cross-key rules (a tray divides the NVLink
// domain, the NICs divide it, one leaf per rail, the SU fits a leaf's ports, radix and tiers).
//
// The NVLink domain and the job on it: every engine sees a "node" as the GPUs of one NVLink
// domain that the job uses. After loading, NodeSpec::gpus_per_node is gpus_used_per_node (the
// file's gpus_per_node is kept in NodeSpec::nvlink_domain_gpus) and NicSpec::nics_per_node the
// NICs of those GPUs; the spare GPUs' NICs and rails carry none of the job's traffic and are not
// built. Rank r runs on GPU r % gpus_per_node of domain r / gpus_per_node (place_rank()). So
// collectives of a group inside one domain (TP, and CP / EP groups that fit) take the NVLink
// closed forms; groups across domains go over the rails.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/scenario.hpp"

namespace traintwin {

/// Dense peak math throughput of one GPU per precision, FLOP/s (tensor cores for 16-bit).
struct PeakFlops {
  double fp32_FLOPs = 0;             ///< non-tensor FP32
  std::optional<double> tf32_FLOPs;  ///< tensor-core TF32, when the file gives it
  double fp16_FLOPs = 0;
  double bf16_FLOPs = 0;            ///< 0: no BF16 tensor cores (Turing; the file gives none)
  std::optional<double> fp8_FLOPs;   ///< tensor-core FP8 (E4M3/E5M2), when the GPU has it
  /// Tensor-core FP4 (Blackwell NVFP4/MXFP4), when the file gives it. Read and shown only: no
  /// kernel dtype is FP4 yet, so the cost model never uses it.
  std::optional<double> fp4_FLOPs;
};

/// A GPU's link to its host CPU and the host's share for that GPU (the file's gpu.host_link):
/// what CPU offload (training.optimizer_cpu_offload, training.cpu_offloading) uses.
struct HostLinkSpec {
  double bandwidth_Bps = 0;  ///< per direction (PCIe Gen5 x16 ~ 55e9 measured; GB200 C2C 450e9)
  double latency_s = 0;      ///< per copy
  double host_memory_bytes = 0;  ///< host DRAM for this GPU's process: the host's / its GPUs
  /// Memory bandwidth the host CPU's AdamW reaches for this GPU (its share of the host's): a
  /// step of n parameters takes 28 n / this (fp32 parameter, gradient and two moments read,
  /// parameter and moments written).
  double optimizer_bandwidth_Bps = 0;
};

/// One GPU.
struct GpuSpec {
  std::string name;              ///< e.g. "H100-SXM-80GB" (calibration.yaml `cluster.gpu`)
  double memory_bytes = 0;       ///< device memory (nvidia-smi memory.total)
  double hbm_bandwidth_Bps = 0;  ///< peak HBM bandwidth
  PeakFlops peak;
  /// The host link (gpu.host_link), when the file gives it; CPU offload needs it.
  std::optional<HostLinkSpec> host_link;

  /// Dense peak for a kernel dtype: fp32 -> fp32_FLOPs, fp16, bf16, fp8 and tf32 (0 when the GPU
  /// has no FP8 / the file gives no TF32 peak; the cost model then refuses those kernels).
  double peak_FLOPs(Precision p) const;
};

/// One node as the engines see it: the GPUs of one NVLink domain (NVSwitch fabric: a DGX node,
/// a GB200 NVL72 rack) that the job's ranks are placed on.
struct NodeSpec {
  /// GPUs per domain the job uses (the file's node.gpus_used_per_node, else node.gpus_per_node):
  /// rank r is on domain r / gpus_per_node. Every engine divides by this.
  int64_t gpus_per_node = 0;
  /// GPUs of the whole NVLink domain (the file's node.gpus_per_node, e.g. 72 for GB200 NVL72);
  /// 0 in a spec built in code = gpus_per_node (domain_gpus()).
  int64_t nvlink_domain_gpus = 0;
  /// GPUs per host (compute tray) of the domain (node.gpus_per_tray; GB200: 4 GPUs with 2 Grace
  /// CPUs); 0 = domain_gpus() (a DGX node is one host).
  int64_t gpus_per_tray = 0;
  double nvlink_bandwidth_Bps = 0;  ///< per GPU, per direction (H100: 450 GB/s of 900 total)
  double nvlink_latency_s = 0;      ///< one GPU-to-GPU transfer through NVSwitch
  bool nvls = false;                ///< NVLink SHARP (in-switch reductions), Hopper and later
  /// node.collectives: true = NCCL runs the collectives (its tuner's algorithms, protocols and
  /// latencies: sim/nccl_tuning.hpp); false = a host's MPI ("mpi": rings, one protocol).
  bool nccl = true;

  /// GPUs of the whole NVLink domain, spares included.
  int64_t domain_gpus() const {
    return nvlink_domain_gpus > 0 ? nvlink_domain_gpus : gpus_per_node;
  }
  /// GPUs per host (tray).
  int64_t tray_gpus() const { return gpus_per_tray > 0 ? gpus_per_tray : domain_gpus(); }
};

/// The InfiniBand adapters of a node: one per rail.
struct NicSpec {
  /// NICs of the GPUs a job uses per node (= rails built): the file's nic.nics_per_node x
  /// gpus_used_per_node / gpus_per_node; node.gpus_per_node is a multiple of it.
  int64_t nics_per_node = 0;
  double line_rate_Bps = 0;   ///< per NIC, per direction (400 Gb/s NDR = 50e9)
  double latency_s = 0;       ///< per NIC crossed; a node-to-node message crosses two
};

/// The compute fabric between nodes.
///
/// Dual-plane (fabric.kind dual_plane_rail_fat_tree; Alibaba HPN, SIGCOMM 2024, sections 4-5,
/// and SimAI's Rail_Opti_DualToR_DualPlane topology generator): every NIC has `planes` = 2
/// ports of nic.line_rate / 2 each (HPN: 2 x 200 Gb/s); port p of NIC r of every node of an SU
/// plugs into that SU's leaf (ToR) of rail r in plane p, and each plane's leaves reach only that
/// plane's spines (and cores), so each plane is a rail-optimized fat tree of its own. A NIC
/// spreads its traffic evenly over its ports whose cables are up (fabric.ports_down): with both
/// up a transfer between nodes gets both planes, with one down it gets one port, half the NIC.
/// One port of a dual-plane fabric's NIC: node `node`'s NIC `nic` on plane `plane`.
struct NicPort {
  int64_t node = 0, nic = 0, plane = 0;
  /// "node<i>-nic<r>-plane<p>", as fabric.ports_down and the platform's link names spell it.
  std::string name() const;
  bool operator==(const NicPort&) const = default;
};

struct FabricSpec {
  /// "rail_optimized_fat_tree" or "dual_plane_rail_fat_tree"
  std::string kind;
  /// Planes: ports per NIC, each to its own fat tree (1; dual_plane_rail_fat_tree: 2).
  int64_t planes = 1;
  /// NIC ports whose cable is down, read from "node<i>-nic<r>-plane<p>" (dual-plane fabrics
  /// only; the node is checked against the cluster when a platform is built): the NIC sends and
  /// receives on its other plane only.
  std::vector<NicPort> ports_down;
  int64_t tiers = 0;                            ///< switch levels: 2 or 3
  int64_t nodes_per_scalable_unit = 0;          ///< nodes under one set of rail leaves
  /// = rails of the whole domain (fabric_rails()) x planes: a leaf per rail and plane
  int64_t leaf_switches_per_scalable_unit = 0;
  int64_t switch_radix = 0;                     ///< ports per switch (k)
  int64_t oversubscription_down = 1;            ///< leaf down ports share of "down:up"
  int64_t oversubscription_up = 1;              ///< leaf up ports share of "down:up"
  /// Spine ports down:up of a three-tier fabric (fabric.spine_oversubscription; 1:1 when the
  /// file gives none): a spine has ceil(leaves per pod x up / down) cables up to the cores.
  int64_t spine_oversubscription_down = 1;
  int64_t spine_oversubscription_up = 1;
  double link_rate_Bps = 0;                     ///< switch-to-switch links, per direction
  double hop_latency_s = 0;                     ///< per switch crossed (incl. its cables)

  /// Down:up ratio of a leaf switch as a number (1.0 = non-blocking).
  double oversubscription() const {
    return static_cast<double>(oversubscription_down) / static_cast<double>(oversubscription_up);
  }
};

/// Nodes of another GPU type in a mixed cluster (one item of the file's node_groups): `nodes`
/// NVLink domains, after those of the groups before it, whose GPUs, NVLink domain and NICs are the
/// node_template file's (its fabric is not used: the switches are the topology's). The domain's
/// shape (node.gpus_per_node, gpus_used_per_node, gpus_per_tray, collectives) and the rails
/// (nic.nics_per_node) equal the topology's (the loader checks it); its rates may differ (a DGX
/// A100 node: NVLink 3 at 300 GB/s per direction, no NVLS, HDR 200 Gb/s NICs).
struct NodeGroup {
  std::string name;
  int64_t nodes = 0;
  GpuSpec gpu;
  std::filesystem::path node_template;  ///< the topology file the GPU was read from
  /// The template's node and nic where their rates differ from the topology's; nullopt: the
  /// topology's own (node_spec_of(), nic_spec_of()).
  std::optional<NodeSpec> node = std::nullopt;
  std::optional<NicSpec> nic = std::nullopt;
};

/// One item of the file's link_overrides: a link of the platform (Platform::links(),
/// sim/platform.hpp: "node3-nic2-up", "rail2-leaf1-spine3-c0-down") or a cable (the same name
/// without -up/-down: both directions) whose bandwidth, latency or state differs from its tier's.
/// Names are checked by topologies/fabric_overrides.hpp; the platform applies them.
struct LinkOverride {
  std::string link;
  std::optional<double> bandwidth_Bps;  ///< absolute, per direction (the tier's rate otherwise)
  std::optional<double> latency_s;      ///< absolute: the link's whole latency share
  bool down = false;                    ///< the cable is down (a whole cable: both directions)
  std::string where;                    ///< "<file>:<line>: link_overrides[<i>]", for messages
};

/// One item of the file's switch_overrides: a fabric switch ("rail0-leaf1", "rail0-spine3",
/// "rail0-core2"; dual-plane "rail0-plane1-spine3"), as topologies/graph.hpp names its vertices.
struct SwitchOverride {
  std::string name;
  /// Its hop latency (fabric.hop_latency otherwise): each of its links' latency moves by
  /// (hop_latency_s - fabric.hop_latency) / 2, so a route through it pays hop_latency_s for it.
  std::optional<double> hop_latency_s;
  bool down = false;  ///< the switch is down: routes avoid it (sim/platform.hpp)
  std::string where;  ///< "<file>:<line>: switch_overrides[<i>]", for messages
};

/// A whole cluster topology as read from topologies/*.yaml.
struct TopologySpec {
  std::string name;
  std::string description;       ///< "" when the file has none
  std::filesystem::path source;  ///< the file it was read from ("" when parsed from text)
  GpuSpec gpu;                   ///< the GPU of every node past the node groups
  NodeSpec node;
  NicSpec nic;
  FabricSpec fabric;
  std::vector<NodeGroup> node_groups;  ///< node 0 on, in order; empty: every node has `gpu`
  std::vector<LinkOverride> link_overrides;      ///< the file's link_overrides, in file order
  std::vector<SwitchOverride> switch_overrides;  ///< the file's switch_overrides, in file order

  /// Whether the file overrides a link or switch (link_overrides or switch_overrides given).
  bool has_overrides() const { return !link_overrides.empty() || !switch_overrides.empty(); }
};

/// The index in t.node_groups of the group that holds NVLink domain `node`, or
/// t.node_groups.size() for the nodes past the groups (the file's own GPU). InvalidArgument for
/// node < 0.
size_t node_group_index(const TopologySpec& t, int64_t node);

/// The GPU of NVLink domain `node`: its node group's, else t.gpu. InvalidArgument for node < 0.
const GpuSpec& gpu_of_node(const TopologySpec& t, int64_t node);

/// The NVLink domain (bandwidth, latency, NVLS) of NVLink domain `node`: its node group's where
/// the group has its own (NodeGroup::node), else t.node. InvalidArgument for node < 0.
const NodeSpec& node_spec_of(const TopologySpec& t, int64_t node);

/// The NICs (line rate, latency) of NVLink domain `node`: its node group's where the group has
/// its own (NodeGroup::nic), else t.nic. InvalidArgument for node < 0.
const NicSpec& nic_spec_of(const TopologySpec& t, int64_t node);

/// Whether some node group has NVLink or NIC rates of its own (NodeGroup::node or nic set):
/// then the platform and the collectives take each node's rates (node_spec_of, nic_spec_of).
bool has_per_node_rates(const TopologySpec& t);

/// Whether the NVLink domains of the first `num_gpus` ranks (place_rank) all have one GPU type
/// and the same NVLink and NIC rates: a job the estimator can time with one node template.
/// InvalidArgument for num_gpus < 1.
bool job_on_one_node_kind(const TopologySpec& t, int64_t num_gpus);

/// The GPUs a job of `num_gpus` ranks (placed by place_rank) runs on: the distinct types in the
/// order of their first rank, and each rank's index into them. One type unless the job reaches
/// into nodes of another node group.
struct JobGpus {
  std::vector<GpuSpec> types;
  std::vector<uint8_t> rank_type;  ///< [num_gpus]
  bool mixed() const { return types.size() > 1; }
  /// Appends the next rank, on `gpu` (a new type when no type has its name). InvalidArgument
  /// past 255 types.
  void add_rank(const GpuSpec& gpu);
  /// Memory of the smallest GPU (a mixed job fits where its largest stage fits the smallest).
  double smallest_memory_bytes() const;
  /// Dense peak for `p` averaged over the ranks (MFU of a mixed job is against the sum of its
  /// GPUs' peaks).
  double mean_peak_FLOPs(Precision p) const;
  /// "8 x H100-SXM-80GB", or "512 x H200-SXM-141GB + 512 x H100-SXM-80GB" for a mixed job.
  std::string describe() const;
};

/// Memory of the smallest GPU of the topology (its gpu and its node groups'): what a sweep over
/// cluster sizes checks every layout against.
double smallest_gpu_memory_bytes(const TopologySpec& t);

/// JobGpus of the first num_gpus ranks. InvalidArgument for num_gpus < 1 or more than 255 types.
JobGpus job_gpus(const TopologySpec& t, int64_t num_gpus);

/// Rails of the fabric: NICs of a whole NVLink domain, spares included
/// (nic.nics_per_node x domain_gpus() / gpus_per_node; = nics_per_node without spares).
int64_t fabric_rails(const TopologySpec& t);

/// Where a rank runs (ranks are GPU indices of the job, Megatron's rank order).
struct GpuPlacement {
  int64_t node = 0;          ///< NVLink domain (DGX node, NVL72 rack): rank / gpus_per_node
  int64_t gpu_in_node = 0;   ///< GPU index inside the domain, 0 .. domain_gpus() - 1
  int64_t tray = 0;          ///< host (compute tray) inside the domain: gpu_in_node / tray_gpus()
  int64_t gpu_in_tray = 0;   ///< gpu_in_node % tray_gpus()
  int64_t physical_gpu = 0;  ///< index among all GPUs of the domains, spares included:
                             ///< node x domain_gpus() + gpu_in_node
};

/// The GPU rank `rank` runs on: the job fills the first gpus_per_node GPUs (whole trays from
/// tray 0) of each NVLink domain in turn and skips the spares (GB200 NVL72 at 64 of 72: rank 64
/// is GPU 0 of rack 1, physical GPU 72). Throws InvalidArgument for a negative rank.
GpuPlacement place_rank(const TopologySpec& t, int64_t rank);

/// Checks that a layout's tensor-parallel groups stay inside one NVLink domain as the job uses
/// it: parallelism.tensor_model_parallel_size and the expert tensor-parallel size at most
/// node.gpus_per_node (the GPUs used per domain). Throws ConfigError naming the scenario file,
/// the key and the topology's key.
void check_layout_fits_nvlink_domain(const TopologySpec& t, const Scenario& s);

/// Reads and validates a topology file. Syntax errors, unknown or missing keys, values of the
/// wrong type, quantities without (or with the wrong) unit and broken rules raise ConfigError
/// "<file>:<line>: <key>: <problem> (allowed: ...)".
TopologySpec load_topology(const std::filesystem::path& file);

/// The topology a scenario runs on (cluster.topology), checked against it as every command
/// needs: the cluster fits (check_cluster_size) and the GPU can run the scenario's arithmetic
/// (check_gpu_supports), and its TP groups fit an NVLink domain (check_layout_fits_nvlink_domain).
/// Throws ConfigError as those do.
TopologySpec load_scenario_topology(const Scenario& s);

/// Same as load_topology() from YAML text; `origin` names it in messages, node_groups'
/// node_template files are read relative to `base_dir` (default: the working directory).
TopologySpec parse_topology(const std::string& yaml_text, const std::string& origin,
                            const std::filesystem::path& base_dir = {});

/// Leaf switch ports toward nodes: floor(k * down / (down + up)) (k/2 when non-blocking).
int64_t leaf_down_ports(const FabricSpec& f);

/// Most leaf switches the fabric can hold: k with two tiers, k * k/2 with three.
int64_t max_leaf_switches(const FabricSpec& f);

/// Most nodes the fabric can hold: whole SUs whose leaves fit in max_leaf_switches(), times
/// nodes_per_scalable_unit.
int64_t max_nodes(const TopologySpec& t);

/// Checks that `num_gpus` GPUs can be built from this topology: at least one, a multiple of
/// gpus_per_node (the GPUs used per NVLink domain), and no more nodes than max_nodes(). Throws
/// ConfigError with the numbers.
void check_cluster_size(const TopologySpec& t, int64_t num_gpus);

/// Checks that every GPU of `t` (the node groups' too) can run what `training` asks of it: FP8 GEMMs
/// (training.fp8_format) need an FP8 peak (gpu.peak_flops.fp8: Hopper and later; an A100 has
/// none), the mxfp8 recipe needs Blackwell's MX block scaling (a GPU named B*/GB*), and TF32
/// matrix products (training.float32_matmul_precision high) a TF32 peak (gpu.peak_flops.tf32).
/// Throws ConfigError naming the key, the GPU and the topology file's key.
void check_gpu_supports(const TopologySpec& t, const TrainingConfig& training);

/// Human-readable summary for the CLI and reports: a title line (name: description), then one
/// line each for gpu, node, nic, fabric and size (capacity); every line ends in '\n'.
std::string describe_topology(const TopologySpec& t);

}  // namespace traintwin
