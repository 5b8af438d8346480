#include "core/schedule.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

// One schedule configuration: kind, p = pp_size, m = num_micro_batches, v = num_model_chunks.
struct Config {
  PipelineScheduleKind kind;
  int64_t p;
  int64_t m;
  int64_t v;
};

bool is_gpipe(const Config& c) { return c.kind == PipelineScheduleKind::kGPipe; }

// Test name suffix: "GPipe_p4_m8_v1", "OneFOneB_p2_m4_v1", "Interleaved_p2_m4_v3".
std::string config_name(const Config& c) {
  const char* kind = is_gpipe(c) ? "GPipe" : (c.v == 1 ? "OneFOneB" : "Interleaved");
  return std::string(kind) + "_p" + std::to_string(c.p) + "_m" + std::to_string(c.m) + "_v" +
         std::to_string(c.v);
}

// The test grid: p in {1,2,3,4,8}, m in {1,2,3,4,8,12,16}; GPipe and 1F1B with v = 1;
// interleaved 1F1B with v in {2,3,4} where m % p == 0.
std::vector<Config> grid() {
  std::vector<Config> configs;
  for (int64_t p : {1, 2, 3, 4, 8}) {
    for (int64_t m : {1, 2, 3, 4, 8, 12, 16}) {
      configs.push_back({PipelineScheduleKind::kGPipe, p, m, 1});
      configs.push_back({PipelineScheduleKind::k1F1B, p, m, 1});
      if (m % p != 0) continue;
      for (int64_t v : {2, 3, 4}) configs.push_back({PipelineScheduleKind::k1F1B, p, m, v});
    }
  }
  return configs;
}

std::vector<std::vector<ScheduleStep>> all_ranks(const Config& c) {
  std::vector<std::vector<ScheduleStep>> schedules;
  for (int64_t r = 0; r < c.p; ++r) schedules.push_back(build_schedule(c.kind, c.p, r, c.m, c.v));
  return schedules;
}

std::vector<std::string> step_names(const std::vector<ScheduleStep>& schedule) {
  std::vector<std::string> names;
  for (const ScheduleStep& s : schedule) names.push_back(to_string(s));
  return names;
}

// Megatron-LM closed forms, written here independently of the library.
int64_t expected_warmup(const Config& c, int64_t rank) {
  if (is_gpipe(c)) return c.m;
  if (c.v == 1) return std::min(c.p - rank - 1, c.m);
  return std::min((c.p - rank - 1) * 2 + (c.v - 1) * c.p, c.m * c.v);
}

int64_t expected_in_flight_bound(const Config& c, int64_t rank) {
  if (is_gpipe(c)) return c.m;
  if (c.v == 1) return std::min(c.p - rank, c.m);
  return std::min((c.p - rank - 1) * 2 + (c.v - 1) * c.p + 1, c.m * c.v);
}

// A tiny list scheduler for p ranks that run their schedules with no communication cost.
//
// Time is counted in integer ticks. Rank r runs its steps strictly in schedule order, one at a
// time; a step starts at the latest of: the end of the previous step on that rank, and the end of
// the steps it depends on:
//   forward  (mb, virtual stage j): forward (mb, j-1)                      (none for j = 0)
//   backward (mb, virtual stage j): forward (mb, j) and backward (mb, j+1)  (none for j = p*v-1)
// where chunk c of rank r is virtual stage c*p + r. A rank whose next step waits on a step that
// never runs is stuck; the run then does not complete (a deadlock).
struct SimResult {
  bool completed = false;
  int64_t makespan_ticks = 0;              // end of the last step of any rank
  std::vector<int64_t> busy_ticks;         // per rank: sum of the costs of its steps
  std::vector<int64_t> first_start_ticks;  // per rank: start of its first step
  std::string stuck;                       // on a deadlock: the next step of each stuck rank
};

