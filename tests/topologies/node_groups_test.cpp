// Tests of a mixed cluster's node groups (topologies/topology.hpp: node_groups, gpu_of_node,
// node_spec_of, nic_spec_of, job_gpus): the shipped mixed H100/H200 and H100/A100 topologies, the
// GPU, NVLink domain and NICs of each node and rank, and the loader's errors for groups it cannot
// model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "tests/config_error_of.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::config_error_of;

namespace fs = std::filesystem;

const fs::path kTopologies = fs::path(TRAINTWIN_SOURCE_DIR) / "topologies";

/// dgx-h100-superpod.yaml's text with `groups` (a node_groups list in YAML) appended.
std::string h100_with_groups(const std::string& groups) {
  return "name: test\n"
         "gpu: {name: H100-SXM-80GB, memory: 81559MiB, hbm_bandwidth: 3350GBps,\n"
         "      peak_flops: {fp32: 67TFLOPs, tf32: 494.5TFLOPs, fp16: 989TFLOPs, bf16: 989TFLOPs,\n"
         "                   fp8: 1979TFLOPs}}\n"
         "node: {gpus_per_node: 8, nvlink_bandwidth: 450GBps, nvlink_latency: 1us, nvls: true}\n"
         "nic: {nics_per_node: 8, line_rate: 400Gbps, latency: 600ns}\n"
         "fabric: {kind: rail_optimized_fat_tree, tiers: 3, nodes_per_scalable_unit: 32,\n"
         "         leaf_switches_per_scalable_unit: 8, switch_radix: 64,\n"
         "         oversubscription: \"1:1\", link_rate: 400Gbps, hop_latency: 130ns}\n" +
         groups;
}

TopologySpec parse(const std::string& groups) {
  return parse_topology(h100_with_groups(groups), "test.yaml", kTopologies);
}

TEST(NodeGroups, TheShippedMixedSuperPodHasH200NodesFirstThenH100s) {
  const TopologySpec t = load_topology(kTopologies / "mixed-h100-h200-superpod.yaml");
  ASSERT_EQ(t.node_groups.size(), 1u);
  EXPECT_EQ(t.node_groups[0].name, "h200");
  EXPECT_EQ(t.node_groups[0].nodes, 64);
  EXPECT_EQ(t.node_groups[0].node_template, kTopologies / "dgx-h200-superpod.yaml");
  EXPECT_EQ(gpu_of_node(t, 0).name, "H200-SXM-141GB");
  EXPECT_EQ(gpu_of_node(t, 63).name, "H200-SXM-141GB");
  EXPECT_EQ(gpu_of_node(t, 64).name, "H100-SXM-80GB");
  EXPECT_DOUBLE_EQ(gpu_of_node(t, 0).hbm_bandwidth_Bps, 4.8e12);
  EXPECT_THROW(gpu_of_node(t, -1), InvalidArgument);
  EXPECT_THAT(describe_topology(t),
              HasSubstr("\n  group   h200: nodes 0 to 63: H200-SXM-141GB, "));
}

TEST(NodeGroups, AJobIsMixedOnlyWhenItReachesPastItsFirstGroup) {
  const TopologySpec t = load_topology(kTopologies / "mixed-h100-h200-superpod.yaml");
  const JobGpus small = job_gpus(t, 512);  // 64 nodes: H200s only
  EXPECT_FALSE(small.mixed());
  EXPECT_EQ(small.describe(), "512 x H200-SXM-141GB");
  const JobGpus big = job_gpus(t, 1024);  // 128 nodes: half and half
  ASSERT_TRUE(big.mixed());
  EXPECT_EQ(big.describe(), "512 x H200-SXM-141GB + 512 x H100-SXM-80GB");
  EXPECT_EQ(big.rank_type[511], 0);
  EXPECT_EQ(big.rank_type[512], 1);
  EXPECT_THROW(job_gpus(t, 0), InvalidArgument);
  // A homogeneous topology: one kind, every rank on it.
  const JobGpus one = job_gpus(load_topology(kTopologies / "dgx-h100-superpod.yaml"), 16);
  EXPECT_FALSE(one.mixed());
  EXPECT_EQ(one.describe(), "16 x H100-SXM-80GB");
}

