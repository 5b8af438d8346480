// DualPipe, the bidirectional schedule (core/schedule.hpp dualpipe_schedule; DeepSeek-V3
// Technical Report sec. 3.2.1; deepseek-ai/DualPipe dualpipe.py, DualPipe.step): its exact orders
// worked by hand from dualpipe.py's eight steps, its placement (two parameter copies per rank,
// virtual stages p..2p-1 the reverse direction) and point-to-point peers, its refusals (the
// asserts of DualPipe.step), its in-flight activations (the DualPipe README's PP + 1) and its
// bubble under unit costs by an event model over the two directions, which is DualPipeV's on p/2
// ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "core/schedule.hpp"
#include "pipeline_event_model.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
constexpr auto kDualPipe = PipelineScheduleKind::kDualPipe;
constexpr auto kDualPipeV = PipelineScheduleKind::kDualPipeV;

std::string text(const std::vector<ScheduleStep>& steps) {
  std::string out;
  for (const ScheduleStep& s : steps) out += (out.empty() ? "" : " ") + to_string(s);
  return out;
}

// dualpipe.py, DualPipe.step for 2 ranks and 4 micro-batches (num_half_ranks 1, half_rank 0 on
// both ranks; micro-batches 0, 1 enter at rank 0, 2, 3 at rank 1; chunk 0 of rank r is stage r
// of the forward direction, chunk 1 stage 1 - r of the reverse one). Steps 1, 3, 5 and 7 run 0
// times. Rank 0 (phase = direction): 2. F phase 0 (F0.0), F phase 1 (F2.1: rank 0 holds the
// reverse direction's last stage); 4. one round: F&B (F1.0 with B2.1), F&B (F3.1 with B0.0), each
// backward with its W; 6. B phase 1 (B3.1, whole), then B phase 0 (B1.0) with its W deferred (the
// switch after phase 1 on an even half rank); 8. that W. Rank 1 (second half: phase 0 is the
// reverse direction) runs the same phases, so every step's direction flips.
TEST(DualPipeSchedule, OrdersOfDualPipeStepWorkedByHandP2) {
  EXPECT_EQ(text(dualpipe_schedule(2, 0, 4)),
            "F0.0 F2.1 F1.0 B2.1 W2.1 F3.1 B0.0 W0.0 B3.1 W3.1 B1.0 W1.0");
  EXPECT_EQ(text(dualpipe_schedule(2, 1, 4)),
            "F2.1 F0.0 F3.1 B0.0 W0.0 F1.0 B2.1 W2.1 B1.0 W1.0 B3.1 W3.1");
  EXPECT_EQ(build_schedule(kDualPipe, 2, 1, 4, 2), dualpipe_schedule(2, 1, 4));
}