SimResult simulate(const std::vector<std::vector<ScheduleStep>>& schedules, int64_t p, int64_t v,
                   int64_t forward_cost_ticks, int64_t backward_cost_ticks) {
  using Key = std::pair<int64_t, int64_t>;  // (micro-batch, virtual stage)
  std::map<Key, int64_t> forward_end_ticks;
  std::map<Key, int64_t> backward_end_ticks;
  const int64_t num_stages = p * v;
  const auto end_of = [](const std::map<Key, int64_t>& ends, Key key) -> int64_t {
    const auto it = ends.find(key);
    return it == ends.end() ? -1 : it->second;
  };

  SimResult result;
  result.busy_ticks.assign(p, 0);
  result.first_start_ticks.assign(p, -1);
  std::vector<size_t> next(p, 0);
  std::vector<int64_t> rank_free_ticks(p, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      while (next[r] < schedules[r].size()) {
        const ScheduleStep& s = schedules[r][next[r]];
        const int64_t stage = s.model_chunk * p + r;
        const Key key{s.micro_batch, stage};
        int64_t ready_ticks = rank_free_ticks[r];
        bool ready = true;
        const auto need = [&](const std::map<Key, int64_t>& ends, Key dep) {
          const int64_t end = end_of(ends, dep);
          if (end < 0) ready = false;
          ready_ticks = std::max(ready_ticks, end);
        };
        if (s.pass == Pass::kForward) {
          if (stage > 0) need(forward_end_ticks, {s.micro_batch, stage - 1});
        } else {
          need(forward_end_ticks, key);
          if (stage < num_stages - 1) need(backward_end_ticks, {s.micro_batch, stage + 1});
        }
        if (!ready) break;
        const int64_t cost = s.pass == Pass::kForward ? forward_cost_ticks : backward_cost_ticks;
        (s.pass == Pass::kForward ? forward_end_ticks : backward_end_ticks)[key] =
            ready_ticks + cost;
        if (result.first_start_ticks[r] < 0) result.first_start_ticks[r] = ready_ticks;
        rank_free_ticks[r] = ready_ticks + cost;
        result.busy_ticks[r] += cost;
        result.makespan_ticks = std::max(result.makespan_ticks, rank_free_ticks[r]);
        ++next[r];
        progress = true;
      }
    }
  }
  result.completed = true;
  for (int64_t r = 0; r < p; ++r) {
    if (next[r] < schedules[r].size()) {
      result.completed = false;
      result.stuck += " rank " + std::to_string(r) + " at " + to_string(schedules[r][next[r]]);
    }
  }
  return result;
}

// Message of the InvalidArgument `fn` throws, or "" when it throws nothing.
std::string invalid_argument_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Properties over the whole grid, every rank
// ---------------------------------------------------------------------------------------------

class ScheduleGridTest : public ::testing::TestWithParam<Config> {};

// 1. Each (micro-batch, chunk) runs exactly once forward and once backward on every rank, the
//    backward after the forward; ids are in range.
TEST_P(ScheduleGridTest, EachPassOnceBackwardAfterForward) {
  const Config c = GetParam();
  for (int64_t r = 0; r < c.p; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::vector<ScheduleStep> schedule = build_schedule(c.kind, c.p, r, c.m, c.v);
    ASSERT_EQ(schedule.size(), static_cast<size_t>(2 * c.m * c.v));
    std::map<std::pair<int64_t, int64_t>, size_t> forward_at;
    std::map<std::pair<int64_t, int64_t>, size_t> backward_at;
    for (size_t i = 0; i < schedule.size(); ++i) {
      const ScheduleStep& s = schedule[i];
      ASSERT_GE(s.micro_batch, 0);
      ASSERT_LT(s.micro_batch, c.m);
      ASSERT_GE(s.model_chunk, 0);
      ASSERT_LT(s.model_chunk, c.v);
      auto& seen = s.pass == Pass::kForward ? forward_at : backward_at;
      ASSERT_TRUE(seen.emplace(std::pair{s.micro_batch, s.model_chunk}, i).second)
          << to_string(s) << " appears twice";
    }
    ASSERT_EQ(forward_at.size(), static_cast<size_t>(c.m * c.v));
    ASSERT_EQ(backward_at.size(), static_cast<size_t>(c.m * c.v));
    for (const auto& [key, i] : backward_at) {
      EXPECT_LT(forward_at.at(key), i) << "backward before forward: " << to_string(schedule[i]);
    }
  }
}

