// One transformer layer's forward and backward time against the paper that measured them
// (issue 24, item 1): Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models" (MLSys 2023, arXiv:2205.05198), Table 4: the 22B GPT (h 6144, 64 heads, seq 2048,
// micro-batch 4, TP 8 on one DGX A100, fp16) with and without sequence parallelism and with
// full and selective recomputation. The replay of the calibrated roofline (gemm 0.68, attention
// 0.55, memory 0.50 of peak: fitted on iteration times, never on these figures) is read off the
// timeline: a layer's forward is the time between the ends of two consecutive layers' forwards
// (compute and TP communication, as the paper times it), its backward likewise.
//
// Measured 2026-11-26 (paper -> replay): forward 7.7 -> 8.12 ms (+5.5 %) without SP and 7.2 ->
// 7.17 ms (-0.4 %) with SP; backward 11.9 -> 11.98 (+0.7 %), 11.8 -> 11.80, full recomputation
// 19.5 -> 20.10 (+3.1 %), selective 13.2 -> 12.95 (-1.9 %), selective + SP 13.1 -> 12.78 (-2.4 %).
// What full recomputation adds to the backward is one forward, in the paper (19.5 - 11.9 = 7.6
// of a 7.7 ms forward) as in the replay. The largest miss, the forward without SP, is its
// LayerNorm, dropout and residual on the whole [s, b, h] activation (replicated on every TP rank):
// 0.95 ms more than with SP in the replay against 0.5 ms in the paper, i.e. memory-bound kernels
// at half the HBM bandwidth are too slow for these large, simple kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/replay.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

struct LayerMs {
  double forward = 0;
  double backward = 0;
};

/// Mean forward / backward time (ms) of layers 10..37 of micro-batch 0 on rank 0, from a replay
/// of the 22B case (in a child process: one SimGrid engine per process).
LayerMs replayed_layer(const std::string& recompute, bool sequence_parallel) {
  const std::string out = run_isolated([&] {
    const std::string yaml =
        "name: korthikanti-22b\n"
        "model: {num_layers: 48, hidden_size: 6144, num_attention_heads: 64, seq_length: 2048,\n"
        "        vocab_size: 51200}\n"
        "parallelism: {tensor_model_parallel_size: 8, pipeline_model_parallel_size: 1,\n"
        "              sequence_parallel: " +
        std::string(sequence_parallel ? "true" : "false") +
        "}\n"
        "training: {micro_batch_size: 4, global_batch_size: 4, precision: fp16,\n"
        "           use_distributed_optimizer: false, recompute_granularity: " +
        recompute +
        "}\n"
        "cluster: {topology: " TRAINTWIN_SOURCE_DIR
        "/topologies/dgx-a100-superpod.yaml, num_gpus: 8}\n";
    const Scenario s = parse_scenario(yaml, "korthikanti-22b", TRAINTWIN_SOURCE_DIR);
    const TopologySpec topo = load_topology(s.cluster.topology);
    const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
    const SimulationResult r = simulate(s, topo, *costs);
    std::map<std::pair<std::string, int>, double> end;  // (fwd|bwd, layer) -> last end
    const std::regex name(R"(^(fwd|bwd)\S* mb0 L(\d+) )");
    for (const TimelineEvent& e : r.timeline.events) {
      std::smatch m;
      if (e.rank != 0 || !std::regex_search(e.name, m, name)) continue;
      double& t = end[{m[1].str(), std::stoi(m[2].str())}];
      t = std::max(t, e.end_s);
    }
    double fwd = 0, bwd = 0;
    for (int l = 10; l < 38; ++l) {
      fwd += end.at({"fwd", l}) - end.at({"fwd", l - 1});
      bwd += end.at({"bwd", l - 1}) - end.at({"bwd", l});
    }
    std::ostringstream o;
    o.precision(17);
    o << 1e3 * fwd / 28 << " " << 1e3 * bwd / 28;
    return o.str();
  });
  LayerMs ms;
  std::istringstream(out) >> ms.forward >> ms.backward;
  return ms;
}

/// Within `tolerance` (relative) of the paper's figure.
void expect_near_paper(double replay_ms, double paper_ms, double tolerance, const char* what) {
  EXPECT_LE(std::abs(replay_ms - paper_ms) / paper_ms, tolerance)
      << what << ": replay " << replay_ms << " ms, Korthikanti et al. Table 4: " << paper_ms
      << " ms";
}

// Table 4 without SP or recomputation (calibration.yaml one_layer_ms.no_recompute): forward 7.7
// ms, backward 11.9 ms.
TEST(PaperLayerTimes, Korthikanti22bWithoutSequenceParallelism) {
  const LayerMs l = replayed_layer("none", false);
  expect_near_paper(l.forward, 7.7, 0.06, "forward");
  expect_near_paper(l.backward, 11.9, 0.03, "backward");
}

// Table 4 with SP (one_layer_ms.sequence_parallel): forward 7.2 ms, backward 11.8 ms.
TEST(PaperLayerTimes, Korthikanti22bWithSequenceParallelism) {
  const LayerMs l = replayed_layer("none", true);
  expect_near_paper(l.forward, 7.2, 0.03, "forward");
  expect_near_paper(l.backward, 11.8, 0.03, "backward");
}

// Table 4 with full recomputation (one_layer_ms.full_recompute): backward 19.5 ms = backward +
// one forward; with selective recomputation (selective_recompute): backward 13.2 ms.
TEST(PaperLayerTimes, Korthikanti22bRecomputation) {
  const LayerMs none = replayed_layer("none", false);
  const LayerMs full = replayed_layer("full", false);
  expect_near_paper(full.backward, 19.5, 0.04, "backward, full recomputation");
  // What recomputation adds is one forward (paper: 19.5 - 11.9 = 7.6 of a 7.7 ms forward).
  EXPECT_NEAR(full.backward - none.backward, none.forward, 0.01 * none.forward);
  const LayerMs selective = replayed_layer("selective", false);
  expect_near_paper(selective.backward, 13.2, 0.03, "backward, selective recomputation");
}

// Table 4 with selective recomputation and SP (selective_and_sequence_parallel): forward 7.2 ms,
// backward 13.1 ms.
TEST(PaperLayerTimes, Korthikanti22bSelectiveRecomputationWithSequenceParallelism) {
  const LayerMs l = replayed_layer("selective", true);
  expect_near_paper(l.forward, 7.2, 0.03, "forward");
  expect_near_paper(l.backward, 13.1, 0.03, "backward");
}

}  // namespace
}  // namespace traintwin
