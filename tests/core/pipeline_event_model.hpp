// An event model of the pipeline schedules (core/schedule.hpp) for the tests: every pipeline rank
// runs its steps in order, each step as soon as its rank is free and its input is there, with a
// fixed cost per pass and a fixed delay per transfer between ranks. It is the model of Qi et al.,
// "Zero Bubble Pipeline Parallelism" (ICLR 2024): Appendix G's constraints (4)-(6), F after the
// previous stage's F plus T_comm, B after the next stage's B plus T_comm, every pass after the
// one before it on its stage; the authors' scheduler evaluates its orders the same way
// (sail-sg/zero-bubble-pipeline-parallelism, megatron/core/pipeline_parallel/zerobubble/
// scheduler/zb.py, Graph.manual_order: t = max(e + cost, t_parent + comm + cost)). Communication
// delays the receiver only (it occupies no rank), and a hop between two stages on the same rank
// (ZB-V's and DualPipeV's p - 1 -> p) costs nothing. Used by the schedule tests (zero_bubble,
// zero_bubble_v, dualpipe, zero_bubble_table9); the engines' own timing is tested in tests/sim/.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "core/schedule.hpp"

namespace traintwin::pipeline_events {

/// Costs of one pass of one model chunk (any unit): f forward, b input gradient (B), w weight
/// gradient (W), comm per transfer between two ranks. Under a schedule without W steps (GPipe,
/// 1F1B) a backward costs b + w and sends its input gradient at its end.
struct PassCosts {
  double f = 1, b = 1, w = 1, comm = 0;
};

/// A rank's first start and last end.
struct RankSpan {
  double start = -1, end = 0;
};

/// Which transfers between ranks a step waits for. kEveryHop: all of them (the model above).
/// kAsQiEtAlInterleaveScript: as the authors' script for Table 5's and Table 8's 1F1B-I column
/// (sail-sg/zero-bubble-pipeline-parallelism, branch arxiv, commit f68d3879 "for arxiv paper",
/// megatron/core/pipeline_parallel/efficiency.py and interleave.py, get_interleave_schedule: the
/// wrap-around hop of interleaved 1F1B, the last rank's chunk c - 1 to the first rank's chunk c
/// in the forward and back in the backward, is waited for only by the first micro-batch of each
/// group of p (`elif _rk == 0 and v > 0`); micro-batches 1..p-1 of a group take it for free).
/// Only the interleaved placement has such a hop; under the other kinds both are the same.
enum class Hops { kEveryHop, kAsQiEtAlInterleaveScript };

/// As run_event_model below, for given orders: steps[r] is rank r's, placed as `kind` places v
/// chunks per rank (virtual_stage_of). Used for orders build_schedule does not give (ZB-V's
/// cost-aware order, core/zb_v_cost_aware.hpp).
inline std::vector<RankSpan> run_event_model_of(PipelineScheduleKind kind, int64_t p, int64_t v,
                                                const std::vector<std::vector<ScheduleStep>>& steps,
                                                const PassCosts& c, Hops hops = Hops::kEveryHop) {
  const bool split = splits_backward(kind);
  const bool both = bidirectional(kind);
  const int64_t nvs = p * v;
  std::map<std::tuple<int, int64_t, int64_t>, double> done;  // (pass, mb, vstage) -> end
  std::vector<size_t> pos(static_cast<size_t>(p), 0);
  std::vector<RankSpan> span(static_cast<size_t>(p));
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      auto& i = pos[static_cast<size_t>(r)];
      RankSpan& sp = span[static_cast<size_t>(r)];
      while (i < steps[static_cast<size_t>(r)].size()) {
        const ScheduleStep& s = steps[static_cast<size_t>(r)][i];
        const int64_t vs = virtual_stage_of(kind, p, r, s.model_chunk);
        const int64_t first = both && vs >= p ? p : 0;        // the micro-batch's pipeline
        const int64_t last = both && vs < p ? p - 1 : nvs - 1;  // ... its first and last stage
        std::optional<std::tuple<int, int64_t, int64_t>> dep;
        int64_t from = vs;  // the stage the input comes from
        if (s.pass == Pass::kForward) {
          if (vs > first) dep = {0, s.micro_batch, from = vs - 1};
        } else if (s.pass == Pass::kBackward) {
          dep = vs < last ? std::tuple<int, int64_t, int64_t>{1, s.micro_batch, from = vs + 1}
                          : std::tuple<int, int64_t, int64_t>{0, s.micro_batch, vs};
        } else {
          dep = {1, s.micro_batch, vs};
        }
        double start = sp.end;
        if (dep) {
          auto it = done.find(*dep);
          if (it == done.end()) break;
          const bool hop = rank_of_virtual_stage(kind, p, from) != r;
          // The wrap-around hop between two chunks (vs - from crosses a chunk boundary from the
          // last rank to the first or back), skipped by the authors' script but for a group's
          // first micro-batch.
          const bool wrap = !v_shaped(kind) && v > 1 && from / p != vs / p;
          if (hops == Hops::kEveryHop || !wrap || s.micro_batch % p == 0) {
            start = std::max(start, it->second + (hop ? c.comm : 0.0));
          }
        }
        const double d = s.pass == Pass::kForward    ? c.f
                         : s.pass == Pass::kBackward ? (split ? c.b : c.b + c.w)
                                                     : c.w;
        if (sp.start < 0) sp.start = start;
        sp.end = start + d;
        done[{static_cast<int>(s.pass), s.micro_batch, vs}] = sp.end;
        ++i;
        progress = true;
      }
    }
  }
  for (int64_t r = 0; r < p; ++r) {
    EXPECT_EQ(pos[static_cast<size_t>(r)], steps[static_cast<size_t>(r)].size())
        << "deadlock at rank " << r << " of " << p << ", " << to_string(kind);
  }
  return span;
}

