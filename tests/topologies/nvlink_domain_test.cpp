// Tests of the NVLink domain in topology files (topologies/topology.hpp): a node made of trays,
// the GPUs of each domain a job uses (GB200 NVL72 at 64 of 72), rank placement that skips the
// spare GPUs, the shipped GB200 NVL72 SuperPOD file, the graph built from it, and the errors of
// bad domain keys and of layouts whose TP groups leave the domain.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "topologies/graph.hpp"
#include "topologies/topology.hpp"
#include "tests/config_error_of.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

const fs::path kSource = fs::path(TRAINTWIN_SOURCE_DIR);
const fs::path kGb200 = kSource / "topologies" / "gb200-nvl72-superpod.yaml";

using testing::config_error_of;

/// A GB200-like file with the node section given; line 11 is the node's first key.
std::string with_node(const std::string& node_lines) {
  return "name: nvl\n"                  // 1
         "gpu:\n"                       // 2
         "  name: GB200-186GB\n"        // 3
         "  memory: 186GB\n"            // 4
         "  hbm_bandwidth: 8000GBps\n"  // 5
         "  peak_flops:\n"              // 6
         "    fp32: 80TFLOPs\n"         // 7
         "    fp16: 2450TFLOPs\n"       // 8
         "    bf16: 2450TFLOPs\n"       // 9
         "node:\n" +                    // 10
         node_lines +                   // 11 ..
         "  nvlink_bandwidth: 900GBps\n"
         "  nvlink_latency: 1us\n"
         "  nvls: true\n"
         "nic:\n"
         "  nics_per_node: 72\n"
         "  line_rate: 400Gbps\n"
         "  latency: 600ns\n"
         "fabric:\n"
         "  kind: rail_optimized_fat_tree\n"
         "  tiers: 3\n"
         "  nodes_per_scalable_unit: 8\n"
         "  leaf_switches_per_scalable_unit: 72\n"
         "  switch_radix: 64\n"
         "  oversubscription: 1:1\n"
         "  link_rate: 400Gbps\n"
         "  hop_latency: 130ns\n";
}

// The datasheet figures (topologies/gb200-nvl72-superpod.yaml header, [DS]): dense per GPU BF16
// 2450, FP8 4900, FP4 9800, TF32 1225, FP32 80 TFLOP/s; 186 GB HBM3e at 8 TB/s; NVLink 5 at
// 1.8 TB/s both ways = 900 GB/s per direction; 72 GPUs = 18 trays x 4; 64 used per rack.
TEST(Gb200Nvl72, PeaksMemoryAndDomainAsTheDatasheet) {
  const TopologySpec t = load_topology(kGb200);
  EXPECT_EQ(t.gpu.name, "GB200-186GB");
  EXPECT_DOUBLE_EQ(t.gpu.memory_bytes, 186e9);
  EXPECT_DOUBLE_EQ(t.gpu.hbm_bandwidth_Bps, 8e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak_FLOPs(Precision::kBf16), 2450e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak_FLOPs(Precision::kFp16), 2450e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak_FLOPs(Precision::kFp8), 4900e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak_FLOPs(Precision::kTf32), 1225e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak_FLOPs(Precision::kFp32), 80e12);
  ASSERT_TRUE(t.gpu.peak.fp4_FLOPs.has_value());
  EXPECT_DOUBLE_EQ(*t.gpu.peak.fp4_FLOPs, 9800e12);
  EXPECT_EQ(t.node.domain_gpus(), 72);
  EXPECT_EQ(t.node.tray_gpus(), 4);
  EXPECT_EQ(t.node.gpus_per_node, 64);  // what every engine divides by
  EXPECT_EQ(t.nic.nics_per_node, 64);   // the used GPUs' NICs = rails built
  EXPECT_EQ(fabric_rails(t), 72);       // one leaf per rail of the whole rack
  EXPECT_EQ(t.fabric.leaf_switches_per_scalable_unit, 72);
  EXPECT_DOUBLE_EQ(t.node.nvlink_bandwidth_Bps, 900e9);
  EXPECT_TRUE(t.node.nvls);
  EXPECT_DOUBLE_EQ(t.nic.line_rate_Bps, 50e9);
  // Three tiers of radix 64: 64 x 32 = 2048 leaves / 72 rails = 28 SUs of 8 racks.
  EXPECT_EQ(max_nodes(t), 224);
  EXPECT_NO_THROW(check_cluster_size(t, 128));  // 2 racks x 64: the published 128-GPU runs
  EXPECT_NO_THROW(check_cluster_size(t, 512));  // one SU
  EXPECT_THAT(config_error_of([&] { check_cluster_size(t, 72); }),
              HasSubstr("num_gpus = 72 is not a multiple of gpus_used_per_node = 64 (nearest: "
                        "64 or 128)"));
  EXPECT_THAT(describe_topology(t),
              AllOf(HasSubstr("NVLink domain of 72 GPUs = 18 trays of 4; a job uses 64 per "
                              "domain (trays 0..15), 8 spare"),
                    HasSubstr("9.8 PFLOP/s fp4")));
}

