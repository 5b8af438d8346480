// The V-shaped schedules (core/schedule.hpp): ZB-V (zb_v_schedule; Qi et al., "Zero Bubble
// (Almost) Pipeline Parallelism", arXiv:2401.10241 v2, sec. 6) and DualPipeV (dualpipev_schedule;
// deepseek-ai/DualPipe dualpipev.py): their V placement, their exact orders worked by hand, their
// op-order invariants and cross-rank dependencies, their in-flight activations (ZB-V p M_B as
// 1F1B, DualPipeV PP + 1 chunk sets as the DualPipe README) and their bubbles under unit costs by
// an event model over the virtual stages (the paper's zero bubble for T_F = T_B = T_W).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/schedule.hpp"
#include "pipeline_event_model.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
constexpr auto kZbV = PipelineScheduleKind::kZbV;
constexpr auto kDualPipeV = PipelineScheduleKind::kDualPipeV;

std::string text(const std::vector<ScheduleStep>& steps) {
  std::string out;
  for (const ScheduleStep& s : steps) out += (out.empty() ? "" : " ") + to_string(s);
  return out;
}

TEST(ZbVSchedule, VPlacementOfTheChunks) {
  // p = 4: rank 0 holds stages 0 and 7 (the loss), rank 3 stages 3 and 4.
  EXPECT_EQ(virtual_stage_of(kZbV, 4, 0, 0), 0);
  EXPECT_EQ(virtual_stage_of(kZbV, 4, 0, 1), 7);
  EXPECT_EQ(virtual_stage_of(kZbV, 4, 3, 0), 3);
  EXPECT_EQ(virtual_stage_of(kZbV, 4, 3, 1), 4);
  EXPECT_EQ(virtual_stage_of(kZbV, 4, 1, 1), 6);
  // Megatron's interleaved placement for the others: chunk 1 of rank 1 is stage 5.
  EXPECT_EQ(virtual_stage_of(PipelineScheduleKind::k1F1B, 4, 1, 1), 5);
  for (int64_t vs = 0; vs < 8; ++vs) {
    const int64_t r = rank_of_virtual_stage(kZbV, 4, vs);
    EXPECT_EQ(virtual_stage_of(kZbV, 4, r, vs < 4 ? 0 : 1), vs);
  }
  EXPECT_EQ(rank_of_virtual_stage(kZbV, 4, 4), 3);
  EXPECT_EQ(rank_of_virtual_stage(kZbV, 4, 7), 0);
  EXPECT_EQ(rank_of_virtual_stage(PipelineScheduleKind::k1F1B, 4, 7), 3);
  EXPECT_EQ(required_model_chunks(kZbV), 2);
  EXPECT_EQ(required_model_chunks(PipelineScheduleKind::kZbH1), 1);
  EXPECT_EQ(required_model_chunks(PipelineScheduleKind::k1F1B), 0);
}

TEST(ZbVSchedule, OrdersWorkedByHand) {
  // p = 2, m = 4, rank 0 (stages 0 and 3): 2p - 1 = 3 chunk-0 forwards and F0.1; B's: chunk 1 of
  // 0, 1, then B0.0 B2.1 B1.0 B3.1 B2.0 B3.0; forwards left: F1.1, then F3.0 F2.1 F3.1. Steady:
  // B W F until F3.0 (the last chunk-0 forward), then a forward after chunk-0 B's only (F2.1 after
  // B0.0, none after B2.1, F3.1 after B1.0); cool-down B3.1 B2.0 B3.0 with W one B late (d = 1).
  EXPECT_EQ(text(zb_v_schedule(2, 0, 4)),
            "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F3.0 B0.0 W0.0 F2.1 B2.1 W2.1 B1.0 W1.0 "
            "F3.1 B3.1 B2.0 W3.1 B3.0 W2.0 W3.0");
  // Rank 1 (stages 1 and 2): one chunk-0 forward, one (F0.1, F1.0) pair, F1.1; W three B late.
  EXPECT_EQ(text(zb_v_schedule(2, 1, 4)),
            "F0.0 F0.1 F1.0 F1.1 B0.1 W0.1 F2.0 B0.0 W0.0 F2.1 B1.1 W1.1 F3.0 B1.0 W1.0 F3.1 B2.1 "
            "B2.0 B3.1 B3.0 W2.1 W2.0 W3.1 W3.0");
  EXPECT_EQ(build_schedule(kZbV, 2, 1, 4, 2), zb_v_schedule(2, 1, 4));
  // p = 4, m = 8, rank 3 (stages 3 and 4): F and chunk alternate from the start.
  EXPECT_EQ(text(zb_v_schedule(4, 3, 8)),
            "F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 B0.1 W0.1 F4.0 B0.0 W0.0 F4.1 B1.1 W1.1 F5.0 "
            "B1.0 W1.0 F5.1 B2.1 W2.1 F6.0 B2.0 W2.0 F6.1 B3.1 W3.1 F7.0 B3.0 W3.0 F7.1 B4.1 B4.0 "
            "B5.1 B5.0 B6.1 B6.0 B7.1 B7.0 W4.1 W4.0 W5.1 W5.0 W6.1 W6.0 W7.1 W7.0");
  EXPECT_EQ(num_warmup_steps(kZbV, 4, 3, 8, 2), 7);
}

