// Tests of topologies/topology: the shipped topology files, the loader's errors (with file and
// line), and the cluster-size check.
#include "topologies/topology.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tests/bounded_child.hpp"
#include "tests/config_error_of.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

namespace fs = std::filesystem;

const fs::path kTopologies = fs::path(TRAINTWIN_SOURCE_DIR) / "topologies";
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

using testing::config_error_of;

/// A valid file; tests break one line of it. Line numbers are 1-based as in messages.
const std::string kValid =
    "name: test-pod\n"                        // 1
    "gpu:\n"                                  // 2
    "  name: H100-SXM-80GB\n"                 // 3
    "  memory: 80GiB\n"                       // 4
    "  hbm_bandwidth: 3350GBps\n"             // 5
    "  peak_flops:\n"                         // 6
    "    fp32: 67TFLOPs\n"                    // 7
    "    fp16: 989TFLOPs\n"                   // 8
    "    bf16: 989TFLOP/s\n"                  // 9
    "node:\n"                                 // 10
    "  gpus_per_node: 8\n"                    // 11
    "  nvlink_bandwidth: 450GBps\n"           // 12
    "  nvlink_latency: 1us\n"                 // 13
    "  nvls: true\n"                          // 14
    "nic:\n"                                  // 15
    "  nics_per_node: 8\n"                    // 16
    "  line_rate: 400Gbps\n"                  // 17
    "  latency: 600ns\n"                      // 18
    "fabric:\n"                               // 19
    "  kind: rail_optimized_fat_tree\n"       // 20
    "  tiers: 2\n"                            // 21
    "  nodes_per_scalable_unit: 32\n"         // 22
    "  leaf_switches_per_scalable_unit: 8\n"  // 23
    "  switch_radix: 64\n"                    // 24
    "  oversubscription: 1:1\n"               // 25
    "  link_rate: 400Gbps\n"                  // 26
    "  hop_latency: 130ns\n";                 // 27

/// kValid with the first occurrence of `from` replaced by `to` (which must exist).
std::string with(const std::string& from, const std::string& to) {
  std::string s = kValid;
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

std::string error_for(const std::string& text) {
  return config_error_of([&] { parse_topology(text, "t.yaml"); });
}

std::vector<fs::path> shipped_topologies() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kTopologies)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A document starting at ',' (outside [...] or {...}) made yaml-cpp 0.7's LoadAll loop forever
// with growing memory: refused naming line and column (in a bounded child, in case it regresses).
TEST(TopologyErrors, CommaThatHangsYamlCppIsRefused) {
  const auto r = testing::run_bounded(
      [] { return config_error_of([] { parse_topology("{\"name\": \"x\"},\n", "t.yaml"); }); }, 20,
      uint64_t{1} << 30);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_THAT(r.text, AllOf(HasSubstr("t.yaml:1:14: ','"), HasSubstr("cannot start a YAML node")));
}

TEST(ShippedTopologies, EveryFileLoadsAndIsConsistent) {
  const auto files = shipped_topologies();
  ASSERT_GE(files.size(), 3u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    TopologySpec t;
    ASSERT_NO_THROW(t = load_topology(file));
    EXPECT_EQ(t.name, file.stem().string());
    EXPECT_EQ(t.source, file);
    EXPECT_FALSE(t.description.empty());
    EXPECT_GT(t.gpu.memory_bytes, 0);
    EXPECT_GT(t.gpu.hbm_bandwidth_Bps, 0);
    // Tensor-core 16-bit math is at least the vector FP32 rate; bf16 is 0 on a GPU without BF16
    // tensor cores (Turing: sailor-mit-titan-rtx.yaml, sailor-mit-rtx2080.yaml).
    EXPECT_GE(t.gpu.peak.fp16_FLOPs, t.gpu.peak.fp32_FLOPs);
    if (t.gpu.peak.bf16_FLOPs != 0) EXPECT_GE(t.gpu.peak.bf16_FLOPs, t.gpu.peak.fp32_FLOPs);
    EXPECT_EQ(t.fabric.leaf_switches_per_scalable_unit, fabric_rails(t) * t.fabric.planes);
    // One node, one SU and the full fabric fit; one node more does not.
    EXPECT_NO_THROW(check_cluster_size(t, t.node.gpus_per_node));
    EXPECT_NO_THROW(check_cluster_size(t, t.fabric.nodes_per_scalable_unit * t.node.gpus_per_node));
    EXPECT_NO_THROW(check_cluster_size(t, max_nodes(t) * t.node.gpus_per_node));
    EXPECT_THROW(check_cluster_size(t, (max_nodes(t) + 1) * t.node.gpus_per_node), ConfigError);
    const std::string summary = describe_topology(t);
    EXPECT_THAT(summary, AllOf(::testing::StartsWith(t.name + ": "), HasSubstr("\n  gpu "),
                               HasSubstr("\n  fabric "), ::testing::EndsWith(" GPUs\n")));
  }
}