/// Runs the schedule of `kind` on p ranks with m micro-batches and v model chunks per rank
/// (build_schedule) and returns each rank's span. A micro-batch's forward runs through its
/// pipeline's virtual stages in order, its backward in reverse (the pipeline's last stage: after
/// its own forward), a W after its own B; under a bidirectional() kind each direction's p stages
/// are a pipeline of their own. Fails the calling test on a deadlock.
inline std::vector<RankSpan> run_event_model(PipelineScheduleKind kind, int64_t p, int64_t m,
                                             int64_t v, const PassCosts& c,
                                             Hops hops = Hops::kEveryHop) {
  std::vector<std::vector<ScheduleStep>> steps;
  for (int64_t r = 0; r < p; ++r) steps.push_back(build_schedule(kind, p, r, m, v));
  return run_event_model_of(kind, p, v, steps, c, hops);
}

/// Qi et al.'s bubble rate (ICLR 2024 sec. 5.3): (cost - m (T_F + T_B + T_W)) / cost, the cost
/// the longest span of a rank from its first op to its last (each rank measured from its own
/// start: the paper bypasses the optimizer's synchronization, sec. 4; zb.py's best_time). The
/// costs are per stage; each of a rank's v chunks takes 1/v of them (a chunk is 1/v of a stage's
/// layers; under a bidirectional() kind each chunk is a whole stage), the transfer delay stays
/// whole.
inline double bubble_rate(PipelineScheduleKind kind, int64_t p, int64_t m, int64_t v,
                          const PassCosts& stage, Hops hops = Hops::kEveryHop) {
  const double share = bidirectional(kind) ? 1.0 : 1.0 / static_cast<double>(v);
  const PassCosts chunk{stage.f * share, stage.b * share, stage.w * share, stage.comm};
  double cost = 0;
  for (const RankSpan& s : run_event_model(kind, p, m, v, chunk, hops)) {
    cost = std::max(cost, s.end - s.start);
  }
  return (cost - static_cast<double>(m) * (stage.f + stage.b + stage.w)) / cost;
}

}  // namespace traintwin::pipeline_events
