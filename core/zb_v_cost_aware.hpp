// ZB-V's cost-aware order: the greedy V scheduler of Qi et al., "Zero Bubble (Almost) Pipeline
// Parallelism" (arXiv:2401.10241 v2, sec. 6), which places each rank's forwards, input-gradient
// backwards (B) and weight-gradient passes (W) from the profiled pass costs, the point-to-point
// delay and an activation-memory limit. Where zb_v_schedule (core/schedule.hpp) is the fixed
// order that scheduler emits for T_F = T_B = T_W without communication, this is the scheduler
// itself, so with unequal costs and communication it gives the arXiv version's Table 8 ZB-V
// rates (tests/core/zero_bubble_table9_test.cpp). Its output is the same per-rank ScheduleStep
// lists build_schedule gives for PipelineScheduleKind::kZbV (V placement, virtual_stage_of), for
// the Program lowering and the engines to run.
#pragma once

#include <cstdint>
#include <vector>

#include "core/schedule.hpp"

namespace traintwin {

/// Costs of one pass of one model chunk (half a stage), in any one time unit (us in traintwin):
/// f forward, b input gradient (B), w weight gradient (W), comm the delay of one transfer between
/// two ranks (it delays the receiver and occupies no rank).
struct ZbVPassCosts {
  double f = 1, b = 1, w = 1, comm = 0;
};

/// Activation memory of one pass of one model chunk, in any one unit: a forward adds f, its B
/// adds b and its W adds w (b and w usually negative: they free what the forward saved);
/// limit is the most a rank may hold. The scheduler runs W's early rather than exceed it.
struct ZbVPassMemory {
  double f = 1, b = 0, w = -1, limit = 0;
};

/// The memory model the authors' Megatron runtime gives the V scheduler (sail-sg/
/// zero-bubble-pipeline-parallelism, commit 39f2c186, megatron/core/pipeline_parallel/
/// zerobubble/runtime.py: f_mem_approx = 34 h + 5 a s, w_mem_approx = -32 h, b_mem_approx =
/// -f - w; the activations per token of one layer of Korthikanti et al., "Reducing Activation
/// Recomputation in Large Transformer Models", 2022, eq. 1 without sequence parallelism: the W
/// frees the 32 h of saved GEMM inputs, the B the rest), with the scheduler's default limit of
/// 2p forwards (zbv.py, max_mem = f_mem * n_stage * 2: ZB-V's p M_B, 1F1B's peak).
/// Throws InvalidArgument unless pp_size, hidden_size, num_attention_heads and seq_length >= 1.
ZbVPassMemory zb_v_megatron_memory(int64_t pp_size, int64_t hidden_size,
                                   int64_t num_attention_heads, int64_t seq_length);

/// Every rank's order from the cost-aware scheduler, and its own estimate of the bubble.
struct ZbVCostAwareSchedule {
  /// ranks[r]: pipeline rank r's steps (model chunk 0 = virtual stage r, chunk 1 = 2p - 1 - r, as
  /// zb_v_schedule's); each (micro-batch, chunk) has one forward, one B and one W.
  std::vector<std::vector<ScheduleStep>> ranks;
  /// The largest idle time of a rank between the end of its first forward and its last pass, in
  /// the costs' unit, when each pass starts as soon as its rank is free and its input has arrived
  /// (the scheduler's event model: a transfer between ranks takes comm). The paper's bubble rate
  /// is bubble / (bubble + 2 m (f + b + w)).
  double bubble = 0;
};

/// The authors' greedy V scheduler, re-implemented from sail-sg/zero-bubble-pipeline-parallelism
/// (megatron/core/pipeline_parallel/zerobubble/scheduler/zbv.py at commit 39f2c186,
/// PipelineGraph.try_v_schedule and create_schedule; the arXiv branch's v_schedule.py at commit
/// f68d3879 "for arxiv paper", which computed Table 8, differs in one warm-up condition and gives
/// the same Table 8 rates). All ranks are placed together, pass by pass, in the scheduler's time:
///   1. warm-up: one chunk-0 forward on every rank; then from the last rank up, each rank r
///      puts further chunk-0 forwards (one on every rank 0..r at a time) while they fit before
///      its first chunk-1 forward's input arrives and the memory limit allows (2 + 2r forwards'
///      room), then that chunk-1 forward; then each rank after the first catches up with the
///      forwards of the rank before it, and runs one chunk-1 forward more than it while that
///      rank has some left (each round one forward on every rank from the last down to it,
///      alternating chunks);
///   2. 2m rounds of: every rank's next B — chunk 0's backward where it is behind chunk 1's and
///      its input is there (or chunk 1's are all done), else chunk 1's — then every rank's next
///      forward whose input is there; before each, the rank runs pending W's (first in, first
///      out) while one fits before that pass's input arrives, plus one more if the remaining wait
///      exceeds what the rank may still idle (the largest bubble so far less its own): always
///      before a chunk-0 B, before a chunk-1 B or a forward as the variant's fill_b / fill_f
///      say; W's also run whenever the next pass would exceed the memory limit;
///   3. the W's still pending.
/// Each variant (fill_b, fill_f in {true, false}) is repeated with the previous run's per-rank
/// bubbles as each rank's allowance while that lowers the largest bubble; the order with the
/// least bubble wins (the first on ties, fill_b then fill_f true first). Every rank has the same
/// costs (the authors' runtime gives the scheduler, for each pass, the median over the stages of
/// each stage's average profiled time) and holds no memory but its activations. Times are
/// compared exactly: integral costs (e.g. in us, as the authors' script has them) reproduce its
/// choices on ties.
/// Throws InvalidArgument unless pp_size >= 1, num_micro_batches >= 2 pp_size (the warm-up's
/// 2p forwards; zb_v_schedule's rule), the costs f, b, w > 0 and comm >= 0, memory.f > 0 and
/// memory.limit >= 2 memory.f, and when the scheduler cannot place a pass within memory.limit
/// (the message says which rank and pass): its warm-up runs up to 2p forwards on the last rank
/// before any W can free memory, so a limit below 2p forwards' activations may fail there.
ZbVCostAwareSchedule zb_v_cost_aware_schedule(int64_t pp_size, int64_t num_micro_batches,
                                              const ZbVPassCosts& costs,
                                              const ZbVPassMemory& memory);

}  // namespace traintwin