// p = 4, m = 8 (num_half_ranks 2; micro-batches 0..3 forward, 4..7 reverse). Rank 0, half rank 0:
// 1. (2 - 0 - 1) x 2 = 2 F phase 0 (F0.0 F1.0); 2. F2.0 F4.1; 3. once: B4.1 with its W deferred,
// that W, F5.1; 4. 4 - 4 + 0 + 1 = 1 round: F&B (F3.0, B5.1), F&B (F6.1, B0.0); 5. once: B6.1,
// F&B (F7.1, B1.0); 6. once: B7.1 whole, B2.0 deferred; 7. once: W2.0, B3.0 deferred; 8. W3.0.
// Rank 1, half rank 1: 1. none; 2. twice F phase 0, F phase 1 (F0.0 F4.1 F1.0 F5.1); 3. none;
// 4. 4 - 4 + 1 + 1 = 2 rounds: (F2.0, B4.1) (F6.1, B0.0), (F3.0, B5.1) (F7.1, B1.0); 5. none;
// 6. i = 0: B6.1 B2.0 whole; i = 1 (odd half rank: the switch before phase 1): B7.1 B3.0 both
// deferred; 7. none; 8. W7.1 W3.0.
TEST(DualPipeSchedule, OrdersOfDualPipeStepWorkedByHandP4) {
  EXPECT_EQ(text(dualpipe_schedule(4, 0, 8)),
            "F0.0 F1.0 F2.0 F4.1 B4.1 W4.1 F5.1 F3.0 B5.1 W5.1 F6.1 B0.0 W0.0 B6.1 W6.1 F7.1 "
            "B1.0 W1.0 B7.1 W7.1 B2.0 W2.0 B3.0 W3.0");
  EXPECT_EQ(text(dualpipe_schedule(4, 1, 8)),
            "F0.0 F4.1 F1.0 F5.1 F2.0 B4.1 W4.1 F6.1 B0.0 W0.0 F3.0 B5.1 W5.1 F7.1 B1.0 W1.0 "
            "B6.1 W6.1 B2.0 W2.0 B7.1 B3.0 W7.1 W3.0");
  // Rank 2 is rank 1 mirrored (half rank 1, second half): phase 0 is the reverse direction.
  EXPECT_EQ(text(dualpipe_schedule(4, 2, 8)),
            "F4.1 F0.0 F5.1 F1.0 F6.1 B0.0 W0.0 F2.0 B4.1 W4.1 F7.1 B1.0 W1.0 F3.0 B5.1 W5.1 "
            "B2.0 W2.0 B6.1 W6.1 B3.0 B7.1 W3.0 W7.1");
  EXPECT_EQ(num_warmup_steps(kDualPipe, 4, 2, 8, 2), 3);
}

// The flip of a step to the other direction: chunk 1 - c, micro-batch shifted by m/2.
ScheduleStep mirrored(ScheduleStep s, int64_t m) {
  s.micro_batch += s.model_chunk == 0 ? m / 2 : -m / 2;
  s.model_chunk = 1 - s.model_chunk;
  return s;
}

// Over a grid: every rank runs F, B, W of each of the m micro-batches once, in that order, the
// chunk being the micro-batch's direction (0..m/2-1 forward, m/2..m-1 reverse); rank p - 1 - r
// runs rank r's order with the directions swapped; each direction's micro-batches run their F's
// and B's in micro-batch order (dualpipe.py's chunk counters).
TEST(DualPipeSchedule, EachMicroBatchOnceInItsDirectionAndRanksMirror) {
  for (int64_t p : {2, 4, 6, 8}) {
    for (int64_t m : {2 * p, 2 * p + 2, 4 * p, 6 * p + 4}) {
      for (int64_t r = 0; r < p; ++r) {
        const auto steps = dualpipe_schedule(p, r, m);
        ASSERT_EQ(steps.size(), static_cast<size_t>(3 * m));
        std::map<int64_t, std::string> seen;
        int64_t next[2][2] = {{0, m / 2}, {0, m / 2}};  // [F, B][chunk]
        for (const ScheduleStep& s : steps) {
          ASSERT_EQ(s.model_chunk, s.micro_batch < m / 2 ? 0 : 1) << to_string(s);
          seen[s.micro_batch] += to_string(s).substr(0, 1);
          if (s.pass != Pass::kWeightGrad) {
            int64_t& n = next[s.pass == Pass::kForward ? 0 : 1][s.model_chunk];
            EXPECT_EQ(s.micro_batch, n++) << "p" << p << " r" << r << " m" << m;
          }
        }
        ASSERT_EQ(seen.size(), static_cast<size_t>(m));
        for (const auto& [mb, passes] : seen) {
          EXPECT_EQ(passes, "FBW") << "p" << p << " r" << r << " m" << m << " mb" << mb;
        }
        const auto other = dualpipe_schedule(p, p - 1 - r, m);
        for (size_t i = 0; i < steps.size(); ++i) {
          EXPECT_EQ(other[i], mirrored(steps[i], m)) << "p" << p << " r" << r << " step " << i;
        }
      }
    }
  }
}

