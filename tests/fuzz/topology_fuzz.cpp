// libFuzzer target: the topology reader, then (for a valid file) the cluster graph and routes
// that `traintwin topology FILE --num-gpus N` builds, for a small cluster.
#include <algorithm>

#include "topologies/graph.hpp"
#include "topologies/topology.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  const std::string text = fuzz::as_text(data, size);
  return fuzz::expect_error_or_success([&] {
    const TopologySpec t = parse_topology(text, "fuzz.yaml");
    describe_topology(t);
    // A cluster of at most two nodes, so that one input stays fast.
    const int64_t gpus = std::min<int64_t>(2 * t.node.gpus_per_node, 64);
    check_cluster_size(t, gpus);
    const ClusterGraph g = build_cluster_graph(t, gpus);
    validate_cluster_graph(g);
    describe_cluster_graph(g);
    const GraphRoute r = route(g, 0, gpus - 1);
    route_latency_s(g, r);
    route_bottleneck_Bps(g, r);
  });
}