// Warm-up: the forwards before the first backward, against the library and the closed form.
TEST_P(ScheduleGridTest, WarmupCountMatchesClosedForm) {
  const Config c = GetParam();
  for (int64_t r = 0; r < c.p; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::vector<ScheduleStep> schedule = build_schedule(c.kind, c.p, r, c.m, c.v);
    const auto first_backward =
        std::find_if(schedule.begin(), schedule.end(),
                     [](const ScheduleStep& s) { return s.pass == Pass::kBackward; });
    const int64_t leading_forwards = first_backward - schedule.begin();
    // In 1F1B the steady phase starts with a forward, so only the all-forward warm-up case
    // (warm-up == m*v) has exactly `warmup` leading forwards; otherwise there is one more.
    const int64_t warmup = num_warmup_steps(c.kind, c.p, r, c.m, c.v);
    EXPECT_EQ(warmup, expected_warmup(c, r));
    EXPECT_EQ(leading_forwards, warmup < c.m * c.v ? warmup + 1 : warmup);
  }
}

// 2. Cross-stage order: the unit-cost list scheduler (forward = backward = 1 tick) never
//    deadlocks, so every stage's forward of a micro-batch can follow the previous stage's and
//    every backward the next stage's. Also with backward = 2 forwards (the usual ratio).
TEST_P(ScheduleGridTest, ListSchedulerCompletesWithoutDeadlock) {
  const Config c = GetParam();
  const auto schedules = all_ranks(c);
  for (const auto& [forward_cost, backward_cost] : {std::pair{1, 1}, std::pair{1, 2}}) {
    const SimResult sim = simulate(schedules, c.p, c.v, forward_cost, backward_cost);
    EXPECT_TRUE(sim.completed) << "deadlock (f=" << forward_cost << ", b=" << backward_cost
                               << "):" << sim.stuck;
  }
}

// 3. In-flight activations: recounted here, never above the closed-form bound, and equal to it
//    (the bound is tight for every rank of every grid point), and to the library's functions.
TEST_P(ScheduleGridTest, InFlightReachesBoundExactly) {
  const Config c = GetParam();
  for (int64_t r = 0; r < c.p; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::vector<ScheduleStep> schedule = build_schedule(c.kind, c.p, r, c.m, c.v);
    const int64_t bound = expected_in_flight_bound(c, r);
    int64_t in_flight = 0;
    int64_t peak = 0;
    for (const ScheduleStep& s : schedule) {
      in_flight += s.pass == Pass::kForward ? 1 : -1;
      ASSERT_GE(in_flight, 0);
      ASSERT_LE(in_flight, bound) << "after " << to_string(s);
      peak = std::max(peak, in_flight);
    }
    EXPECT_EQ(peak, bound);
    EXPECT_EQ(max_in_flight(schedule), bound);
    EXPECT_EQ(in_flight_bound(c.kind, c.p, r, c.m, c.v), bound);
  }
}

// 3b. The peak without the schedule (peak_in_flight_weighted, periodic in p x v steady steps)
//     equals the scan of the built schedule, for equal, uneven and one-chunk weights.
TEST_P(ScheduleGridTest, PeakInFlightWithoutTheScheduleEqualsTheScan) {
  const Config c = GetParam();
  for (int64_t r = 0; r < c.p; ++r) {
    const std::vector<ScheduleStep> schedule = build_schedule(c.kind, c.p, r, c.m, c.v);
    std::vector<std::vector<int64_t>> weights = {std::vector<int64_t>(static_cast<size_t>(c.v), 1)};
    std::vector<int64_t> uneven;
    for (int64_t k = 0; k < c.v; ++k) uneven.push_back(7 + 5 * k - (k == 1 ? 9 : 0));
    weights.push_back(uneven);
    for (int64_t k = 0; k < c.v; ++k) {
      std::vector<int64_t> only(static_cast<size_t>(c.v), 0);
      only[static_cast<size_t>(k)] = 1;
      weights.push_back(only);
    }
    for (const auto& w : weights) {
      ASSERT_EQ(peak_in_flight_weighted(c.kind, c.p, r, c.m, c.v, w),
                max_in_flight_weighted(schedule, w))
          << "rank " << r << " weights " << ::testing::PrintToString(w);
    }
  }
}