// Rank r holds stage r of the forward direction (virtual stage r) and stage p - 1 - r of the
// reverse one (virtual stage 2p - 1 - r = p + (p - 1 - r)): p = 4, rank 0 holds the forward
// direction's embedding stage and the reverse direction's loss stage, rank 3 the other two.
TEST(DualPipeSchedule, TwoParameterCopiesAndThePeersOfEachDirection) {
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(virtual_stage_of(kDualPipe, 4, r, 0), r);
    EXPECT_EQ(virtual_stage_of(kDualPipe, 4, r, 1), 7 - r);
    EXPECT_EQ(rank_of_virtual_stage(kDualPipe, 4, r), r);
    EXPECT_EQ(rank_of_virtual_stage(kDualPipe, 4, 7 - r), r);
  }
  EXPECT_TRUE(bidirectional(kDualPipe));
  EXPECT_FALSE(bidirectional(kDualPipeV));
  EXPECT_TRUE(v_shaped(kDualPipe));
  EXPECT_TRUE(splits_backward(kDualPipe));
  EXPECT_EQ(required_model_chunks(kDualPipe), 2);
  using T = PipelineTransfer;
  const auto in = [](int64_t r, ScheduleStep s) { return rank_step_input(kDualPipe, 4, r, 2, s); };
  const auto out = [](int64_t r, ScheduleStep s) {
    return rank_step_output(kDualPipe, 4, r, 2, s);
  };
  // Forward direction (micro-batch 0): stage 0 on rank 0 takes no input; rank 1 (the middle
  // rank p/2 - 1) sends its activations to rank 2 (DualPipeV keeps that hop on one rank); stage 3
  // on rank 3 computes the loss: no forward output, no backward input.
  EXPECT_FALSE(in(0, {Pass::kForward, 0, 0}));
  EXPECT_EQ(out(1, {Pass::kForward, 0, 0}), (T{0, 1, Pass::kForward}));
  EXPECT_EQ(in(2, {Pass::kForward, 0, 0}), (T{0, 1, Pass::kForward}));
  EXPECT_EQ(rank_of_virtual_stage(kDualPipe, 4, out(1, {Pass::kForward, 0, 0})->receiver_vstage()),
            2);
  EXPECT_FALSE(out(3, {Pass::kForward, 0, 0}));
  EXPECT_FALSE(in(3, {Pass::kBackward, 0, 0}));
  EXPECT_EQ(out(3, {Pass::kBackward, 0, 0}), (T{0, 3, Pass::kBackward}));
  EXPECT_FALSE(out(0, {Pass::kBackward, 0, 0}));
  // Reverse direction (micro-batch 4): virtual stage 4 = its stage 0 on rank 3 takes no input and
  // sends to virtual stage 5 on rank 2; virtual stage 7 on rank 0 computes the loss.
  EXPECT_FALSE(in(3, {Pass::kForward, 4, 1}));
  EXPECT_EQ(out(3, {Pass::kForward, 4, 1}), (T{4, 4, Pass::kForward}));
  EXPECT_EQ(rank_of_virtual_stage(kDualPipe, 4, 5), 2);
  EXPECT_EQ(in(0, {Pass::kForward, 4, 1}), (T{4, 6, Pass::kForward}));
  EXPECT_FALSE(out(0, {Pass::kForward, 4, 1}));
  EXPECT_FALSE(in(0, {Pass::kBackward, 4, 1}));
  EXPECT_EQ(out(0, {Pass::kBackward, 4, 1}), (T{4, 7, Pass::kBackward}));
  EXPECT_FALSE(out(3, {Pass::kBackward, 4, 1}));
  EXPECT_FALSE(in(1, {Pass::kWeightGrad, 4, 1}));
  // Every transfer a rank sends is one its peer receives, with a tag of its own, for p = 4 and 6.
  for (int64_t p : {4, 6}) {
    const int64_t m = 2 * p;
    std::map<int64_t, std::pair<int64_t, int64_t>> sent, received;  // tag -> (from, to)
    for (int64_t r = 0; r < p; ++r) {
      for (const ScheduleStep& s : dualpipe_schedule(p, r, m)) {
        if (auto t = rank_step_output(kDualPipe, p, r, 2, s)) {
          const int64_t to = rank_of_virtual_stage(kDualPipe, p, t->receiver_vstage());
          EXPECT_TRUE(sent.emplace(pipeline_tag(*t, 2 * p), std::pair{r, to}).second);
          EXPECT_EQ(std::abs(to - r), 1) << "p" << p << " " << to_string(s);
        }
        if (auto t = rank_step_input(kDualPipe, p, r, 2, s)) {
          const int64_t from = rank_of_virtual_stage(kDualPipe, p, t->sender_vstage);
          EXPECT_TRUE(received.emplace(pipeline_tag(*t, 2 * p), std::pair{from, r}).second);
        }
      }
    }
    EXPECT_EQ(sent, received);
    // Each micro-batch crosses p - 1 hops forward and p - 1 backward.
    EXPECT_EQ(sent.size(), static_cast<size_t>(2 * m * (p - 1)));
  }
}