TEST(NodeGroups, GroupsTakeNodesInOrder) {
  const TopologySpec t = parse(
      "node_groups:\n"
      "  - {name: a, nodes: 2, node_template: dgx-h200-superpod.yaml}\n"
      "  - {name: b, nodes: 1, node_template: dgx-h100-superpod.yaml}\n");
  ASSERT_EQ(t.node_groups.size(), 2u);
  EXPECT_EQ(gpu_of_node(t, 1).name, "H200-SXM-141GB");
  EXPECT_EQ(gpu_of_node(t, 2).name, "H100-SXM-80GB");
  EXPECT_EQ(gpu_of_node(t, 3).name, "H100-SXM-80GB");
  // Group b's GPU is the file's own kind: one type after the two H200 nodes.
  EXPECT_EQ(job_gpus(t, 32).describe(), "16 x H200-SXM-141GB + 16 x H100-SXM-80GB");
}

// DGX A100 nodes beside DGX H100 ones: the group keeps its template's NVLink domain and NICs
// (dgx-a100-superpod.yaml: NVLink 3 at 300 GB/s per direction, no NVLS, HDR 200 Gb/s), the rest
// the file's (450 GB/s, NVLS, NDR 400 Gb/s); the fabric is the file's.
TEST(NodeGroups, TheShippedA100H100SuperPodGivesEachNodeItsOwnRates) {
  const TopologySpec t = load_topology(kTopologies / "mixed-h100-a100-superpod.yaml");
  ASSERT_EQ(t.node_groups.size(), 1u);
  EXPECT_EQ(t.node_groups[0].nodes, 64);
  EXPECT_TRUE(has_per_node_rates(t));
  EXPECT_EQ(gpu_of_node(t, 63).name, "A100-SXM-80GB");
  EXPECT_EQ(node_spec_of(t, 63).nvlink_bandwidth_Bps, 300e9);
  EXPECT_FALSE(node_spec_of(t, 63).nvls);
  EXPECT_EQ(nic_spec_of(t, 63).line_rate_Bps, 25e9);
  EXPECT_EQ(nic_spec_of(t, 63).nics_per_node, 8);
  EXPECT_EQ(gpu_of_node(t, 64).name, "H100-SXM-80GB");
  EXPECT_EQ(node_spec_of(t, 64).nvlink_bandwidth_Bps, 450e9);
  EXPECT_TRUE(node_spec_of(t, 64).nvls);
  EXPECT_EQ(nic_spec_of(t, 64).line_rate_Bps, 50e9);
  EXPECT_EQ(t.fabric.link_rate_Bps, 50e9);
  EXPECT_THROW(node_spec_of(t, -1), InvalidArgument);
  EXPECT_THROW(nic_spec_of(t, -1), InvalidArgument);
  EXPECT_TRUE(job_on_one_node_kind(t, 512));    // nodes 0-63
  EXPECT_FALSE(job_on_one_node_kind(t, 520));   // and node 64
  EXPECT_EQ(job_gpus(t, 1024).describe(), "512 x A100-SXM-80GB + 512 x H100-SXM-80GB");
  EXPECT_THAT(describe_topology(t),
              HasSubstr("\n  group   a100: nodes 0 to 63: A100-SXM-80GB, 80.0 GiB HBM, dense 312 "));
  EXPECT_THAT(describe_topology(t), HasSubstr("NVLS off, NICs 200 Gb/s"));
  // H200 nodes have the H100's NVLink and NICs: no rates of their own.
  const TopologySpec h200 = load_topology(kTopologies / "mixed-h100-h200-superpod.yaml");
  EXPECT_FALSE(has_per_node_rates(h200));
  EXPECT_FALSE(h200.node_groups[0].node.has_value());
  EXPECT_EQ(&node_spec_of(h200, 0), &h200.node);
  EXPECT_TRUE(job_on_one_node_kind(h200, 512));
  EXPECT_FALSE(job_on_one_node_kind(h200, 1024));  // H200 and H100 GPUs
  EXPECT_THROW(job_on_one_node_kind(h200, 0), InvalidArgument);
}