// 4. Bubble fraction.
//
// Cost model: a forward and a backward of one (micro-batch, model chunk) each cost 1/v time
// units, so that the work of a rank (2*m*v steps) is 2*m units whatever v is. The simulation
// counts ticks of 1/v unit (every step costs 1 tick); the fractions below are scale-free.
//   makespan = end of the last step of any rank (all ranks start at 0),
//   busy     = steps of the rank x cost of a step (the same 2*m*v ticks on every rank),
//   bubble fraction = (makespan - busy) / makespan.
// Theory (Narayanan et al. 2021, forward cost == backward cost): GPipe and 1F1B idle
// (p-1)*(t_f+t_b) per rank, interleaving divides that by v, so
//   GPipe, 1F1B:  (p-1) / (m + p - 1)          bubble time / ideal time = (p-1) / m
//   interleaved:  (p-1) / (v*m + p - 1)        bubble time / ideal time = (p-1) / (v*m)
// Checked exactly in integers by cross-multiplication, on every rank.
TEST_P(ScheduleGridTest, BubbleFractionIsExact) {
  const Config c = GetParam();
  const SimResult sim = simulate(all_ranks(c), c.p, c.v, 1, 1);
  ASSERT_TRUE(sim.completed) << sim.stuck;
  const int64_t effective_m = c.m * c.v;  // v*m virtual micro-batches (v == 1: m)
  EXPECT_EQ(sim.makespan_ticks, 2 * (effective_m + c.p - 1));
  for (int64_t r = 0; r < c.p; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const int64_t busy = sim.busy_ticks[r];
    const int64_t bubble = sim.makespan_ticks - busy;
    ASSERT_EQ(busy, 2 * effective_m);
    // bubble / makespan == (p-1) / (v*m + p - 1)
    EXPECT_EQ(bubble * (effective_m + c.p - 1), sim.makespan_ticks * (c.p - 1));
    // bubble / busy == (p-1) / (v*m): the paper's bubble time ratio.
    EXPECT_EQ(bubble * effective_m, busy * (c.p - 1));
    // The library's closed form agrees with the measured fraction.
    EXPECT_DOUBLE_EQ(ideal_bubble_fraction(c.kind, c.p, c.m, c.v),
                     static_cast<double>(bubble) / static_cast<double>(sim.makespan_ticks));
    // Rank r can start only after r forwards upstream: the fill of the pipeline.
    EXPECT_EQ(sim.first_start_ticks[r], r);
  }
}

// With backward = 2 x forward the fractions stay the same: GPipe and 1F1B idle
// (p-1)*(t_f+t_b), interleaved 1F1B (p-1)*(t_f+t_b)/v, per rank. Megatron's warm-up count is
// derived for t_f == t_b, yet on this whole grid the interleaved schedule still reaches the
// ideal exactly (measured: makespan = 3*v*m + 3*(p-1) ticks with t_f = 1, t_b = 2 ticks).
TEST_P(ScheduleGridTest, BubbleFractionWithBackwardTwiceForward) {
  const Config c = GetParam();
  const SimResult sim = simulate(all_ranks(c), c.p, c.v, 1, 2);
  ASSERT_TRUE(sim.completed) << sim.stuck;
  const int64_t effective_m = c.m * c.v;
  const int64_t busy = 3 * effective_m;
  for (int64_t r = 0; r < c.p; ++r) ASSERT_EQ(sim.busy_ticks[r], busy);
  const int64_t bubble = sim.makespan_ticks - busy;
  EXPECT_EQ(bubble * (effective_m + c.p - 1), sim.makespan_ticks * (c.p - 1));
  EXPECT_EQ(bubble * effective_m, busy * (c.p - 1));
}

INSTANTIATE_TEST_SUITE_P(Grid, ScheduleGridTest, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<Config>& param_info) {
                           return config_name(param_info.param);
                         });

// ---------------------------------------------------------------------------------------------
// Hand-worked schedules
// ---------------------------------------------------------------------------------------------

// p=4, m=8. Rank 0: warm-up min(4-0-1, 8) = 3 forwards; steady 5 x (F, B); cool-down 3 B.
TEST(ScheduleTest, OneFOneBFourStagesEightMicroBatchesRankZero) {
  EXPECT_THAT(step_names(one_f_one_b_schedule(4, 0, 8)),
              ElementsAreArray({"F0.0", "F1.0", "F2.0",                          // warm-up
                                "F3.0", "B0.0", "F4.0", "B1.0", "F5.0", "B2.0",  // steady
                                "F6.0", "B3.0", "F7.0", "B4.0",                  //
                                "B5.0", "B6.0", "B7.0"}));                       // cool-down
}