// runs_chunks_reversed() against the orders themselves, for every kind with two chunks: the
// chunk of a rank's first forward and the chunk whose last backward (W under a split backward)
// comes last. Chunk 0 first and chunk 0's backward last on every rank of interleaved 1F1B, ZB-V
// and DualPipeV; the other way round on DualPipe's ranks p/2..p-1 only (the estimator times
// those as a kind of stage of their own, since their DP buckets queue in that order).
TEST(DualPipeSchedule, SecondHalfRunsItsChunksInTheOtherOrder) {
  for (const PipelineScheduleKind kind : {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kZbV,
                                          kDualPipeV, kDualPipe}) {
    for (int64_t p : {2, 4, 6, 8}) {
      for (int64_t m : {2 * p, 4 * p}) {
        for (int64_t r = 0; r < p; ++r) {
          const std::vector<ScheduleStep> steps = build_schedule(kind, p, r, m, 2);
          const Pass trigger = splits_backward(kind) ? Pass::kWeightGrad : Pass::kBackward;
          int64_t first_chunk = -1, last_chunk = -1;
          for (const ScheduleStep& st : steps) {
            if (first_chunk < 0 && st.pass == Pass::kForward) first_chunk = st.model_chunk;
            if (st.pass == trigger) last_chunk = st.model_chunk;
          }
          const bool reversed = runs_chunks_reversed(kind, p, r);
          EXPECT_EQ(reversed, kind == kDualPipe && r >= p / 2) << to_string(kind) << " r " << r;
          EXPECT_EQ(first_chunk, reversed ? 1 : 0) << to_string(kind) << " p " << p << " r " << r;
          EXPECT_EQ(last_chunk, reversed ? 1 : 0) << to_string(kind) << " p " << p << " r " << r;
        }
      }
    }
  }
}

TEST(DualPipeSchedule, RefusesWhatDualPipeStepAsserts) {
  try {
    dualpipe_schedule(3, 0, 6);
    FAIL() << "odd p";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("pp_size (3) must be even"));
  }
  try {
    dualpipe_schedule(4, 0, 9);
    FAIL() << "odd m";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("num_micro_batches (9) must be even and >= 2 x pp_size = 8"));
  }
  EXPECT_THROW(dualpipe_schedule(4, 0, 6), InvalidArgument);  // m < 2p
  EXPECT_THROW(dualpipe_schedule(4, 4, 8), InvalidArgument);  // rank outside
  try {
    build_schedule(kDualPipe, 4, 0, 8, 1);
    FAIL() << "one chunk";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("dualpipe schedule needs num_model_chunks == 2 (its two "
                                    "parameter copies"));
  }
}

// Activations per device: PP + 1 (the DualPipe README's table, DualPipe row, PP = p stages, each
// chunk a whole stage), on every rank and for any m; 1F1B's first stage holds PP.
TEST(DualPipeSchedule, InFlightActivationsAsTheReadme) {
  for (int64_t p : {2, 4, 6, 8}) {
    for (int64_t m : {2 * p, 3 * p + 2 * (p % 2), 6 * p}) {
      for (int64_t r = 0; r < p; ++r) {
        EXPECT_EQ(max_in_flight(dualpipe_schedule(p, r, m)), p + 1)
            << "p" << p << " r" << r << " m" << m;
        EXPECT_EQ(in_flight_bound(kDualPipe, p, r, m, 2), p + 1);
      }
    }
  }
}