// link_overrides and switch_overrides: values with units read per item, names checked against
// the largest cluster of the file (kValid: 8 SU of 32 nodes, 32 spines per rail), errors naming
// the file, the item's index and key, the closest name and how names look; the shipped example.
TEST(ParseTopology, LinkAndSwitchOverrides) {
  const std::string ok = kValid +
                         "link_overrides:\n"                      // 28
                         "  - link: rail0-leaf1-spine3-c0\n"      // 29
                         "    bandwidth: 200Gbps\n"               // 30
                         "  - {link: node3-nic2-up, latency: 3us}\n"  // 31
                         "switch_overrides:\n"                    // 32
                         "  - {switch: rail0-spine3, down: true}\n"   // 33
                         "  - {switch: rail1-core2, hop_latency: 500ns}\n";
  // Two tiers have no cores: the last item is refused; without it the file loads.
  EXPECT_THAT(error_for(ok), AllOf(HasSubstr("t.yaml:34: switch_overrides[1].switch"),
                                   HasSubstr("'rail1-core2': no such switch"),
                                   HasSubstr("names look like rail0-leaf0, rail0-spine0 and "
                                             "node0-nvswitch"),
                                   HasSubstr("spines 0..31 per rail, nodes 0..255")));
  const std::string good = ok.substr(0, ok.rfind("  - {switch: rail1-core2"));
  const TopologySpec t = parse_topology(good, "t.yaml");
  ASSERT_EQ(t.link_overrides.size(), 2u);
  EXPECT_EQ(t.link_overrides[0].link, "rail0-leaf1-spine3-c0");
  EXPECT_DOUBLE_EQ(*t.link_overrides[0].bandwidth_Bps, 25e9);
  EXPECT_FALSE(t.link_overrides[0].latency_s);
  EXPECT_EQ(t.link_overrides[0].where, "t.yaml:29: link_overrides[0]");
  EXPECT_DOUBLE_EQ(*t.link_overrides[1].latency_s, 3e-6);
  ASSERT_EQ(t.switch_overrides.size(), 1u);
  EXPECT_TRUE(t.switch_overrides[0].down);
  EXPECT_TRUE(t.has_overrides());
  EXPECT_FALSE(parse_topology(kValid, "t.yaml").has_overrides());
  EXPECT_THAT(describe_topology(t),
              AllOf(HasSubstr("\n  link    rail0-leaf1-spine3-c0: 200 Gb/s\n"),
                    HasSubstr("\n  link    node3-nic2-up: 3 us latency\n"),
                    HasSubstr("\n  switch  rail0-spine3: down\n")));

  const auto item = [](const std::string& list, const std::string& entry) {
    return kValid + list + ":\n  - " + entry + "\n";
  };
  EXPECT_THAT(error_for(item("link_overrides", "{link: rail0-leaf1-spine33-c0, down: true}")),
              AllOf(HasSubstr("t.yaml:29: link_overrides[0].link"),
                    HasSubstr("'rail0-leaf1-spine33-c0': no such link in the fabric of 256 nodes"),
                    HasSubstr("did you mean rail0-leaf1-spine3-c0?"),
                    HasSubstr("names look like node0-gpu0-nvlink-up")));
  EXPECT_THAT(error_for(item("switch_overrides", "{switch: rail0-spin3, down: true}")),
              AllOf(HasSubstr("switch_overrides[0].switch: 'rail0-spin3': no such switch"),
                    HasSubstr("did you mean rail0-spine3?")));
  EXPECT_THAT(error_for(item("link_overrides", "{link: node0-nic0}")),
              HasSubstr("link_overrides[0]: link 'node0-nic0': no setting (allowed: at least one "
                        "of bandwidth, latency, down)"));
  EXPECT_THAT(error_for(item("switch_overrides", "{switch: rail0-spine0}")),
              HasSubstr("no setting (allowed: at least one of hop_latency, down)"));
  EXPECT_THAT(error_for(item("link_overrides", "{link: node0-nic0, bandwidth: 200}")),
              AllOf(HasSubstr("t.yaml:29: link_overrides.bandwidth"), HasSubstr("Gbps")));
  EXPECT_THAT(error_for(item("link_overrides", "{link: node0-nic0, latency: 3 parsecs}")),
              HasSubstr("link_overrides.latency"));
  EXPECT_THAT(error_for(item("link_overrides", "{link: node0-nic0, bandwidth: 0Gbps}")),
              HasSubstr("must be greater than zero"));
  EXPECT_THAT(error_for(item("link_overrides", "{link: node0-nic0-up, down: true}")),
              AllOf(HasSubstr("link_overrides[0].down: 'node0-nic0-up' is one direction"),
                    HasSubstr("allowed: the cable's name, node0-nic0")));
  EXPECT_THAT(error_for(item("link_overrides", "{link: node0-nic0, speed: 1Gbps}")),
              HasSubstr("unknown key"));
  EXPECT_THAT(error_for(kValid + "link_overrides:\n  - {link: node0-nic0, latency: 1us}\n"
                                 "  - {link: node0-nic0-down, bandwidth: 100Gbps}\n"),
              AllOf(HasSubstr("link_overrides[1].link: 'node0-nic0-down': link node0-nic0-down "
                              "is given twice (first at t.yaml:29: link_overrides[0])")));
  EXPECT_THAT(error_for(item("switch_overrides", "{switch: node0-nvswitch, hop_latency: 1us}")),
              HasSubstr("is an NVSwitch"));
  // A plane only on a dual-plane fabric.
  EXPECT_THAT(error_for(item("link_overrides", "{link: node0-nic0-plane1, down: true}")),
              HasSubstr("no such link"));

  const TopologySpec shipped = load_topology(kTopologies / "dgx-h100-superpod-spine-down.yaml");
  EXPECT_EQ(shipped.link_overrides.size(), 3u);
  EXPECT_EQ(shipped.switch_overrides.at(0).name, "rail0-spine3");
}