// p=4, m=8. Last rank: no warm-up, strict alternation.
TEST(ScheduleTest, OneFOneBFourStagesEightMicroBatchesLastRank) {
  EXPECT_THAT(step_names(one_f_one_b_schedule(4, 3, 8)),
              ElementsAreArray({"F0.0", "B0.0", "F1.0", "B1.0", "F2.0", "B2.0", "F3.0", "B3.0",
                                "F4.0", "B4.0", "F5.0", "B5.0", "F6.0", "B6.0", "F7.0", "B7.0"}));
}

// m < p: rank 0 of p=4 with m=2 has warm-up min(3, 2) = 2, i.e. GPipe-like but with backwards
// in micro-batch order.
TEST(ScheduleTest, OneFOneBFewerMicroBatchesThanStages) {
  EXPECT_THAT(step_names(one_f_one_b_schedule(4, 0, 2)),
              ElementsAreArray({"F0.0", "F1.0", "B0.0", "B1.0"}));
  EXPECT_THAT(step_names(one_f_one_b_schedule(4, 2, 2)),
              ElementsAreArray({"F0.0", "F1.0", "B0.0", "B1.0"}));
  EXPECT_THAT(step_names(one_f_one_b_schedule(4, 3, 2)),
              ElementsAreArray({"F0.0", "B0.0", "F1.0", "B1.0"}));
}

TEST(ScheduleTest, GPipeBackwardsInReverseOrder) {
  EXPECT_THAT(step_names(gpipe_schedule(3, 1, 3)),
              ElementsAreArray({"F0.0", "F1.0", "F2.0", "B2.0", "B1.0", "B0.0"}));
}

// p=2, v=2, m=4: 8 virtual micro-batches. Forward virtual k -> chunk (k mod 4) / 2, micro-batch
// (k / 4) * 2 + k mod 2:  k = 0..7 -> 0.0 1.0 0.1 1.1 2.0 3.0 2.1 3.1 (mb.chunk).
// Backward virtual k -> chunk 1 - (k mod 4) / 2: 0.1 1.1 0.0 1.0 2.1 3.1 2.0 3.0.
// Rank 0: warm-up min((2-0-1)*2 + (2-1)*2, 8) = 4; steady pairs (F4,B0) (F5,B1) (F6,B2)
// (F7,B3); cool-down B4..B7. (Megatron's doc: "rank 0 | 0 1 0 1 2 3 2 3" for the forwards.)
TEST(ScheduleTest, InterleavedTwoStagesTwoChunksFourMicroBatchesRankZero) {
  EXPECT_THAT(step_names(interleaved_1f1b_schedule(2, 0, 4, 2)),
              ElementsAreArray({"F0.0", "F1.0", "F0.1", "F1.1",                  // warm-up
                                "F2.0", "B0.1", "F3.0", "B1.1", "F2.1", "B0.0",  // steady
                                "F3.1", "B1.0",                                  //
                                "B2.1", "B3.1", "B2.0", "B3.0"}));               // cool-down
}

// Same, rank 1: warm-up min(0*2 + 1*2, 8) = 2.
TEST(ScheduleTest, InterleavedTwoStagesTwoChunksFourMicroBatchesRankOne) {
  EXPECT_THAT(step_names(interleaved_1f1b_schedule(2, 1, 4, 2)),
              ElementsAreArray({"F0.0", "F1.0",                                  // warm-up
                                "F0.1", "B0.1", "F1.1", "B1.1", "F2.0", "B0.0",  // steady
                                "F3.0", "B1.0", "F2.1", "B2.1", "F3.1", "B3.1",  //
                                "B2.0", "B3.0"}));                               // cool-down
}

// m == p: current Megatron has no all-warm-up special case any more (older releases had one),
// so the last rank of p=2, v=2, m=2 warms up with min(0 + 2, 4) = 2 forwards, rank 0 with
// min(2 + 2, 4) = 4 = all of them.
TEST(ScheduleTest, InterleavedMicroBatchesEqualStagesHasNoSpecialCase) {
  EXPECT_EQ(num_warmup_steps(PipelineScheduleKind::k1F1B, 2, 0, 2, 2), 4);
  EXPECT_EQ(num_warmup_steps(PipelineScheduleKind::k1F1B, 2, 1, 2, 2), 2);
  EXPECT_THAT(step_names(interleaved_1f1b_schedule(2, 0, 2, 2)),
              ElementsAreArray({"F0.0", "F1.0", "F0.1", "F1.1", "B0.1", "B1.1", "B0.0", "B1.0"}));
  EXPECT_THAT(step_names(interleaved_1f1b_schedule(2, 1, 2, 2)),
              ElementsAreArray({"F0.0", "F1.0", "F0.1", "B0.1", "F1.1", "B1.1", "B0.0", "B1.0"}));
}