// ---- the event model over the two directions (tests/core/pipeline_event_model.hpp) ----------

std::vector<pipeline_events::RankSpan> event_model(PipelineScheduleKind kind, int64_t p, int64_t m,
                                           double f, double b, double w) {
  return pipeline_events::run_event_model(kind, p, m, 2, {f, b, w, 0.0});
}

// The two directions mirror each other, so under any costs DualPipe on p ranks runs as DualPipeV
// on p/2 ranks with m/2 micro-batches per chunk ("cut-in-half", the DualPipe README): rank r and
// rank p - 1 - r both take the span of DualPipeV's rank min(r, p - 1 - r).
TEST(DualPipeSchedule, TimedAsDualPipeVOnHalfTheRanks) {
  for (int64_t p : {2, 4, 6, 8}) {
    for (int64_t m : {2 * p, 2 * p + 2, 4 * p + 2}) {
      for (const auto& [f, b, w] : {std::tuple{1.0, 1.0, 1.0}, std::tuple{1.0, 2.0, 1.0},
                                    std::tuple{1.0, 1.3, 0.6}}) {
        const auto dual = event_model(kDualPipe, p, m, f, b, w);
        const auto half = event_model(kDualPipeV, p / 2, m / 2, f, b, w);
        for (int64_t r = 0; r < p; ++r) {
          const pipeline_events::RankSpan& v = half[static_cast<size_t>(std::min(r, p - 1 - r))];
          EXPECT_DOUBLE_EQ(dual[static_cast<size_t>(r)].start, v.start) << "p" << p << " r" << r;
          EXPECT_DOUBLE_EQ(dual[static_cast<size_t>(r)].end, v.end) << "p" << p << " r" << r;
        }
      }
    }
  }
}

// Unit costs (T_F = T_B = T_W = 1 per stage), no communication, each F&B its forward then its
// whole backward: rank r idles p/2 - 1 - h units between its first and its last op, h = min(r, p
// - 1 - r) (the middle ranks none), and every rank ends by 3m + p/2 - 1: DualPipeV's p' - 1 - r
// and 6m' + p' - 1 (tests/core/zero_bubble_v_test.cpp) with p' = p/2, m' = m/2. The DualPipe
// README's (PP/2 - 1)(F&B + B - 3W) counts an F&B as one overlapped step; here its two halves run
// one after the other.
TEST(DualPipeSchedule, BubbleUnderUnitCosts) {
  for (int64_t p : {2, 4, 6, 8, 16}) {
    for (int64_t m : {2 * p, 2 * p + 2, 3 * p + 2 * (p % 2), 5 * p + 2}) {
      const auto span = event_model(kDualPipe, p, m, 1, 1, 1);
      double end = 0;
      for (int64_t r = 0; r < p; ++r) {
        const pipeline_events::RankSpan& s = span[static_cast<size_t>(r)];
        const int64_t h = std::min(r, p - 1 - r);
        EXPECT_DOUBLE_EQ(s.end - s.start - 3.0 * static_cast<double>(m),
                         static_cast<double>(p / 2 - 1 - h))
            << "p" << p << " r" << r << " m" << m;
        end = std::max(end, s.end);
      }
      EXPECT_DOUBLE_EQ(end, 3.0 * static_cast<double>(m) + static_cast<double>(p / 2 - 1));
    }
  }
  const auto span = event_model(kDualPipe, 4, 8, 1, 1, 1);
  EXPECT_DOUBLE_EQ(span[0].start, 0.0);
  EXPECT_DOUBLE_EQ(span[0].end, 25.0);
  EXPECT_DOUBLE_EQ(span[3].end, 25.0);
  // The first rank's idle time over its span: (p/2 - 1)/(3m + p/2 - 1), 1/25 for p = 4, m = 8.
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(kDualPipe, 4, 8, 2), 1.0 / 25.0);
}