// Each (micro-batch, chunk) runs F, then B, then W, once each, on every rank; and a rank's F of
// chunk 1 of a micro-batch follows that micro-batch's F of chunk 0 on rank p - 1 ... over a grid.
// ZB-V and DualPipeV alike.
TEST(ZbVSchedule, EachChunkRunsFThenBThenWOnce) {
  for (auto kind : {kZbV, kDualPipeV}) {
    for (int64_t p : {1, 2, 3, 4, 8}) {
      for (int64_t m : {2 * p, 2 * p + 1, 3 * p, 5 * p + 3}) {
        for (int64_t r = 0; r < p; ++r) {
          std::map<std::pair<int64_t, int64_t>, std::string> seen;
          const auto steps = build_schedule(kind, p, r, m, 2);
          EXPECT_EQ(steps.size(), static_cast<size_t>(6 * m));
          for (const ScheduleStep& s : steps) {
            ASSERT_TRUE(s.model_chunk == 0 || s.model_chunk == 1);
            seen[{s.micro_batch, s.model_chunk}] += to_string(s).substr(0, 1);
          }
          ASSERT_EQ(seen.size(), static_cast<size_t>(2 * m));
          for (const auto& [key, passes] : seen) {
            EXPECT_EQ(passes, "FBW") << to_string(kind) << " p" << p << " r" << r << " m" << m
                                     << " mb" << key.first << " chunk " << key.second;
          }
        }
      }
    }
  }
}

TEST(ZbVSchedule, RefusesWhatItCannotRun) {
  try {
    zb_v_schedule(4, 0, 7);
    FAIL() << "m < 2p";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("num_micro_batches (7) must be >= 2 x pp_size = 8"));
  }
  try {
    build_schedule(kZbV, 4, 0, 8, 1);
    FAIL() << "zb-v with one chunk";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("zb-v schedule needs num_model_chunks == 2"));
  }
  EXPECT_THROW(build_schedule(kZbV, 4, 0, 8, 3), InvalidArgument);
  EXPECT_THROW(zb_v_schedule(4, 4, 8), InvalidArgument);
  EXPECT_TRUE(splits_backward(kZbV));
}

// ---- the event model over virtual stages ------------------------------------------------------

using Span = pipeline_events::RankSpan;

/// Each rank runs its steps in order (tests/core/pipeline_event_model.hpp): F of (mb, stage vs)
/// after F of (mb, vs - 1), B of (mb, vs) after B of (mb, vs + 1) (the last stage: after its own
/// F), W after its own B; durations f, b, w per chunk pass; no communication. Stages per the V
/// placement. Fails the test when the ranks deadlock.
std::vector<Span> v_event_model(int64_t p, int64_t m, double f, double b, double w,
                                PipelineScheduleKind kind = kZbV) {
  return pipeline_events::run_event_model(kind, p, m, 2, {f, b, w, 0.0});
}