TEST(NodeGroups, EveryGpuMustRunWhatTheScenarioAsks) {
  // An FP8 run on a cluster whose group has A100s (no FP8): refused naming the A100.
  TopologySpec t = load_topology(kTopologies / "dgx-h100-superpod.yaml");
  t.node_groups.push_back(
      {"a100", 1, load_topology(kTopologies / "dgx-a100-superpod.yaml").gpu, ""});
  TrainingConfig fp8;
  fp8.fp8_format = Fp8Format::kHybrid;
  EXPECT_THAT(config_error_of([&] { check_gpu_supports(t, fp8); }),
              HasSubstr("A100-SXM-80GB has no FP8 tensor cores"));
}

TEST(NodeGroupErrors, EachNamesTheFileLineAndWhatIsAllowed) {
  // A node template whose NVLink domain has another shape (GB200 NVL72: 72 GPUs): its ranks
  // could not be placed as the file's, nor its rails built; the key and both values named.
  EXPECT_THAT(
      config_error_of([] {
        parse("node_groups:\n  - {name: rack, nodes: 4, node_template: gb200-nvl72-superpod.yaml}\n");
      }),
      AllOf(HasSubstr("test.yaml:"), HasSubstr("node_groups.node_template"),
            HasSubstr("group \"rack\""), HasSubstr("node.gpus_per_node of"),
            HasSubstr("is 72, this file's is 8"), HasSubstr("shape of its NVLink domain")));
  // One NVLink domain of 1 GPU and 1 NIC (the device machine's topology).
  EXPECT_THAT(config_error_of([] {
                parse("node_groups:\n  - {name: one, nodes: 1, node_template: cuda-h100-1gpu.yaml}\n");
              }),
              AllOf(HasSubstr("group \"one\""), HasSubstr("node.gpus_per_node")));
  // The A100's NVLink and NICs are rates: accepted, kept as the group's own.
  const TopologySpec old = parse(
      "node_groups:\n  - {name: old, nodes: 4, node_template: dgx-a100-superpod.yaml}\n");
  ASSERT_TRUE(old.node_groups[0].node && old.node_groups[0].nic);
  EXPECT_EQ(old.node_groups[0].node->nvlink_bandwidth_Bps, 300e9);
  EXPECT_EQ(old.node_groups[0].nic->line_rate_Bps, 25e9);
  EXPECT_THAT(
      config_error_of([] {
        parse("node_groups:\n"
              "  - {name: a, nodes: 1, node_template: dgx-h200-superpod.yaml}\n"
              "  - {name: a, nodes: 1, node_template: dgx-h200-superpod.yaml}\n");
      }),
      HasSubstr("duplicate group name \"a\""));
  EXPECT_THAT(config_error_of([] {
                parse("node_groups:\n  - {name: a, nodes: 1, node_template: nowhere.yaml}\n");
              }),
              AllOf(HasSubstr("group \"a\""), HasSubstr("nowhere.yaml")));
  EXPECT_THAT(config_error_of([] {
                parse("node_groups:\n  - {name: a, nodes: 0, node_template: dgx-h200-superpod.yaml}\n");
              }),
              HasSubstr("node_groups.nodes: 0 is too small (allowed: >= 1)"));
  EXPECT_THAT(config_error_of([] {
                parse("node_groups:\n  - {name: a, node_template: dgx-h200-superpod.yaml}\n");
              }),
              HasSubstr("missing required key 'nodes'"));
  EXPECT_THAT(config_error_of([] {
                parse("node_groups:\n  - {name: a, nodes: 1, gpu: H200, node_template: x.yaml}\n");
              }),
              HasSubstr("node_groups.gpu: unknown key"));
  EXPECT_THAT(config_error_of([] { parse("node_groups: []\n"); }),
              HasSubstr("node_groups: expected a non-empty list of mappings"));
  EXPECT_THAT(config_error_of([] { parse("node_groups: {name: a}\n"); }),
              HasSubstr("node_groups: expected a non-empty list of mappings"));
  // A template with node groups of its own.
  EXPECT_THAT(config_error_of([] {
                parse("node_groups:\n"
                      "  - {name: a, nodes: 1, node_template: mixed-h100-h200-superpod.yaml}\n");
              }),
              HasSubstr("has node_groups itself"));
}

}  // namespace
}  // namespace traintwin