// ---- DeepSeek-V3 Table 2: F&B as one overlapped step ----------------------------------------

/// The rank's order grouped into the steps dualpipe.py / dualpipev.py run: an F&B
/// (_forward_backward_chunk: the forward of one chunk and the whole backward of the other, its W
/// not deferred, overlapped as one step that waits for both inputs and sends both outputs at its
/// end) is an F of chunk c followed by a B of chunk 1 - c and that B's W; every other step alone.
/// On the middle rank (`middle`: DualPipe's half rank p/2 - 1, DualPipeV's last rank) the first
/// F&B of step 4 is not overlapped ("We don't overlap these two chunks to further reduce bubble
/// size"): its three passes run one by one.
std::vector<std::vector<ScheduleStep>> dualpipe_steps(const std::vector<ScheduleStep>& s,
                                                      bool middle) {
  std::vector<std::vector<ScheduleStep>> out;
  bool first_pair = true;
  for (size_t i = 0; i < s.size();) {
    const bool pair = i + 2 < s.size() && s[i].pass == Pass::kForward &&
                      s[i + 1].pass == Pass::kBackward &&
                      s[i + 1].model_chunk != s[i].model_chunk &&
                      s[i + 2] == ScheduleStep{Pass::kWeightGrad, s[i + 1].micro_batch,
                                               s[i + 1].model_chunk};
    if (pair && !(middle && first_pair)) {
      out.push_back({s[i], s[i + 1], s[i + 2]});
      i += 3;
    } else {
      out.push_back({s[i]});
      ++i;
    }
    first_pair = first_pair && !pair;
  }
  return out;
}

/// Each rank's idle time (span less work) when every pass costs 1 and an F&B pair costs `fb`,
/// dependencies as pipeline_event_model.hpp's (within a micro-batch's pipeline), no communication.
std::vector<double> idle_with_overlapped_pairs(PipelineScheduleKind kind, int64_t p, int64_t m,
                                               double fb) {
  const bool both = bidirectional(kind);
  std::vector<std::vector<std::vector<ScheduleStep>>> steps;
  for (int64_t r = 0; r < p; ++r) {
    const bool middle = both ? std::min(r, p - 1 - r) == p / 2 - 1 : r == p - 1;
    steps.push_back(dualpipe_steps(build_schedule(kind, p, r, m, 2), middle));
  }
  std::map<std::tuple<int, int64_t, int64_t>, double> done;  // (pass, mb, vstage) -> end
  std::vector<size_t> pos(static_cast<size_t>(p), 0);
  std::vector<double> start(static_cast<size_t>(p), -1), end(static_cast<size_t>(p), 0),
      work(static_cast<size_t>(p), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      const auto ru = static_cast<size_t>(r);
      while (pos[ru] < steps[ru].size()) {
        const auto& unit = steps[ru][pos[ru]];
        double at = end[ru];
        bool ready = true;
        for (const ScheduleStep& s : unit) {
          const int64_t vs = virtual_stage_of(kind, p, r, s.model_chunk);
          const int64_t first = both && vs >= p ? p : 0;
          const int64_t last = both && vs < p ? p - 1 : 2 * p - 1;
          std::optional<std::tuple<int, int64_t, int64_t>> dep;
          if (s.pass == Pass::kForward && vs > first) dep = {0, s.micro_batch, vs - 1};
          if (s.pass == Pass::kBackward) {
            dep = vs < last ? std::tuple<int, int64_t, int64_t>{1, s.micro_batch, vs + 1}
                            : std::tuple<int, int64_t, int64_t>{0, s.micro_batch, vs};
          }
          if (s.pass == Pass::kWeightGrad && unit.size() == 1) dep = {1, s.micro_batch, vs};
          if (!dep) continue;
          auto it = done.find(*dep);
          if (it == done.end()) {
            ready = false;
            break;
          }
          at = std::max(at, it->second);
        }
        if (!ready) break;
        const double d = unit.size() == 3 ? fb : 1.0;
        if (start[ru] < 0) start[ru] = at;
        end[ru] = at + d;
        work[ru] += d;
        for (const ScheduleStep& s : unit) {
          done[{static_cast<int>(s.pass), s.micro_batch,
                virtual_stage_of(kind, p, r, s.model_chunk)}] = end[ru];
        }
        ++pos[ru];
        progress = true;
      }
    }
  }
  std::vector<double> idle;
  for (int64_t r = 0; r < p; ++r) {
    const auto ru = static_cast<size_t>(r);
    EXPECT_EQ(pos[ru], steps[ru].size()) << "deadlock at rank " << r;
    idle.push_back(end[ru] - start[ru] - work[ru]);
  }
  return idle;
}