// Qi et al., arXiv:2401.10241 v2, sec. 6: with T_F = T_B = T_W ZB-V has no bubble (each rank
// runs its 2m chunks x 3 passes back to back once it starts), with the peak memory of 1F1B.
// Each chunk is half a stage, so a chunk pass costs half a stage pass: unit costs per chunk.
TEST(ZbVPaper, ZeroBubbleWithUnitCosts) {
  for (int64_t p : {1, 2, 3, 4, 8, 16}) {
    for (int64_t m : {2 * p, 2 * p + 1, 3 * p, 4 * p + 3}) {
      const auto span = v_event_model(p, m, 1, 1, 1);
      double end = 0;
      for (int64_t r = 0; r < p; ++r) {
        const Span& s = span[static_cast<size_t>(r)];
        // Rank r receives micro-batch 0 after r chunk forwards; then 6m unit passes, no gap.
        EXPECT_DOUBLE_EQ(s.start, static_cast<double>(r)) << "p" << p << " m" << m;
        EXPECT_DOUBLE_EQ(s.end - s.start, 6.0 * static_cast<double>(m))
            << "p" << p << " r" << r << " m" << m;
        end = std::max(end, s.end);
      }
      // Synchronized (the optimizer step after the last rank): 6m + (p - 1), the warm-up skew
      // alone, as ZB-H2's (tests/core/zero_bubble_test.cpp).
      EXPECT_DOUBLE_EQ(end, 6.0 * static_cast<double>(m) + static_cast<double>(p - 1));
    }
  }
  // Worked by hand, p = 2, m = 4: rank 0 runs F0.0 F1.0 F2.0 in 0..3, F0.1 at 3 (rank 1 ran
  // F0.0 at 1 and F0.1 at 2), its B0.1 at 4 right after (the loss stage), and 24 passes to 24.
  const auto span = v_event_model(2, 4, 1, 1, 1);
  EXPECT_DOUBLE_EQ(span[0].end, 24.0);
  EXPECT_DOUBLE_EQ(span[1].end, 25.0);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(kZbV, 4, 8, 2), 0.0);
}

// Peak activations: 2p chunk sets = p M_B on every rank (1F1B's first stage: p M_B), against
// ZB-H2's (2p - 1) M_B; an activation set lives from its F to its W.
TEST(ZbVPaper, InFlightActivationsAsOneFOneB) {
  for (int64_t p : {1, 2, 3, 4, 8}) {
    for (int64_t m : {2 * p, 3 * p + 1, 6 * p}) {
      for (int64_t r = 0; r < p; ++r) {
        const auto steps = zb_v_schedule(p, r, m);
        EXPECT_EQ(max_in_flight(steps), 2 * p) << "p" << p << " r" << r << " m" << m;
        EXPECT_EQ(in_flight_bound(kZbV, p, r, m, 2), 2 * p);
      }
    }
  }
  // Weighted by hand, p = 2, m = 4, rank 1 with chunks of 3 and 5 layers: the warm-up F0.0 F0.1
  // F1.0 F1.1 holds 3 + 5 + 3 + 5 = 16; each later F follows a W (B0.1 W0.1 F2.0: 16 - 5 + 3).
  EXPECT_EQ(peak_in_flight_weighted(kZbV, 2, 1, 4, 2, {3, 5}), 16);
  // Rank 0 with the same weights: F0.0 F1.0 F2.0 F0.1 = 3 x 3 + 5 = 14, then W0.1 F1.1 keeps
  // 14, W1.1 F3.0 gives 12, and no later step exceeds 14.
  EXPECT_EQ(peak_in_flight_weighted(kZbV, 2, 0, 4, 2, {3, 5}), 14);
}

// ---- DualPipeV --------------------------------------------------------------------------------