// FP8 (Hopper and later) and Blackwell's MXFP8 recipe are accepted on GB200.
TEST(Gb200Nvl72, RunsFp8AndMxfp8) {
  const TopologySpec t = load_topology(kGb200);
  TrainingConfig training;
  training.fp8_format = Fp8Format::kHybrid;
  EXPECT_NO_THROW(check_gpu_supports(t, training));
  training.fp8_recipe = Fp8Recipe::kMxfp8;
  EXPECT_NO_THROW(check_gpu_supports(t, training));
}

// 64 of 72: rank r is GPU r % 64 of rack r / 64, trays 0..15; physical GPUs 64..71 of every
// rack (trays 16 and 17) hold no rank. Worked by hand: rank 63 = rack 0 tray 15 GPU 3; rank 64 =
// rack 1 GPU 0 = physical GPU 72; rank 200 = rack 3 GPU 8 (tray 2) = physical 3 x 72 + 8 = 224.
TEST(Gb200Nvl72, RanksSkipTheSpareGpus) {
  const TopologySpec t = load_topology(kGb200);
  const GpuPlacement r63 = place_rank(t, 63);
  EXPECT_EQ(r63.node, 0);
  EXPECT_EQ(r63.gpu_in_node, 63);
  EXPECT_EQ(r63.tray, 15);
  EXPECT_EQ(r63.gpu_in_tray, 3);
  EXPECT_EQ(r63.physical_gpu, 63);
  const GpuPlacement r64 = place_rank(t, 64);
  EXPECT_EQ(r64.node, 1);
  EXPECT_EQ(r64.gpu_in_node, 0);
  EXPECT_EQ(r64.tray, 0);
  EXPECT_EQ(r64.physical_gpu, 72);
  const GpuPlacement r200 = place_rank(t, 200);
  EXPECT_EQ(r200.node, 3);
  EXPECT_EQ(r200.gpu_in_node, 8);
  EXPECT_EQ(r200.tray, 2);
  EXPECT_EQ(r200.gpu_in_tray, 0);
  EXPECT_EQ(r200.physical_gpu, 224);
  // 512 ranks = 8 racks: distinct physical GPUs, none a spare.
  std::set<int64_t> used;
  for (int64_t r = 0; r < 512; ++r) {
    const GpuPlacement p = place_rank(t, r);
    EXPECT_LT(p.gpu_in_node, 64);
    EXPECT_LT(p.tray, 16);
    used.insert(p.physical_gpu);
  }
  EXPECT_EQ(used.size(), 512u);
  EXPECT_EQ(*used.rbegin(), 7 * 72 + 63);
  EXPECT_THROW(place_rank(t, -1), InvalidArgument);
  // The graph names GPU vertices by rack and physical slot, and GPU j of a rack uses rail j.
  const ClusterGraph g = build_cluster_graph(t, 128);
  EXPECT_EQ(g.plan().num_nodes, 2);
  EXPECT_EQ(g.plan().rails, 64);
  EXPECT_EQ(g.graph()[g.gpu(64)].name, "node1-gpu0");
  EXPECT_EQ(g.graph()[g.gpu(127)].name, "node1-gpu63");
  EXPECT_EQ(rail_of_gpu(t, 64 + 5), 5);
}

// A DGX file without the new keys: one tray per node, every GPU used (as before).
TEST(NvlinkDomain, DefaultsAreOneTrayAllUsed) {
  const TopologySpec t = load_topology(kSource / "topologies" / "dgx-h100-superpod.yaml");
  EXPECT_EQ(t.node.gpus_per_node, 8);
  EXPECT_EQ(t.node.domain_gpus(), 8);
  EXPECT_EQ(t.node.tray_gpus(), 8);
  EXPECT_EQ(fabric_rails(t), t.nic.nics_per_node);
  EXPECT_EQ(place_rank(t, 13).physical_gpu, 13);
  EXPECT_EQ(place_rank(t, 13).tray, 0);
  EXPECT_FALSE(t.gpu.peak.fp4_FLOPs.has_value());
}

TEST(NvlinkDomain, AllOfTheDomainWhenNoKeyIsGiven) {
  const TopologySpec t =
      parse_topology(with_node("  gpus_per_node: 72\n  gpus_per_tray: 4\n"), "t.yaml");
  EXPECT_EQ(t.node.gpus_per_node, 72);
  EXPECT_EQ(t.nic.nics_per_node, 72);
  EXPECT_EQ(place_rank(t, 72).physical_gpu, 72);
}

