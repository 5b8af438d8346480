// The topology schema table and its generated key reference; see topologies/topology_schema.hpp.
#include "topologies/topology_schema.hpp"

#include <fmt/format.h>

#include <array>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"

namespace traintwin::topology_schema {
namespace {

using V = ValueType;

// The shipped files' values as examples: topologies/dgx-h100-superpod.yaml, and
// gb200-nvl72-superpod.yaml for the keys only it gives.
constexpr std::array kKeys = {
    KeySpec{"", "name", V::kText, true, 0, "dgx-h100-superpod", "the topology's name"},
    KeySpec{"", "description", V::kFreeText, false, 0, "", "free text"},
    KeySpec{"", "gpu", V::kMapping, true, 0, "", "the GPU"},
    KeySpec{"", "node", V::kMapping, true, 0, "",
            "one NVLink domain (NVSwitch fabric): a DGX node or a GB200 NVL72 rack"},
    KeySpec{"", "nic", V::kMapping, true, 0, "", "the InfiniBand NICs of one NVLink domain"},
    KeySpec{"", "fabric", V::kMapping, true, 0, "", "the switched network between the domains"},
    KeySpec{"", "node_groups", V::kList, false, 0, "",
            "nodes of other GPU types (a mixed cluster), in node order from node 0: a list of "
            "{name, nodes, node_template}; the nodes past the groups have this file's gpu, node "
            "and nic"},
    KeySpec{"", "link_overrides", V::kList, false, 0, "",
            "links or cables whose bandwidth, latency or state differ from their tier's: a list "
            "of {link, bandwidth, latency, down}, each giving at least one of the three; a "
            "cable down is routed around where the fabric allows it (see \"Link and switch "
            "overrides\")"},
    KeySpec{"", "switch_overrides", V::kList, false, 0, "",
            "fabric switches that are down or slower: a list of {switch, hop_latency, down}, "
            "each giving at least one of the two; a spine or core down is routed around"},

    KeySpec{"gpu", "name", V::kText, true, 0, "H100-SXM-80GB",
            "the GPU's name (calibration files' cluster.gpu; picks traces/db/<name>.json)"},
    KeySpec{"gpu", "memory", V::kBytes, true, 0, "81559MiB",
            "device memory as nvidia-smi reports it (> 0)"},
    KeySpec{"gpu", "hbm_bandwidth", V::kBandwidth, true, 0, "3350GBps", "peak HBM bandwidth"},
    KeySpec{"gpu", "peak_flops", V::kMapping, true, 0, "",
            "dense peak math throughput per precision (no 2:4 sparsity)"},

    KeySpec{"gpu", "host_link", V::kMapping, false, 0, "",
            "the GPU's link to its host CPU and the host's share for this GPU (CPU offload "
            "needs it): PCIe Gen5 x16 on DGX H100/H200, NVLink-C2C on GB200"},
    KeySpec{"gpu.peak_flops", "fp32", V::kFlopRate, true, 0, "67TFLOPs", "non-tensor FP32"},
    KeySpec{"gpu.peak_flops", "tf32", V::kFlopRate, false, 0, "494.5TFLOPs",
            "tensor-core TF32 (kernels of float32_matmul_precision high need it)"},
    KeySpec{"gpu.peak_flops", "fp16", V::kFlopRate, true, 0, "989TFLOPs", "tensor-core FP16"},
    KeySpec{"gpu.peak_flops", "bf16", V::kFlopRate, false, 0, "989TFLOPs",
            "tensor-core BF16; none on Turing and older GPUs: leave it out, and a bf16 run is "
            "refused by name"},
    KeySpec{"gpu.peak_flops", "fp8", V::kFlopRate, false, 0, "1979TFLOPs",
            "tensor-core FP8, Hopper and later (training.fp8_format needs it)"},
    KeySpec{"gpu.peak_flops", "fp4", V::kFlopRate, false, 0, "9800TFLOPs",
            "tensor-core FP4 (Blackwell): shown only, no kernel runs in FP4 yet"},

    KeySpec{"gpu.host_link", "bandwidth", V::kBandwidth, true, 0, "55GBps",
            "host-device copy bandwidth per GPU, per direction (> 0)"},
    KeySpec{"gpu.host_link", "latency", V::kTime, true, 0, "10us", "per host-device copy"},
    KeySpec{"gpu.host_link", "host_memory", V::kBytes, true, 0, "256GB",
            "host memory for this GPU's process: the host's DRAM / its GPUs (> 0)"},
    KeySpec{"gpu.host_link", "optimizer_bandwidth", V::kBandwidth, true, 0, "45GBps",
            "memory bandwidth the host CPU's AdamW reaches for this GPU (> 0; a step of n "
            "parameters moves 28 n bytes); measure: `traintwin profile` on the host, its "
            "adamw_step row's bytes / time"},
    KeySpec{"node", "gpus_per_node", V::kInteger, true, 1, "8",
            "GPUs of one NVLink domain: a DGX node (8) or a GB200 NVL72 rack (72)"},
    KeySpec{"node", "gpus_per_tray", V::kInteger, false, 1, "4",
            "GPUs of one host (compute tray) of the domain; default gpus_per_node; must divide "
            "it"},
    KeySpec{"node", "gpus_used_per_node", V::kInteger, false, 1, "64",
            "GPUs of each domain the job's ranks take, whole trays from tray 0 (the rest are "
            "spares); default gpus_per_node"},
    KeySpec{"node", "nvlink_bandwidth", V::kBandwidth, true, 0, "450GBps",
            "NVLink bandwidth per GPU, per direction"},
    KeySpec{"node", "nvlink_latency", V::kTime, true, 0, "1us",
            "one GPU-to-GPU transfer through NVSwitch"},
    KeySpec{"node", "nvls", V::kBoolean, true, 0, "true",
            "NVLink SHARP (in-switch multicast and reductions)"},
    KeySpec{"node", "collectives", V::kText, false, 0, "nccl",
            "the library that runs the collectives (allowed: nccl, mpi): nccl, the default, "
            "times them with NCCL's tuner (protocols LL, LL128, Simple); mpi, a host's MPI, "
            "as rings of link latency + step overhead per step"},

    KeySpec{"nic", "nics_per_node", V::kInteger, true, 1, "8",
            "NICs of one NVLink domain = rails; must divide gpus_per_node"},
    KeySpec{"nic", "line_rate", V::kBandwidth, true, 0, "400Gbps", "per NIC, per direction"},
    KeySpec{"nic", "latency", V::kTime, true, 0, "600ns", "per NIC crossed"},

    KeySpec{"fabric", "kind", V::kText, true, 0, "rail_optimized_fat_tree",
            "the fabric's shape (allowed: rail_optimized_fat_tree, dual_plane_rail_fat_tree): "
            "dual_plane_rail_fat_tree (Alibaba HPN, SimAI's DualToR_DualPlane) gives every NIC "
            "two ports of nic.line_rate / 2, port p to the leaf of its rail in plane p, each "
            "plane its own leaves and spines; traffic is split evenly over the ports that are "
            "up"},
    KeySpec{"fabric", "ports_down", V::kText, false, 0, "node1-nic0-plane1, node3-nic2-plane0",
            "dual_plane_rail_fat_tree only: NIC ports whose cable is down, comma-separated "
            "node<i>-nic<r>-plane<p> (p 0 or 1); that NIC sends and receives on its other "
            "plane only (half its bandwidth)"},
    KeySpec{"fabric", "tiers", V::kInteger, true, 1, "3",
            "switch tiers: 2 (leaf-spine) or 3 (leaf-spine-core)"},
    KeySpec{"fabric", "nodes_per_scalable_unit", V::kInteger, true, 1, "32",
            "NVLink domains per scalable unit (SU); at most a leaf's ports toward nodes"},
    KeySpec{"fabric", "leaf_switches_per_scalable_unit", V::kInteger, true, 1, "8",
            "leaves per SU, one per rail (and plane): must equal nic.nics_per_node (x 2 for "
            "dual_plane_rail_fat_tree)"},
    KeySpec{"fabric", "switch_radix", V::kInteger, true, 2, "64",
            "ports per switch (even for 3 tiers)"},
    KeySpec{"fabric", "oversubscription", V::kRatio, true, 0, "1:1",
            "leaf ports down:up (\"1:1\" = non-blocking)"},
    KeySpec{"fabric", "spine_oversubscription", V::kRatio, false, 0, "1:1",
            "three tiers only: spine ports down:up (\"1:1\" = non-blocking, the default; "
            "\"2:1\" gives each spine half as many cables to the cores as to its leaves, so "
            "traffic between pods shares half the capacity)"},
    KeySpec{"fabric", "link_rate", V::kBandwidth, true, 0, "400Gbps",
            "switch-to-switch links, per direction"},
    KeySpec{"fabric", "hop_latency", V::kTime, true, 0, "130ns", "per switch crossed"},

    KeySpec{"node_groups", "name", V::kText, true, 0, "h200",
            "the group's name (in messages and the summary)"},
    KeySpec{"node_groups", "nodes", V::kInteger, true, 1, "16",
            "NVLink domains of the group, taken in node order after the groups before it"},
    KeySpec{"node_groups", "node_template", V::kText, true, 0, "dgx-h200-superpod.yaml",
            "a topology file (relative to this one) whose gpu, NVLink domain and NICs the "
            "group's nodes have (its fabric is not used); its node.gpus_per_node, "
            "gpus_used_per_node, gpus_per_tray, collectives and nic.nics_per_node must equal "
            "this file's, its NVLink and NIC rates may differ (DGX A100 beside DGX H100)"},

    KeySpec{"link_overrides", "link", V::kText, true, 0, "rail0-leaf1-spine3-c0",
            "a link as the platform names it (node<i>-nic<r>-up / -down, "
            "rail<r>-leaf<l>-spine<s>-c<k>-up / -down, rail<r>-spine<s>-core<c>-c<k>-up / -down, "
            "node<i>-gpu<j>-nvlink-up / -down; dual-plane: node<i>-nic<r>-plane<p>, "
            "rail<r>-plane<p>-leaf...), or a cable: the name without -up / -down (both "
            "directions); an element past the nodes, leaves, spines or cores a job's platform "
            "builds carries none of its traffic and is left out of that job"},
    KeySpec{"link_overrides", "bandwidth", V::kBandwidth, false, 0, "200Gbps",
            "the link's bandwidth per direction (> 0; absolute, in place of its tier's rate)"},
    KeySpec{"link_overrides", "latency", V::kTime, false, 0, "3us",
            "the link's whole latency (in place of its share: nic.latency + fabric.hop_latency "
            "/ 2 for a NIC link, fabric.hop_latency between switches)"},
    KeySpec{"link_overrides", "down", V::kBoolean, false, 0, "true",
            "the cable is down, both directions (a switch-to-switch cable: routes avoid it; a "
            "dual-plane NIC port: as fabric.ports_down; a NIC of a single-plane fabric or an "
            "NVLink: refused, its GPUs unreachable)"},
    KeySpec{"switch_overrides", "switch", V::kText, true, 0, "rail0-spine3",
            "a fabric switch as topologies/graph.hpp names it: rail<r>-leaf<l>, "
            "rail<r>-spine<s>, rail<r>-core<c> (dual-plane: rail<r>-plane<p>-spine<s>, ...)"},
    KeySpec{"switch_overrides", "hop_latency", V::kTime, false, 0, "500ns",
            "the switch's hop latency (in place of fabric.hop_latency for routes through it)"},
    KeySpec{"switch_overrides", "down", V::kBoolean, false, 0, "true",
            "the switch is down: routes avoid a spine or core as a subnet manager's would "
            "(sim/platform.hpp); a leaf down is refused on a single-plane fabric (its nodes "
            "unreachable) and takes its nodes' ports of that plane down on a dual-plane one"},
};


std::string allowed(const KeySpec& k) {
  switch (k.type) {
    case V::kInteger: return fmt::format(">= {}", k.min);
    case V::kBoolean: return "true, false";
    case V::kText: return "non-empty";
    case V::kRatio: return "positive integers down:up";
    default: return "";
  }
}

}  // namespace

std::string_view to_string(ValueType t) {
  switch (t) {
    case V::kMapping: return "mapping";
    case V::kList: return "list";
    case V::kText:
    case V::kFreeText: return "text";
    case V::kInteger: return "integer";
    case V::kBoolean: return "boolean";
    case V::kBytes: return "size";
    case V::kBandwidth: return "bandwidth";
    case V::kTime: return "time";
    case V::kFlopRate: return "FLOP rate";
    case V::kRatio: return "ratio";
  }
  return "?";
}

std::span<const KeySpec> keys() { return kKeys; }

std::vector<KeySpec> keys_of(std::string_view section) {
  std::vector<KeySpec> out;
  for (const KeySpec& k : kKeys) {
    if (k.section == section) out.push_back(k);
  }
  return out;
}

const KeySpec& key(std::string_view section, std::string_view name) {
  for (const KeySpec& k : kKeys) {
    if (k.section == section && k.key == name) return k;
  }
  throw InvalidArgument(fmt::format("topology schema: no key '{}' in section '{}'", name,
                                    section.empty() ? "(top level)" : section));
}

}  // namespace traintwin::topology_schema

namespace traintwin {

std::string topology_key_reference() {
  using topology_schema::KeySpec;
  using topology_schema::allowed;
  std::string out;
  std::string_view section = "(none)";
  for (const KeySpec& k : topology_schema::keys()) {
    if (k.section != section) {
      if (section != "(none)") out += "\n";
      section = k.section;
      out += section.empty() ? std::string("Top level") : fmt::format("`{}`", section);
      out += "\n\n| key | type | required | allowed | example | description |\n"
             "| --- | --- | --- | --- | --- | --- |\n";
    }
    out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", markdown_code(k.key),
                       topology_schema::to_string(k.type), k.required ? "yes" : "no",
                       markdown_cell(allowed(k)), markdown_code(k.example), markdown_cell(k.doc));
  }
  return out;
}

std::string with_topology_key_reference(const std::string& readme) {
  return with_generated_section(readme, kTopologyReferenceBegin, kTopologyReferenceEnd,
                                topology_key_reference());
}

}  // namespace traintwin