// The dual-plane fabric (Alibaba HPN, SimAI's DualToR_DualPlane): two planes, one leaf per rail
// and plane, NIC ports down by name; what a single-plane fabric or a wrong name gets refused.
TEST(ShippedTopologies, HpnDualPlane) {
  const TopologySpec t = load_topology(kTopologies / "hpn-h100-dual-plane.yaml");
  EXPECT_EQ(t.fabric.kind, "dual_plane_rail_fat_tree");
  EXPECT_EQ(t.fabric.planes, 2);
  EXPECT_EQ(t.fabric.leaf_switches_per_scalable_unit, 16);
  EXPECT_TRUE(t.fabric.ports_down.empty());
  // Each plane has its own spines: 64 leaves per plane / 8 rails = 8 segments of 32 nodes.
  EXPECT_EQ(max_nodes(t), 256);
  EXPECT_THAT(describe_topology(t), HasSubstr("dual-plane (2 ports of 200 Gb/s per NIC"));
  const TopologySpec down = load_topology(kTopologies / "hpn-h100-dual-plane-port-down.yaml");
  EXPECT_EQ(down.fabric.ports_down, (std::vector<NicPort>{{1, 0, 1}}));
  EXPECT_EQ(down.fabric.ports_down.at(0).name(), "node1-nic0-plane1");

  const std::string dual = with("  kind: rail_optimized_fat_tree\n",
                                "  kind: dual_plane_rail_fat_tree\n");
  auto dual_with = [&](const std::string& from, const std::string& to) {
    std::string s = dual;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_THAT(error_for(dual), AllOf(HasSubstr("t.yaml:23: fabric.leaf_switches_per_scalable_unit"),
                                     HasSubstr("nic.nics_per_node x 2 planes = 16")));
  const std::string ok = dual_with("unit: 8\n", "unit: 16\n");
  EXPECT_EQ(parse_topology(ok, "t.yaml").fabric.planes, 2);
  const std::string bad_port = ok + "  ports_down: node1-nic8-plane0\n";
  EXPECT_THAT(error_for(bad_port), AllOf(HasSubstr("t.yaml:28: fabric.ports_down"),
                                         HasSubstr("'node1-nic8-plane0' is not a NIC port"),
                                         HasSubstr("r 0..7, p 0..1")));
  const TopologySpec two =
      parse_topology(ok + "  ports_down: node1-nic0-plane1, node3-nic2-plane0\n", "t.yaml");
  EXPECT_EQ(two.fabric.ports_down, (std::vector<NicPort>{{1, 0, 1}, {3, 2, 0}}));
  EXPECT_THAT(error_for(kValid + "  ports_down: node1-nic0-plane1\n"),
              AllOf(HasSubstr("t.yaml:28: fabric.ports_down"), HasSubstr("has one port"),
                    HasSubstr("allowed: kind dual_plane_rail_fat_tree")));
  EXPECT_THAT(error_for(with("  kind: rail_optimized_fat_tree\n", "  kind: torus\n")),
              HasSubstr("(allowed: rail_optimized_fat_tree, dual_plane_rail_fat_tree)"));
}

TEST(ShippedTopologies, DgxH100SuperPod) {
  const TopologySpec t = load_topology(kTopologies / "dgx-h100-superpod.yaml");
  EXPECT_EQ(t.gpu.name, "H100-SXM-80GB");
  EXPECT_DOUBLE_EQ(t.gpu.memory_bytes, 81559 * kMiB);
  EXPECT_DOUBLE_EQ(t.gpu.hbm_bandwidth_Bps, 3350e9);
  EXPECT_DOUBLE_EQ(t.gpu.peak.bf16_FLOPs, 989e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak.fp16_FLOPs, 989e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak.fp32_FLOPs, 67e12);
  ASSERT_TRUE(t.gpu.peak.tf32_FLOPs.has_value());
  EXPECT_DOUBLE_EQ(*t.gpu.peak.tf32_FLOPs, 494.5e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak_FLOPs(Precision::kBf16), 989e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak_FLOPs(Precision::kFp32), 67e12);
  EXPECT_EQ(t.node.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(t.node.nvlink_bandwidth_Bps, 450e9);
  EXPECT_DOUBLE_EQ(t.node.nvlink_latency_s, 1e-6);
  EXPECT_TRUE(t.node.nvls);
  EXPECT_EQ(t.nic.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(t.nic.line_rate_Bps, 50e9);  // 400 Gb/s
  EXPECT_DOUBLE_EQ(t.nic.latency_s, 600e-9);
  EXPECT_EQ(t.fabric.kind, "rail_optimized_fat_tree");
  EXPECT_EQ(t.fabric.tiers, 3);
  EXPECT_EQ(t.fabric.nodes_per_scalable_unit, 32);
  EXPECT_EQ(t.fabric.leaf_switches_per_scalable_unit, 8);
  EXPECT_EQ(t.fabric.switch_radix, 64);
  EXPECT_DOUBLE_EQ(t.fabric.oversubscription(), 1.0);
  EXPECT_DOUBLE_EQ(t.fabric.link_rate_Bps, 50e9);
  EXPECT_DOUBLE_EQ(t.fabric.hop_latency_s, 130e-9);
  EXPECT_EQ(leaf_down_ports(t.fabric), 32);
  EXPECT_EQ(max_leaf_switches(t.fabric), 64 * 32);
  EXPECT_EQ(max_nodes(t), 8192);  // 256 SU
}

TEST(ShippedTopologies, DgxA100SuperPodIsSeleneLike) {
  const TopologySpec t = load_topology(kTopologies / "dgx-a100-superpod.yaml");
  EXPECT_EQ(t.gpu.name, "A100-SXM-80GB");  // as calibration.yaml names it
  EXPECT_DOUBLE_EQ(t.gpu.memory_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(t.gpu.hbm_bandwidth_Bps, 2039e9);
  EXPECT_DOUBLE_EQ(t.gpu.peak.fp16_FLOPs, 312e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak.bf16_FLOPs, 312e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak.fp32_FLOPs, 19.5e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak.tf32_FLOPs.value_or(0), 156e12);
  EXPECT_DOUBLE_EQ(t.node.nvlink_bandwidth_Bps, 300e9);
  EXPECT_FALSE(t.node.nvls);
  EXPECT_EQ(t.nic.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(t.nic.line_rate_Bps, 25e9);  // 200 Gb/s HDR
  EXPECT_EQ(t.fabric.tiers, 3);
  EXPECT_EQ(t.fabric.nodes_per_scalable_unit, 20);
  EXPECT_EQ(t.fabric.switch_radix, 40);
  EXPECT_DOUBLE_EQ(t.fabric.link_rate_Bps, 25e9);
  EXPECT_EQ(leaf_down_ports(t.fabric), 20);
  EXPECT_EQ(max_nodes(t), 2000);  // 40 * 20 leaves / 8 rails = 100 SU
  // Every cluster size of shared/validation/calibration.yaml fits (narayanan2021 up to 3072).
  for (int64_t gpus : {8, 32, 64, 128, 512, 1536, 3072}) {
    EXPECT_NO_THROW(check_cluster_size(t, gpus)) << gpus;
  }
}

TEST(ShippedTopologies, DgxH200SuperPod) {
  const TopologySpec t = load_topology(kTopologies / "dgx-h200-superpod.yaml");
  EXPECT_EQ(t.gpu.name, "H200-SXM-141GB");
  EXPECT_DOUBLE_EQ(t.gpu.memory_bytes, 143771 * kMiB);
  EXPECT_DOUBLE_EQ(t.gpu.hbm_bandwidth_Bps, 4800e9);
  EXPECT_DOUBLE_EQ(t.gpu.peak.bf16_FLOPs, 989e12);
  EXPECT_DOUBLE_EQ(t.node.nvlink_bandwidth_Bps, 450e9);
  EXPECT_TRUE(t.node.nvls);
  EXPECT_DOUBLE_EQ(t.nic.line_rate_Bps, 50e9);
  EXPECT_EQ(t.fabric.nodes_per_scalable_unit, 32);
  EXPECT_EQ(max_nodes(t), 8192);
}

// FP8: H100 and H200 give their dense FP8 peak (datasheet 1979 TFLOP/s); the A100 has none, and
// FP8 training on it is refused naming the GPU; mxfp8 needs Blackwell.
TEST(ShippedTopologies, Fp8PeakAndSupport) {
  const TopologySpec h100 = load_topology(kTopologies / "dgx-h100-superpod.yaml");
  const TopologySpec h200 = load_topology(kTopologies / "dgx-h200-superpod.yaml");
  const TopologySpec a100 = load_topology(kTopologies / "dgx-a100-superpod.yaml");
  EXPECT_EQ(h100.gpu.peak_FLOPs(Precision::kFp8), 1979e12);
  EXPECT_EQ(h200.gpu.peak_FLOPs(Precision::kFp8), 1979e12);
  EXPECT_EQ(a100.gpu.peak_FLOPs(Precision::kFp8), 0.0);
  EXPECT_FALSE(a100.gpu.peak.fp8_FLOPs.has_value());
  TrainingConfig t;
  EXPECT_NO_THROW(check_gpu_supports(a100, t));  // no FP8 asked
  t.fp8_format = Fp8Format::kHybrid;
  EXPECT_NO_THROW(check_gpu_supports(h100, t));
  try {
    check_gpu_supports(a100, t);
    ADD_FAILURE() << "FP8 on A100 accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("training.fp8_format: hybrid: A100-SXM-80GB has no FP8"));
  }
  t.fp8_recipe = Fp8Recipe::kMxfp8;
  EXPECT_THROW(check_gpu_supports(h100, t), ConfigError);
}

TEST(ShippedTopologies, Tf32PeakAndSupport) {
  const TopologySpec h100 = load_topology(kTopologies / "dgx-h100-superpod.yaml");
  EXPECT_EQ(h100.gpu.peak_FLOPs(Precision::kTf32), 494.5e12);
  TrainingConfig t;
  t.precision = Precision::kFp32;
  t.float32_matmul_precision = Float32MatmulPrecision::kHigh;
  EXPECT_NO_THROW(check_gpu_supports(h100, t));
  TopologySpec no_tf32 = h100;
  no_tf32.gpu.peak.tf32_FLOPs.reset();
  EXPECT_EQ(no_tf32.gpu.peak_FLOPs(Precision::kTf32), 0.0);
  try {
    check_gpu_supports(no_tf32, t);
    ADD_FAILURE() << "TF32 without a TF32 peak accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("training.float32_matmul_precision: high"));
    EXPECT_THAT(e.what(), HasSubstr("gpu.peak_flops.tf32"));
  }
  t.float32_matmul_precision = Float32MatmulPrecision::kMedium;  // bf16 tensor cores
  EXPECT_NO_THROW(check_gpu_supports(no_tf32, t));
}

// The host link (gpu.host_link, CPU offload): the shipped DGX H100/H200 files give PCIe Gen5
// x16 (55 GB/s per direction measured of 64 raw) and 2 TB / 8 GPUs of host memory, GB200 its
// NVLink-C2C (900 GB/s bidirectional: 450 per direction) and 480 GB / 2 GPUs; the A100 file
// none, and offload on it is refused naming the key. A parsed link needs all four keys, each
// with its unit and > 0.
TEST(ShippedTopologies, HostLinkAndOffloadSupport) {
  const TopologySpec h100 = load_topology(kTopologies / "dgx-h100-superpod.yaml");
  const TopologySpec h200 = load_topology(kTopologies / "dgx-h200-superpod.yaml");
  const TopologySpec gb200 = load_topology(kTopologies / "gb200-nvl72-superpod.yaml");
  const TopologySpec a100 = load_topology(kTopologies / "dgx-a100-superpod.yaml");
  for (const TopologySpec* t : {&h100, &h200}) {
    ASSERT_TRUE(t->gpu.host_link.has_value()) << t->name;
    EXPECT_DOUBLE_EQ(t->gpu.host_link->bandwidth_Bps, 55e9);
    EXPECT_DOUBLE_EQ(t->gpu.host_link->host_memory_bytes, 256 * kGiB);
  }
  ASSERT_TRUE(gb200.gpu.host_link.has_value());
  EXPECT_DOUBLE_EQ(gb200.gpu.host_link->bandwidth_Bps, 450e9);
  EXPECT_DOUBLE_EQ(gb200.gpu.host_link->host_memory_bytes, 240e9);
  EXPECT_FALSE(a100.gpu.host_link.has_value());
  TrainingConfig t;
  t.use_distributed_optimizer = true;
  t.optimizer_cpu_offload = true;
  EXPECT_NO_THROW(check_gpu_supports(h100, t));
  try {
    check_gpu_supports(a100, t);
    ADD_FAILURE() << "optimizer offload without a host link accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("training.optimizer_cpu_offload"));
    EXPECT_THAT(e.what(), HasSubstr("gives no gpu.host_link for A100-SXM-80GB"));
  }
  TrainingConfig act;
  act.cpu_offloading = true;
  EXPECT_THROW(check_gpu_supports(a100, act), ConfigError);

  const std::string link =
      "  host_link:\n"
      "    bandwidth: 64GBps\n"
      "    latency: 5us\n"
      "    host_memory: 128GiB\n"
      "    optimizer_bandwidth: 40GBps\n"
      "node:\n";
  const TopologySpec p = parse_topology(with("node:\n", link), "t.yaml");
  ASSERT_TRUE(p.gpu.host_link.has_value());
  EXPECT_DOUBLE_EQ(p.gpu.host_link->bandwidth_Bps, 64e9);
  EXPECT_DOUBLE_EQ(p.gpu.host_link->latency_s, 5e-6);
  EXPECT_DOUBLE_EQ(p.gpu.host_link->host_memory_bytes, 128 * kGiB);
  EXPECT_DOUBLE_EQ(p.gpu.host_link->optimizer_bandwidth_Bps, 40e9);
  std::string missing = link;
  missing.erase(missing.find("    latency"), std::string("    latency: 5us\n").size());
  EXPECT_THAT(error_for(with("node:\n", missing)), HasSubstr("latency"));
  std::string zero = link;
  zero.replace(zero.find("64GBps"), 6, "0GBps");
  EXPECT_THAT(error_for(with("node:\n", zero)), HasSubstr("must be greater than zero"));
}

TEST(ParseTopology, ValidTextAndOptionalKeys) {
  const TopologySpec t = parse_topology(kValid, "t.yaml");
  EXPECT_EQ(t.name, "test-pod");
  EXPECT_TRUE(t.description.empty());
  EXPECT_TRUE(t.source.empty());
  EXPECT_FALSE(t.gpu.peak.tf32_FLOPs.has_value());
  EXPECT_DOUBLE_EQ(t.gpu.memory_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(t.gpu.peak.bf16_FLOPs, 989e12);
  const TopologySpec d =
      parse_topology(with("name: test-pod\n", "name: test-pod\ndescription: a pod\n"), "t.yaml");
  EXPECT_EQ(d.description, "a pod");
  // Quoted values, spaces before the unit and the other spellings are fine.
  const TopologySpec q =
      parse_topology(with("  line_rate: 400Gbps\n", "  line_rate: \"400 Gb/s\"\n"), "t.yaml");
  EXPECT_DOUBLE_EQ(q.nic.line_rate_Bps, 50e9);
}

TEST(ParseTopology, TwoTierCapacityMatchesTheReferenceArchitecture) {
  // DGX H100 SuperPOD RA: two tiers of 64-port switches take up to 8 SU = 256 nodes.
  const TopologySpec t = parse_topology(kValid, "t.yaml");
  EXPECT_EQ(max_leaf_switches(t.fabric), 64);
  EXPECT_EQ(max_nodes(t), 256);
  EXPECT_NO_THROW(check_cluster_size(t, 2048));
  EXPECT_THAT(config_error_of([&] { check_cluster_size(t, 2056); }),
              AllOf(HasSubstr("num_gpus = 2056 needs 257 nodes"), HasSubstr("2-tier"),
                    HasSubstr("radix-64"), HasSubstr("at most 64 leaves"),
                    HasSubstr("= 8 scalable units = 256 nodes = 2048 GPUs")));
}

TEST(ParseTopology, UnknownKeyNamesFileLineAndAllowedKeys) {
  const std::string msg = error_for(with("  hbm_bandwidth:", "  hbm_bandwith:"));
  EXPECT_THAT(msg, AllOf(HasSubstr("t.yaml:5: gpu.hbm_bandwith: unknown key"),
                         HasSubstr("did you mean 'hbm_bandwidth'?"),
                         HasSubstr("(allowed: name, memory, hbm_bandwidth, peak_flops, "
                                   "host_link (optional))")));
  EXPECT_THAT(error_for(kValid + "color: green\n"),
              AllOf(HasSubstr("t.yaml:28: color: unknown key"), Not(HasSubstr("did you mean")),
                    HasSubstr("description (optional)")));
  // fp4 is a key since the GB200 file (Blackwell's FP4 peak); fp6 is not.
  EXPECT_THAT(
      error_for(with("    fp16:", "    fp6: 3958TFLOPs\n    fp16:")),
      AllOf(HasSubstr("t.yaml:8: gpu.peak_flops.fp6: unknown key"), HasSubstr("fp4 (optional)")));
}

TEST(ParseTopology, MissingKeyIsNamed) {
  EXPECT_THAT(error_for(with("  line_rate: 400Gbps\n", "")),
              AllOf(HasSubstr("t.yaml:15: nic: missing required key 'line_rate'"),
                    HasSubstr("(required: nics_per_node, line_rate, latency)")));
  EXPECT_THAT(error_for(with("name: test-pod\n", "")),
              HasSubstr("t.yaml:1: (top level): missing required key 'name'"));
  EXPECT_THAT(error_for(with("    fp32: 67TFLOPs\n", "")),
              HasSubstr("t.yaml:6: gpu.peak_flops: missing required key 'fp32'"));
  // bf16 may be left out: a GPU without BF16 tensor cores (Turing) has a bf16 peak of 0.
  EXPECT_EQ(parse_topology(with("    bf16: 989TFLOP/s\n", ""), "t.yaml").gpu.peak.bf16_FLOPs, 0.0);
}

TEST(ParseTopology, ValueWithoutUnitNamesKeyAndAllowedUnits) {
  EXPECT_THAT(error_for(with("400Gbps\n  latency", "400\n  latency")),
              AllOf(HasSubstr("t.yaml:17: nic.line_rate: \"400\" has no unit"),
                    HasSubstr("allowed: "), HasSubstr("Gbps")));
  EXPECT_THAT(error_for(with("80GiB", "80")),
              AllOf(HasSubstr("t.yaml:4: gpu.memory: \"80\" has no unit"), HasSubstr("GiB")));
  EXPECT_THAT(error_for(with("130ns", "130")),
              HasSubstr("t.yaml:27: fabric.hop_latency: \"130\" has no unit"));
  EXPECT_THAT(error_for(with("67TFLOPs", "67")),
              HasSubstr("t.yaml:7: gpu.peak_flops.fp32: \"67\" has no unit"));
}

TEST(ParseTopology, WrongUnitOrType) {
  EXPECT_THAT(error_for(with("nvlink_latency: 1us", "nvlink_latency: 1GBps")),
              HasSubstr("t.yaml:13: node.nvlink_latency: \"1GBps\" is a bandwidth, not a time"));
  EXPECT_THAT(error_for(with("nvls: true", "nvls: yes")),
              HasSubstr("t.yaml:14: node.nvls: \"yes\" is not a boolean (allowed: true, false)"));
  EXPECT_THAT(error_for(with("gpus_per_node: 8", "gpus_per_node: 8.0")),
              HasSubstr("t.yaml:11: node.gpus_per_node: \"8.0\" is not an integer"));
  EXPECT_THAT(error_for(with("gpus_per_node: 8", "gpus_per_node: 0")),
              HasSubstr("node.gpus_per_node: 0 is too small (allowed: >= 1)"));
  EXPECT_THAT(error_for(with("  memory: 80GiB", "  memory: [80GiB]")),
              HasSubstr("t.yaml:4: gpu.memory: expected a size such as 80GiB, got a list"));
  EXPECT_THAT(error_for(with("  memory: 80GiB", "  memory: 0GiB")),
              HasSubstr("gpu.memory: must be greater than zero"));
  EXPECT_THAT(error_for(with("nic:\n  nics_per_node: 8\n  line_rate: 400Gbps\n  latency: 600ns\n",
                             "nic: 8\n")),
              HasSubstr("t.yaml:15: nic: expected a mapping with keys nics_per_node"));
}

TEST(ParseTopology, FabricRules) {
  EXPECT_THAT(error_for(with("kind: rail_optimized_fat_tree", "kind: dragonfly")),
              HasSubstr("t.yaml:20: fabric.kind: unknown kind \"dragonfly\" "
                        "(allowed: rail_optimized_fat_tree, dual_plane_rail_fat_tree)"));
  EXPECT_THAT(error_for(with("tiers: 2", "tiers: 4")),
              HasSubstr("t.yaml:21: fabric.tiers: 4 tiers are not supported (allowed: 2, 3)"));
  EXPECT_THAT(error_for(with("oversubscription: 1:1", "oversubscription: 2.0")),
              HasSubstr("t.yaml:25: fabric.oversubscription: \"2.0\" is not a down:up ratio"));
  EXPECT_THAT(
      error_for(with("leaf_switches_per_scalable_unit: 8", "leaf_switches_per_scalable_unit: 4")),
      HasSubstr("one leaf per rail (allowed: nic.nics_per_node = 8)"));
  // 2:1 leaves 42 ports down: 32 nodes per SU still fit; 48 do not.
  const TopologySpec o =
      parse_topology(with("oversubscription: 1:1", "oversubscription: \"2:1\""), "t.yaml");
  EXPECT_DOUBLE_EQ(o.fabric.oversubscription(), 2.0);
  EXPECT_EQ(leaf_down_ports(o.fabric), 42);
  EXPECT_THAT(error_for(with("nodes_per_scalable_unit: 32", "nodes_per_scalable_unit: 33")),
              HasSubstr("t.yaml:22: fabric.nodes_per_scalable_unit: 33 nodes per scalable unit "
                        "do not fit a leaf with 32 ports toward nodes"));
  std::string odd_radix = with("tiers: 2\n", "tiers: 3\n");
  odd_radix.replace(odd_radix.find("switch_radix: 64"), 16, "switch_radix: 63");
  EXPECT_THAT(error_for(odd_radix),
              HasSubstr("t.yaml:24: fabric.switch_radix: a three-tier fat tree needs an even "
                        "radix"));
  EXPECT_THAT(error_for(with("nics_per_node: 8", "nics_per_node: 3")),
              HasSubstr("t.yaml:16: nic.nics_per_node: 3 NICs cannot be shared evenly"));
}

// fabric.spine_oversubscription: three tiers only (a two-tier spine has no uplinks), a ratio;
// 1:1 when absent.
TEST(ParseTopology, SpineOversubscriptionNeedsThreeTiers) {
  const TopologySpec plain = parse_topology(kValid, "t.yaml");
  EXPECT_EQ(plain.fabric.spine_oversubscription_down, 1);
  EXPECT_EQ(plain.fabric.spine_oversubscription_up, 1);
  const std::string spines = "  spine_oversubscription: \"2:1\"\n  link_rate:";
  EXPECT_THAT(error_for(with("  link_rate:", spines)),
              HasSubstr("t.yaml:26: fabric.spine_oversubscription: a spine's uplinks go to the "
                        "cores of a three-tier fat tree; this fabric has 2 tiers"));
  auto three_tiers = [](const std::string& spine_line) {
    std::string s = with("tiers: 2\n", "tiers: 3\n");
    s.insert(s.find("  link_rate:"), spine_line);
    return s;
  };
  const TopologySpec three =
      parse_topology(three_tiers("  spine_oversubscription: \"2:1\"\n"), "t.yaml");
  EXPECT_EQ(three.fabric.spine_oversubscription_down, 2);
  EXPECT_EQ(three.fabric.spine_oversubscription_up, 1);
  EXPECT_THAT(describe_topology(three), HasSubstr("leaves 1:1 (32 down, 32 up), spines 2:1,"));
  const std::string bad = three_tiers("  spine_oversubscription: 2.5\n");
  EXPECT_THAT(error_for(bad),
              HasSubstr("t.yaml:26: fabric.spine_oversubscription: \"2.5\" is not a down:up "
                        "ratio"));
}

TEST(ParseTopology, DuplicateKeysAndSyntaxErrors) {
  EXPECT_THAT(error_for(with("  nvls: true\n", "  nvls: true\n  nvls: false\n")),
              HasSubstr("t.yaml:15: node.nvls: duplicate key (first given on line 14)"));
  EXPECT_THAT(error_for(with("  memory: 80GiB\n", "  memory: [80GiB\n")), HasSubstr("t.yaml:"));
  EXPECT_THAT(error_for(with("  memory: 80GiB\n", "  memory: [80GiB\n")),
              HasSubstr("YAML syntax error"));
  EXPECT_THAT(error_for(""), HasSubstr("t.yaml:1: (top level): expected a mapping"));
  EXPECT_THAT(error_for("- a\n- b\n"), HasSubstr("expected a mapping with keys name"));
}

TEST(LoadTopology, MissingFileIsAConfigError) {
  EXPECT_THAT(config_error_of([] { load_topology(kTopologies / "no-such-pod.yaml"); }),
              AllOf(HasSubstr("no-such-pod.yaml"), HasSubstr("cannot open")));
}

TEST(CheckClusterSize, GoodAndBad) {
  const TopologySpec t = load_topology(kTopologies / "dgx-h100-superpod.yaml");
  EXPECT_NO_THROW(check_cluster_size(t, 8));
  EXPECT_NO_THROW(check_cluster_size(t, 128));  // calibration.yaml dgxc case
  EXPECT_NO_THROW(check_cluster_size(t, 1024));
  EXPECT_NO_THROW(check_cluster_size(t, 65536));  // 8192 nodes
  EXPECT_THAT(config_error_of([&] { check_cluster_size(t, 0); }),
              HasSubstr("num_gpus = 0 (allowed: a positive multiple of gpus_per_node = 8)"));
  EXPECT_THAT(config_error_of([&] { check_cluster_size(t, 100); }),
              HasSubstr("topology 'dgx-h100-superpod': num_gpus = 100 is not a multiple of "
                        "gpus_per_node = 8 (nearest: 96 or 104)"));
  EXPECT_THAT(config_error_of([&] { check_cluster_size(t, 4); }), HasSubstr("(nearest: 8)"));
  EXPECT_THAT(config_error_of([&] { check_cluster_size(t, 65544); }),
              AllOf(HasSubstr("needs 8193 nodes"), HasSubstr("3-tier"),
                    HasSubstr("at most 2048 leaves = 256 scalable units = 8192 nodes")));
}

}  // namespace
}  // namespace traintwin
