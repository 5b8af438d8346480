// One transformer layer's forward and backward time against the paper that measured them
// (issue 24, item 1): Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models" (MLSys 2023, arXiv:2205.05198), Table 4: the 22B GPT (h 6144, 64 heads, seq 2048,
// micro-batch 4, TP 8 on one DGX A100, fp16) with and without sequence parallelism and with
// full and selective recomputation. The replay of the calibrated roofline (gemm 0.68, attention
// 0.45, memory 0.70 of peak: fitted on iteration times, never on these figures) is read off the
// timeline: a layer's forward is the time between the ends of two consecutive layers' forwards
// (compute and TP communication, as the paper times it), its backward likewise.
//
// Measured 2026-11-28, after the kernels' bytes were counted from Megatron-LM's source (unfused
// attention 12 / 17 bytes per score element, the residual gradient sums, the optimizer's passes:
// core/lowering_kernels.hpp, tests/core/kernel_bytes_test.cpp) and the roofline refitted
// (memory 0.50 -> 0.70, attention 0.55 -> 0.45): forward 7.7 -> 8.02 ms (+4.2 %) without SP and
// 7.2 -> 7.36 ms (+2.2 %) with SP (SP saves 0.66 ms, the paper 0.5, was 0.95); backward 11.9 ->
// 11.78 (-1.0 %), 11.8 -> 11.52 (-2.3 %), full recomputation 19.5 -> 19.80 (+1.5 %), selective
// 13.2 -> 12.96 (-1.8 %), selective + SP 13.1 -> 12.71 (-3.0 %). The figures of 2026-11-26, before
// that change:
//
// Measured 2026-11-26 (paper -> replay): forward 7.7 -> 8.12 ms (+5.5 %) without SP and 7.2 ->
// 7.17 ms (-0.4 %) with SP; backward 11.9 -> 11.98 (+0.7 %), 11.8 -> 11.80, full recomputation
// 19.5 -> 20.10 (+3.1 %), selective 13.2 -> 12.95 (-1.9 %), selective + SP 13.1 -> 12.78 (-2.4 %).
// What full recomputation adds to the backward is one forward, in the paper (19.5 - 11.9 = 7.6
// of a 7.7 ms forward) as in the replay. The largest miss, the forward without SP, is its
// LayerNorm, dropout and residual on the whole [s, b, h] activation (replicated on every TP rank):
// 0.95 ms more than with SP in the replay against 0.5 ms in the paper, i.e. memory-bound kernels
// at half the HBM bandwidth are too slow for these large, simple kernels.
//
// Issue 24 item 1 (full recomputation over-predicted: korthikanti2022-22B/full_recompute +4.8 %,
// 175B +5.5 %, deep pipelines more): what Megatron runs under --recompute-granularity full
// --recompute-method uniform is what the Program lowers. CheckpointFunction
// (megatron/core/tensor_parallel/random.py) saves the RNG states, runs the layer's forward under
// no_grad, and in the backward restores the states and reruns the whole forward (its TP
// all-reduces, its dropout masks regenerated) before the layer's backward, nothing overlapped;
// the embedding, LM head and loss are outside TransformerBlock._checkpointed_forward and run
// once. The paper agrees: 19.5 - 11.9 = 7.6 ms added to a 7.7 ms forward; the replay's overhead
// matches within 1.2 % (the test below). So the recomputation is not what is over-charged:
// (1) on PP > 1 without SP, Megatron-LM of 2021-22 sent 1/TP of each pipeline tensor and
// all-gathered it over NVLink (--scatter-gather-tensors-in-pipeline, on by default; Narayanan
// et al. 2021 section 4.1), where the Program sent the whole [s, b, h] tensor over InfiniBand
// from every TP rank (tests/core/program_test.cpp, PipelineScatterGather...); full
// recomputation without SP is where the papers ran it; (2) the forward without SP, run twice
// per layer under full recomputation, is the +5.5 % above (left: a memory efficiency that
// depends on the kernel, refitted on every calibration file).
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

// Table 4's "overhead" of full recomputation: a layer's forward + backward with it (7.7 + 19.5 =
// 27.2 ms) over the same without it (7.7 + 11.9 = 19.6 ms), 1.388: Megatron's CheckpointFunction
// (tensor_parallel/random.py) reruns the layer's whole forward in the backward, TP all-reduces
// and dropout (under the saved RNG state) included, with nothing overlapped, and so does the
// Program (one kRecompute forward per layer before its backward).
TEST(PaperLayerTimes, Korthikanti22bFullRecomputationOverheadAsThePaper) {
  const LayerMs none = replayed_layer("none", false);
  const LayerMs full = replayed_layer("full", false);
  const double paper = (7.7 + 19.5) / (7.7 + 11.9);
  const double replay = (full.forward + full.backward) / (none.forward + none.backward);
  EXPECT_NEAR(replay, paper, 0.02 * paper) << "replay " << full.forward << " + " << full.backward
                                           << " ms over " << none.forward << " + "
                                           << none.backward << " ms";
  // The forward itself is not recomputed ahead of time: the same time with or without it.
  EXPECT_NEAR(full.forward, none.forward, 0.005 * none.forward);
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