// DeepSeek-V3 Technical Report Table 2 (and the DualPipe README): DualPipe's bubble is
// (PP/2 - 1)(F&B + B - 3W), B the full backward, whatever the number of micro-batches; DualPipeV's
// the same with PP = 2p stages. With T_F = T_B = T_W = 1 (B = 2) and an F&B that overlaps no
// compute (F&B = 3, its communication hidden) that is 2(PP/2 - 1): the first and the last rank
// idle exactly that, the middle ranks less (DualPipe p = 8: 6 4 3 2 2 3 4 6; an F&B counted as a
// forward then a backward idles half as much, BubbleUnderUnitCosts). With F&B = 2.5 (half a pass
// of overlap) the first rank idles (p/2 - 1) x 1.5 for p = 4 and stays within the formula for
// larger p (the handcrafted order does not reach it exactly there).
TEST(DualPipeSchedule, DeepSeekV3Table2BubbleWithOverlappedPairs) {
  for (int64_t p : {2, 4, 6, 8}) {
    for (int64_t m : {2 * p, 2 * p + 2, 4 * p}) {
      const auto idle = idle_with_overlapped_pairs(kDualPipe, p, m, 3.0);
      const double formula = static_cast<double>(p / 2 - 1) * (3.0 + 2.0 - 3.0);
      EXPECT_DOUBLE_EQ(idle.front(), formula) << "p" << p << " m" << m;
      EXPECT_DOUBLE_EQ(idle.back(), formula) << "p" << p << " m" << m;
      EXPECT_DOUBLE_EQ(*std::max_element(idle.begin(), idle.end()), formula);
      const auto half = idle_with_overlapped_pairs(kDualPipeV, p / 2, m / 2, 3.0);
      for (int64_t r = 0; r < p; ++r) {  // the cut in half: rank r idles as DualPipeV's rank h
        EXPECT_DOUBLE_EQ(idle[static_cast<size_t>(r)],
                         half[static_cast<size_t>(std::min(r, p - 1 - r))]);
      }
      const auto eased = idle_with_overlapped_pairs(kDualPipe, p, m, 2.5);
      EXPECT_LE(eased.front(), static_cast<double>(p / 2 - 1) * (2.5 + 2.0 - 3.0) + 1e-12);
    }
  }
  EXPECT_EQ(idle_with_overlapped_pairs(kDualPipe, 8, 16, 3.0),
            (std::vector<double>{6, 4, 3, 2, 2, 3, 4, 6}));
  EXPECT_DOUBLE_EQ(idle_with_overlapped_pairs(kDualPipe, 4, 8, 2.5).front(), 1.5);
  // DualPipeV, PP = 2p stages on p ranks: (p - 1)(3 + 2 - 3) = 2(p - 1) on its first rank.
  for (int64_t p : {1, 2, 3, 4}) {
    for (int64_t m : {2 * p, 2 * p + 1, 4 * p}) {
      EXPECT_DOUBLE_EQ(idle_with_overlapped_pairs(kDualPipeV, p, m, 3.0).front(),
                       2.0 * static_cast<double>(p - 1))
          << "p" << p << " m" << m;
    }
  }
}

}  // namespace
}  // namespace traintwin