// Hand-computed makespans (1 tick per step): 1F1B p=4 m=8 takes 2*(8+3) = 22 ticks; the
// interleaved p=2 v=2 m=4 case takes 2*(8+1) = 18 ticks (bubble 2 of 18 = 1/9 = (p-1)/(vm+p-1)).
TEST(ScheduleTest, HandComputedMakespans) {
  std::vector<std::vector<ScheduleStep>> one_f_one_b;
  for (int64_t r = 0; r < 4; ++r) one_f_one_b.push_back(one_f_one_b_schedule(4, r, 8));
  EXPECT_EQ(simulate(one_f_one_b, 4, 1, 1, 1).makespan_ticks, 22);
  std::vector<std::vector<ScheduleStep>> interleaved;
  for (int64_t r = 0; r < 2; ++r) interleaved.push_back(interleaved_1f1b_schedule(2, r, 4, 2));
  EXPECT_EQ(simulate(interleaved, 2, 2, 1, 1).makespan_ticks, 18);
}

// The list scheduler itself detects a deadlock: rank 1 runs micro-batch 1 first, but rank 0
// sends micro-batch 1 only after the backward of micro-batch 0, which rank 1 runs later.
TEST(ScheduleTest, ListSchedulerDetectsDeadlock) {
  const std::vector<std::vector<ScheduleStep>> schedules = {{{Pass::kForward, 0, 0},
                                                             {Pass::kBackward, 0, 0},
                                                             {Pass::kForward, 1, 0},
                                                             {Pass::kBackward, 1, 0}},
                                                            {{Pass::kForward, 1, 0},
                                                             {Pass::kBackward, 1, 0},
                                                             {Pass::kForward, 0, 0},
                                                             {Pass::kBackward, 0, 0}}};
  const SimResult sim = simulate(schedules, 2, 1, 1, 1);
  EXPECT_FALSE(sim.completed);
  EXPECT_THAT(sim.stuck, HasSubstr("rank 1 at F1.0"));
}

TEST(ScheduleTest, BuildScheduleDispatches) {
  EXPECT_EQ(build_schedule(PipelineScheduleKind::kGPipe, 4, 1, 8, 1), gpipe_schedule(4, 1, 8));
  EXPECT_EQ(build_schedule(PipelineScheduleKind::k1F1B, 4, 1, 8, 1), one_f_one_b_schedule(4, 1, 8));
  EXPECT_EQ(build_schedule(PipelineScheduleKind::k1F1B, 4, 1, 8, 3),
            interleaved_1f1b_schedule(4, 1, 8, 3));
}

TEST(ScheduleTest, ToString) {
  EXPECT_EQ(to_string(ScheduleStep{Pass::kForward, 3, 1}), "F3.1");
  EXPECT_EQ(to_string(ScheduleStep{Pass::kBackward, 0, 0}), "B0.0");
}

TEST(ScheduleTest, MaxInFlightCountsOutstandingForwards) {
  EXPECT_EQ(max_in_flight({}), 0);
  EXPECT_EQ(max_in_flight(gpipe_schedule(2, 0, 5)), 5);
  EXPECT_EQ(max_in_flight(one_f_one_b_schedule(8, 2, 16)), 6);
}