// Bad domain keys: each an error naming the file, line and key.
TEST(NvlinkDomain, BadKeysAreErrorsNamingFileLineAndKey) {
  EXPECT_THAT(config_error_of([] {
                parse_topology(with_node("  gpus_per_node: 72\n  gpus_per_tray: 4\n"
                                         "  gpus_used_per_node: 80\n"),
                               "t.yaml");
              }),
              HasSubstr("t.yaml:13: node.gpus_used_per_node: 80 GPUs used per NVLink domain, but "
                        "node.gpus_per_node = 72 (allowed: 1 to 72)"));
  EXPECT_THAT(config_error_of([] {
                parse_topology(with_node("  gpus_per_node: 72\n  gpus_per_tray: 4\n"
                                         "  gpus_used_per_node: 62\n"),
                               "t.yaml");
              }),
              AllOf(HasSubstr("t.yaml:13: node.gpus_used_per_node: 62 GPUs are not whole trays"),
                    HasSubstr("a multiple of 4")));
  EXPECT_THAT(config_error_of([] {
                parse_topology(with_node("  gpus_per_node: 72\n  gpus_per_tray: 5\n"), "t.yaml");
              }),
              HasSubstr("t.yaml:12: node.gpus_per_tray: 5 GPUs per tray do not fill "
                        "node.gpus_per_node = 72"));
  EXPECT_THAT(config_error_of([] {
                parse_topology(with_node("  gpus_per_node: 72\n  gpus_per_rack: 72\n"), "t.yaml");
              }),
              AllOf(HasSubstr("t.yaml:12: node.gpus_per_rack: unknown key"),
                    HasSubstr("gpus_used_per_node (optional)")));
  EXPECT_THAT(config_error_of([] {
                parse_topology(with_node("  gpus_per_node: 72\n  gpus_used_per_node: 0\n"),
                               "t.yaml");
              }),
              HasSubstr("t.yaml:12: node.gpus_used_per_node: 0 is too small"));
}

Scenario scenario_with_tp(const fs::path& topology, int64_t num_gpus, int64_t tp) {
  Scenario s;
  s.source = "job.yaml";
  s.cluster.topology = topology;
  s.cluster.num_gpus = num_gpus;
  s.parallel.tensor_model_parallel_size = tp;
  return s;
}

// A TP group larger than the GPUs a job uses per NVLink domain is an error naming the scenario
// file, its key and the topology's key; TP 64 fills a GB200 rack's used GPUs and is accepted.
TEST(NvlinkDomain, TensorParallelGroupsMustFitTheDomain) {
  const fs::path h100 = kSource / "topologies" / "dgx-h100-superpod.yaml";
  EXPECT_THAT(config_error_of([&] {
                check_layout_fits_nvlink_domain(load_topology(h100),
                                                scenario_with_tp(h100, 64, 16));
              }),
              AllOf(HasSubstr("job.yaml: parallelism.tensor_model_parallel_size: 16 exceeds the "
                              "NVLink domain: the job uses 8 GPUs per domain"),
                    HasSubstr("node.gpus_per_node = 8"), HasSubstr("(allowed: 1 to 8)")));
  const TopologySpec gb = load_topology(kGb200);
  EXPECT_NO_THROW(check_layout_fits_nvlink_domain(gb, scenario_with_tp(kGb200, 128, 64)));
  EXPECT_THAT(config_error_of([&] {
                check_layout_fits_nvlink_domain(gb, scenario_with_tp(kGb200, 144 * 64, 72));
              }),
              AllOf(HasSubstr("tensor_model_parallel_size: 72 exceeds the NVLink domain"),
                    HasSubstr("node.gpus_used_per_node = 64 of node.gpus_per_node = 72")));
  Scenario etp = scenario_with_tp(kGb200, 128, 8);
  etp.parallel.expert_tensor_parallel_size = 128;
  EXPECT_THAT(config_error_of([&] { check_layout_fits_nvlink_domain(gb, etp); }),
              HasSubstr("parallelism.expert_tensor_parallel_size: 128 exceeds"));
}

// The shipped GB200 scenario loads with its topology (cluster size, GPU, TP rule).
TEST(NvlinkDomain, ShippedGb200ScenarioLoads) {
  const Scenario s = load_scenario(kSource / "scenarios" / "llama3.1-405b-gb200-256.yaml");
  const TopologySpec t = load_scenario_topology(s);
  EXPECT_EQ(t.name, "gb200-nvl72-superpod");
  EXPECT_EQ(s.cluster.num_gpus / t.node.gpus_per_node, 4);  // 4 racks
}

}  // namespace
}  // namespace traintwin