// dualpipev.py's DualPipeV.step for 2 ranks and 4 micro-batches, phase by phase. Rank 0: 1. two
// F chunk 0; 2. F2.0 F0.1; 3. B0.1 with its W deferred, that W, F1.1; 4. F&B (F3.0 with B1.1),
// F&B (F2.1 with B0.0), each backward with its W; 5. B2.1, F&B (F3.1 with B1.0); 6. B3.1 whole,
// then B2.0 deferring its W (the switch after chunk 1 on an even rank); 7. that W, B3.0 deferred;
// 8. its W. Rank 1 (the last): 2. F0.0 F0.1 F1.0 F1.1; 4. two rounds of F&B; 6. B2.1 B2.0 whole,
// then (odd rank: the switch before chunk 1) B3.1 and B3.0 deferred; 8. their W's in order.
TEST(DualPipeVSchedule, OrdersOfDualPipeVStepWorkedByHand) {
  EXPECT_EQ(text(dualpipev_schedule(2, 0, 4)),
            "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 F3.0 B1.1 W1.1 F2.1 B0.0 W0.0 B2.1 W2.1 F3.1 "
            "B1.0 W1.0 B3.1 W3.1 B2.0 W2.0 B3.0 W3.0");
  EXPECT_EQ(text(dualpipev_schedule(2, 1, 4)),
            "F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 W0.1 F2.1 B0.0 W0.0 F3.0 B1.1 W1.1 F3.1 B1.0 W1.0 "
            "B2.1 W2.1 B2.0 W2.0 B3.1 B3.0 W3.1 W3.0");
  EXPECT_EQ(build_schedule(kDualPipeV, 2, 1, 4, 2), dualpipev_schedule(2, 1, 4));
  // The V placement of ZB-V: rank r holds stages r and 2p - 1 - r.
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(virtual_stage_of(kDualPipeV, 4, r, 0), r);
    EXPECT_EQ(virtual_stage_of(kDualPipeV, 4, r, 1), 7 - r);
    EXPECT_EQ(rank_of_virtual_stage(kDualPipeV, 4, 7 - r), r);
  }
  EXPECT_TRUE(splits_backward(kDualPipeV));
  EXPECT_TRUE(v_shaped(kDualPipeV));
  EXPECT_EQ(required_model_chunks(kDualPipeV), 2);
  try {
    dualpipev_schedule(4, 0, 7);
    FAIL() << "m < 2p";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("num_micro_batches (7) must be >= 2 x pp_size = 8"));
  }
  EXPECT_THROW(build_schedule(kDualPipeV, 4, 0, 8, 1), InvalidArgument);
}

// Activations per device: PP + 1 chunk sets with PP = 2p stages (the DualPipe README's table,
// DualPipeV row), on every rank and for any m, against ZB-V's 2p.
TEST(DualPipeVSchedule, InFlightActivationsAsTheReadme) {
  for (int64_t p : {1, 2, 3, 4, 8}) {
    for (int64_t m : {2 * p, 3 * p + 1, 6 * p}) {
      for (int64_t r = 0; r < p; ++r) {
        EXPECT_EQ(max_in_flight(dualpipev_schedule(p, r, m)), 2 * p + 1)
            << "p" << p << " r" << r << " m" << m;
        EXPECT_EQ(in_flight_bound(kDualPipeV, p, r, m, 2), 2 * p + 1);
      }
    }
  }
}

// Unit costs per chunk pass, no communication, each F&B its forward then its whole backward:
// rank r idles p - 1 - r between its first and its last op (the last rank none), every rank's
// ops end by 6m + p - 1 (synchronized: ZB-V's skew). For p = 2, m = 4: rank 0 runs F0.0 F1.0
// F2.0 in 0..3 while rank 1 runs F0.0 (1..2) and F0.1 (2..3), so F0.1 (stage 3) starts at 3 with
// no wait; rank 0 still ends at 25 = 24 passes + 1 idle unit.
TEST(DualPipeVSchedule, BubbleUnderUnitCosts) {
  for (int64_t p : {1, 2, 3, 4, 8}) {
    for (int64_t m : {2 * p, 2 * p + 1, 3 * p, 5 * p + 2}) {
      const auto span = v_event_model(p, m, 1, 1, 1, kDualPipeV);
      double end = 0;
      for (int64_t r = 0; r < p; ++r) {
        const Span& s = span[static_cast<size_t>(r)];
        EXPECT_DOUBLE_EQ(s.end - s.start - 6.0 * static_cast<double>(m),
                         static_cast<double>(p - 1 - r))
            << "p" << p << " r" << r << " m" << m;
        end = std::max(end, s.end);
      }
      EXPECT_DOUBLE_EQ(end, 6.0 * static_cast<double>(m) + static_cast<double>(p - 1));
    }
  }
  const auto span = v_event_model(2, 4, 1, 1, 1, kDualPipeV);
  EXPECT_DOUBLE_EQ(span[0].start, 0.0);
  EXPECT_DOUBLE_EQ(span[0].end, 25.0);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(kDualPipeV, 4, 8, 2), 3.0 / 51.0);
}

}  // namespace
}  // namespace traintwin