TEST(ScheduleTest, MaxInFlightWeightedSumsTheChunksWeights) {
  // F0.0 (3) F0.1 (5) B0.1 F1.0 (3) F1.1 (5): peak 3 + 3 + 5 = 11 after the last forward.
  const std::vector<ScheduleStep> steps = {{Pass::kForward, 0, 0}, {Pass::kForward, 0, 1},
                                           {Pass::kBackward, 0, 1}, {Pass::kForward, 1, 0},
                                           {Pass::kForward, 1, 1}, {Pass::kBackward, 1, 1}};
  EXPECT_EQ(max_in_flight_weighted(steps, {3, 5}), 11);
  EXPECT_EQ(max_in_flight_weighted(steps, {1, 1}), max_in_flight(steps));
  EXPECT_EQ(max_in_flight_weighted(steps, {0, 4}), 4);
  // Equal weights w: w x max_in_flight, over real schedules.
  const auto interleaved = interleaved_1f1b_schedule(4, 1, 8, 3);
  EXPECT_EQ(max_in_flight_weighted(interleaved, {2, 2, 2}), 2 * max_in_flight(interleaved));
  EXPECT_THROW(max_in_flight_weighted(steps, {1}), InvalidArgument);
  EXPECT_THROW(max_in_flight_weighted(steps, {1, -1}), InvalidArgument);
}

// Many micro-batches (the steady phase is many periods of p x v steps long) and the errors of
// the schedule and of the weights.
TEST(ScheduleTest, PeakInFlightWithoutTheScheduleOnLongSchedules) {
  for (auto [p, m, v] : std::vector<std::array<int64_t, 3>>{{8, 64, 3}, {4, 96, 4}, {16, 48, 2},
                                                            {8, 200, 1}, {1, 9, 1}}) {
    for (int64_t r = 0; r < p; ++r) {
      const auto schedule = build_schedule(PipelineScheduleKind::k1F1B, p, r, m, v);
      std::vector<int64_t> w;
      for (int64_t k = 0; k < v; ++k) w.push_back(3 + ((k * 5) % 4));
      EXPECT_EQ(peak_in_flight_weighted(PipelineScheduleKind::k1F1B, p, r, m, v, w),
                max_in_flight_weighted(schedule, w))
          << "p " << p << " m " << m << " v " << v << " rank " << r;
    }
  }
  EXPECT_THROW(peak_in_flight_weighted(PipelineScheduleKind::k1F1B, 4, 0, 6, 2, {1, 1}),
               InvalidArgument);  // m % p != 0 with interleaving
  EXPECT_THROW(peak_in_flight_weighted(PipelineScheduleKind::k1F1B, 4, 0, 8, 2, {1}),
               InvalidArgument);  // a weight missing
  EXPECT_THROW(peak_in_flight_weighted(PipelineScheduleKind::k1F1B, 4, 0, 8, 2, {1, -1}),
               InvalidArgument);
  EXPECT_THROW(peak_in_flight_weighted(PipelineScheduleKind::kGPipe, 4, 0, 8, 2, {1, 1}),
               InvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

TEST(ScheduleTest, RejectsBadPipelineArguments) {
  EXPECT_THAT(invalid_argument_message([] { gpipe_schedule(0, 0, 4); }), HasSubstr("pp_size"));
  EXPECT_THAT(invalid_argument_message([] { gpipe_schedule(4, 4, 4); }), HasSubstr("pp_rank"));
  EXPECT_THAT(invalid_argument_message([] { one_f_one_b_schedule(4, -1, 4); }),
              HasSubstr("pp_rank"));
  EXPECT_THAT(invalid_argument_message([] { one_f_one_b_schedule(4, 0, 0); }),
              HasSubstr("num_micro_batches"));
  EXPECT_THAT(invalid_argument_message([] { interleaved_1f1b_schedule(2, 2, 4, 2); }),
              HasSubstr("pp_rank"));
}

TEST(ScheduleTest, InterleavedRejectsMicroBatchesNotMultipleOfPipeline) {
  const std::string message =
      invalid_argument_message([] { interleaved_1f1b_schedule(4, 0, 6, 2); });
  EXPECT_THAT(message, HasSubstr("num_micro_batches (6)"));
  EXPECT_THAT(message, HasSubstr("multiple of pp_size (4)"));
  EXPECT_THAT(
      invalid_argument_message([] { build_schedule(PipelineScheduleKind::k1F1B, 4, 0, 6, 2); }),
      HasSubstr("multiple of pp_size"));
  EXPECT_THAT(
      invalid_argument_message([] { num_warmup_steps(PipelineScheduleKind::k1F1B, 4, 0, 6, 2); }),
      HasSubstr("multiple of pp_size"));
  EXPECT_THAT(
      invalid_argument_message([] { in_flight_bound(PipelineScheduleKind::k1F1B, 4, 0, 6, 2); }),
      HasSubstr("multiple of pp_size"));
}

TEST(ScheduleTest, InterleavedRejectsFewerThanTwoChunks) {
  EXPECT_THAT(invalid_argument_message([] { interleaved_1f1b_schedule(2, 0, 4, 1); }),
              HasSubstr("num_model_chunks"));
}

TEST(ScheduleTest, BuildScheduleRejectsGPipeWithChunksAndBadChunkCount) {
  EXPECT_THAT(
      invalid_argument_message([] { build_schedule(PipelineScheduleKind::kGPipe, 4, 0, 8, 2); }),
      HasSubstr("gpipe"));
  EXPECT_THAT(
      invalid_argument_message([] { build_schedule(PipelineScheduleKind::k1F1B, 4, 0, 8, 0); }),
      HasSubstr("num_model_chunks"));
  EXPECT_THAT(
      invalid_argument_message([] { num_warmup_steps(PipelineScheduleKind::kGPipe, 4, 0, 8, 2); }),
      HasSubstr("gpipe"));
  EXPECT_THAT(
      invalid_argument_message([] { in_flight_bound(PipelineScheduleKind::kGPipe, 4, 9, 8, 1); }),
      HasSubstr("pp_rank"));
}

TEST(ScheduleTest, MaxInFlightRejectsBackwardBeforeForward) {
  EXPECT_THAT(invalid_argument_message([] {
                max_in_flight({{Pass::kBackward, 0, 0}});
              }),
              HasSubstr("B0.0"));
}

// The pipeline's transfer rule and tag (core/schedule.hpp), which the lowering, the estimator and
// the executor share: every tag reads back as the transfer that made it, distinct transfers get
// distinct tags, and the output a step sends is the input its neighbour's step receives.
TEST(PipelineTransfer, TagsRoundTripAndAreUnique) {
  const int64_t vstages = 6;  // p 3 x v 2
  std::set<int64_t> tags;
  for (int64_t mb = 0; mb < 5; ++mb) {
    for (int64_t vs = 0; vs < vstages; ++vs) {
      for (Pass pass : {Pass::kForward, Pass::kBackward}) {
        const PipelineTransfer t{mb, vs, pass};
        const int64_t tag = pipeline_tag(t, vstages);
        EXPECT_EQ(read_pipeline_tag(tag, vstages), t);
        EXPECT_TRUE(tags.insert(tag).second) << tag;
      }
    }
  }
  // Worked by hand: micro-batch 2 from virtual stage 4 of 6, backward: (2 x 6 + 4) x 2 + 1 = 33.
  EXPECT_EQ(pipeline_tag({2, 4, Pass::kBackward}, 6), 33);
  EXPECT_EQ(PipelineTransfer({2, 4, Pass::kBackward}).receiver_vstage(), 3);
  EXPECT_THROW(pipeline_tag({0, 6, Pass::kForward}, 6), InvalidArgument);
  EXPECT_THROW(pipeline_tag({-1, 0, Pass::kForward}, 6), InvalidArgument);
  EXPECT_THROW(read_pipeline_tag(-2, 6), InvalidArgument);
  EXPECT_THROW(read_pipeline_tag(3, 0), InvalidArgument);
}

TEST(PipelineTransfer, WhatAStepSendsIsWhatItsNeighbourReceives) {
  const int64_t vstages = 8;
  for (int64_t vs = 0; vs < vstages; ++vs) {
    for (Pass pass : {Pass::kForward, Pass::kBackward}) {
      const ScheduleStep step{pass, 3, 0};
      const auto out = step_output(step, vs, vstages);
      const bool edge = pass == Pass::kForward ? vs == vstages - 1 : vs == 0;
      ASSERT_EQ(out.has_value(), !edge) << vs;
      if (!out) continue;
      EXPECT_EQ(out->sender_vstage, vs);
      const auto in = step_input(step, out->receiver_vstage(), vstages);
      ASSERT_TRUE(in.has_value());
      EXPECT_EQ(*in, *out);
    }
  }
  EXPECT_FALSE(step_input({Pass::kForward, 0, 0}, 0, vstages));
  EXPECT_FALSE(step_input({Pass::kBackward, 0, 0}, vstages - 1, vstages));
}

}  // namespace
}  // namespace traintwin
