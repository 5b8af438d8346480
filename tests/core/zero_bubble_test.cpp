// The zero-bubble schedules ZB-H1 and ZB-H2 (core/schedule.hpp; Qi et al., "Zero Bubble
// (Almost) Pipeline Parallelism", ICLR 2024): their exact orders worked by hand, their in-flight
// activation sets (Table 2's peak memory), and their bubbles under unit costs by an event model
// over the step lists (Table 2's bubble sizes).
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

std::string text(const std::vector<ScheduleStep>& steps) {
  std::string out;
  for (const ScheduleStep& s : steps) out += (out.empty() ? "" : " ") + to_string(s);
  return out;
}

TEST(ZeroBubbleSchedule, ZbH1OrdersWorkedByHand) {
  // p = 4, m = 8. Rank 0: n = 4 forwards, W right after its B (d = 0).
  EXPECT_EQ(text(zb_h1_schedule(4, 0, 8)),
            "F0.0 F1.0 F2.0 F3.0 B0.0 W0.0 F4.0 B1.0 W1.0 F5.0 B2.0 W2.0 F6.0 B3.0 W3.0 F7.0 "
            "B4.0 W4.0 B5.0 W5.0 B6.0 W6.0 B7.0 W7.0");
  // Rank 3 (last): n = 1, each W three B steps late, the last three W's at the end.
  EXPECT_EQ(text(zb_h1_schedule(4, 3, 8)),
            "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0 W0.0 F4.0 B4.0 W1.0 F5.0 B5.0 W2.0 F6.0 "
            "B6.0 W3.0 F7.0 B7.0 W4.0 W5.0 W6.0 W7.0");
  // The F and B steps are those of 1F1B, in 1F1B's order.
  for (int64_t r = 0; r < 4; ++r) {
    std::vector<ScheduleStep> fb;
    for (const ScheduleStep& s : zb_h1_schedule(4, r, 8)) {
      if (s.pass != Pass::kWeightGrad) fb.push_back(s);
    }
    EXPECT_EQ(fb, one_f_one_b_schedule(4, r, 8)) << "rank " << r;
  }
}

TEST(ZeroBubbleSchedule, ZbH2OrdersWorkedByHand) {
  // p = 2, m = 4. Rank 0: 2p - 1 = 3 forwards before its first B, W right after B.
  EXPECT_EQ(text(zb_h2_schedule(2, 0, 4)),
            "F0.0 F1.0 F2.0 B0.0 W0.0 F3.0 B1.0 W1.0 B2.0 W2.0 B3.0 W3.0");
  // Rank 1: one forward, each W two B steps late.
  EXPECT_EQ(text(zb_h2_schedule(2, 1, 4)),
            "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 W0.0 F3.0 B3.0 W1.0 W2.0 W3.0");
  EXPECT_EQ(build_schedule(PipelineScheduleKind::kZbH2, 2, 1, 4, 1), zb_h2_schedule(2, 1, 4));
  EXPECT_EQ(build_schedule(PipelineScheduleKind::kZbH1, 4, 3, 8, 1), zb_h1_schedule(4, 3, 8));
}

// Every (micro-batch) has one F, one B, one W, in that order, on every rank, over a grid.
TEST(ZeroBubbleSchedule, EachMicroBatchRunsFThenBThenWOnce) {
  for (auto kind : {PipelineScheduleKind::kZbH1, PipelineScheduleKind::kZbH2}) {
    for (int64_t p : {1, 2, 3, 4, 8}) {
      for (int64_t m : {1, 2, 3, 5, 8, 16, 17}) {
        for (int64_t r = 0; r < p; ++r) {
          std::map<int64_t, std::string> seen;
          for (const ScheduleStep& s : build_schedule(kind, p, r, m, 1)) {
            seen[s.micro_batch] += to_string(s).substr(0, 1);
            EXPECT_EQ(s.model_chunk, 0);
          }
          ASSERT_EQ(seen.size(), static_cast<size_t>(m));
          for (const auto& [mb, passes] : seen) {
            EXPECT_EQ(passes, "FBW") << to_string(kind) << " p" << p << " r" << r << " m" << m;
          }
        }
      }
    }
  }
}

// Qi et al. Table 2, peak activation memory: ZB-H1 p M_B (1F1B's first stage), ZB-H2 (2p - 1)
// M_B, on every rank once m is large enough; an activation set lives from its F to its W.
TEST(ZeroBubbleSchedule, InFlightActivationsAsTable2) {
  // Worked by hand for p = 4, m = 8, rank 3 of ZB-H1: after F4 it holds F0..F4 less W0 = 4.
  EXPECT_EQ(max_in_flight(zb_h1_schedule(4, 3, 8)), 4);
  EXPECT_EQ(max_in_flight(one_f_one_b_schedule(4, 3, 8)), 1);
  // ZB-H2, p = 2, m = 4, rank 1: after F3 it holds F0..F3 less W0 = 3 = 2p - 1.
  EXPECT_EQ(max_in_flight(zb_h2_schedule(2, 1, 4)), 3);
  for (int64_t p : {1, 2, 4, 8}) {
    for (int64_t m : {1, 3, 8, 16, 24}) {
      for (int64_t r = 0; r < p; ++r) {
        const auto h1 = zb_h1_schedule(p, r, m);
        const auto h2 = zb_h2_schedule(p, r, m);
        EXPECT_EQ(max_in_flight(h1), std::min(p, m)) << "p" << p << " r" << r << " m" << m;
        EXPECT_EQ(max_in_flight(h2), std::min(2 * p - 1, m)) << "p" << p << " r" << r << " m" << m;
        EXPECT_EQ(in_flight_bound(PipelineScheduleKind::kZbH1, p, r, m, 1), max_in_flight(h1));
        EXPECT_EQ(in_flight_bound(PipelineScheduleKind::kZbH2, p, r, m, 1), max_in_flight(h2));
        EXPECT_EQ(peak_in_flight_weighted(PipelineScheduleKind::kZbH2, p, r, m, 1, {3}),
                  3 * max_in_flight(h2));
      }
    }
  }
}

TEST(ZeroBubbleSchedule, RefusesVirtualPipelineAndNamesTheSchedule) {
  EXPECT_TRUE(splits_backward(PipelineScheduleKind::kZbH1));
  EXPECT_TRUE(splits_backward(PipelineScheduleKind::kZbH2));
  EXPECT_FALSE(splits_backward(PipelineScheduleKind::k1F1B));
  EXPECT_FALSE(splits_backward(PipelineScheduleKind::kGPipe));
  try {
    build_schedule(PipelineScheduleKind::kZbH1, 4, 0, 8, 2);
    FAIL() << "zb-h1 with two model chunks";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("zb-h1 schedule supports only num_model_chunks == 1"));
  }
  EXPECT_THROW(zb_h2_schedule(4, 4, 8), InvalidArgument);
  EXPECT_THROW(zb_h1_schedule(4, 0, 0), InvalidArgument);
  EXPECT_EQ(to_string(ScheduleStep{Pass::kWeightGrad, 3, 0}), "W3.0");
  // W steps have no p2p.
  EXPECT_FALSE(step_input(ScheduleStep{Pass::kWeightGrad, 1, 0}, 1, 4).has_value());
  EXPECT_FALSE(step_output(ScheduleStep{Pass::kWeightGrad, 1, 0}, 1, 4).has_value());
}

// ---- Table 2's bubbles with unit costs ------------------------------------------------------

/// Each stage's first start and last end (tests/core/pipeline_event_model.hpp: F_j after F_j of
/// stage r - 1, B_j after B_j of stage r + 1, the last stage's after its own F_j, W_j after its
/// own B_j), with durations f, b, w and no communication. A schedule without W steps (1F1B) runs
/// each backward for b + w (the input gradient is sent after the whole backward).
using StageSpan = pipeline_events::RankSpan;

std::vector<StageSpan> event_model(PipelineScheduleKind kind, int64_t p, int64_t m, double f,
                                   double b, double w) {
  return pipeline_events::run_event_model(kind, p, m, 1, {f, b, w, 0.0});
}

/// The bubble as the paper measures it: the first stage's span less its work (Qi et al. sec. 4
/// bypass the optimizer's synchronization, so a stage's iteration runs from its own first op;
/// for 1F1B and ZB-H1 this equals the synchronized iteration time less the work).
double first_stage_bubble(PipelineScheduleKind kind, int64_t p, int64_t m, double f, double b,
                          double w) {
  const auto span = event_model(kind, p, m, f, b, w);
  return span[0].end - span[0].start - static_cast<double>(m) * (f + b + w);
}

double synchronized_bubble(PipelineScheduleKind kind, int64_t p, int64_t m, double f, double b,
                           double w) {
  double end = 0;
  for (const StageSpan& s : event_model(kind, p, m, f, b, w)) end = std::max(end, s.end);
  return end - static_cast<double>(m) * (f + b + w);
}

// Qi et al., ICLR 2024, Table 2: bubble sizes (p-1)(T_F+T_B+T_W) for 1F1B, (p-1)(T_F+T_B-T_W)
// for ZB-H1, (p-1)(T_F+T_B-2T_W) for ZB-H2.
TEST(ZeroBubblePaper, Table2BubblesWithUnitCosts) {
  for (int64_t p : {2, 4, 8}) {
    for (int64_t m : {p, 2 * p, 3 * p}) {
      const double q = static_cast<double>(p - 1);
      // T_F = T_B = T_W = 1: 3(p-1), (p-1), 0.
      EXPECT_DOUBLE_EQ(first_stage_bubble(PipelineScheduleKind::k1F1B, p, m, 1, 1, 1), 3 * q);
      EXPECT_DOUBLE_EQ(first_stage_bubble(PipelineScheduleKind::kZbH1, p, m, 1, 1, 1), q);
      if (m >= 2 * p - 1) {  // ZB-H2's warm-up holds its 2p - 1 forwards
        EXPECT_DOUBLE_EQ(first_stage_bubble(PipelineScheduleKind::kZbH2, p, m, 1, 1, 1), 0.0)
            << "p" << p << " m" << m;
      }
    }
  }
  // Hand-worked, p = 4, m = 8, unit costs: the synchronized iteration of 1F1B is 24 + 3 x 3 = 33,
  // of ZB-H1 24 + 3 = 27; ZB-H2's stages run 24 each without a gap, but the last starts 3 later.
  EXPECT_DOUBLE_EQ(synchronized_bubble(PipelineScheduleKind::k1F1B, 4, 8, 1, 1, 1), 9.0);
  EXPECT_DOUBLE_EQ(synchronized_bubble(PipelineScheduleKind::kZbH1, 4, 8, 1, 1, 1), 3.0);
  EXPECT_DOUBLE_EQ(synchronized_bubble(PipelineScheduleKind::kZbH2, 4, 8, 1, 1, 1), 3.0);
}

TEST(ZeroBubblePaper, Table2BubblesWithUnequalCosts) {
  // T_W < T_F (the table's setting, W the lighter half of a backward): the formulas hold exactly.
  struct Cost {
    double f, b, w;
  };
  for (const Cost c : {Cost{1, 1.5, 0.75}, Cost{2, 2, 1}, Cost{1, 1.25, 0.5}}) {
    for (int64_t p : {2, 4, 8}) {
      const int64_t m = 3 * p;
      const double q = static_cast<double>(p - 1);
      EXPECT_NEAR(first_stage_bubble(PipelineScheduleKind::k1F1B, p, m, c.f, c.b, c.w),
                  q * (c.f + c.b + c.w), 1e-12);
      EXPECT_NEAR(first_stage_bubble(PipelineScheduleKind::kZbH1, p, m, c.f, c.b, c.w),
                  q * (c.f + c.b - c.w), 1e-12);
      EXPECT_NEAR(first_stage_bubble(PipelineScheduleKind::kZbH2, p, m, c.f, c.b, c.w),
                  q * (c.f + c.b - 2 * c.w), 1e-12);
    }
  }
  // Worked by hand, p = 2, m = 4, T_F = 2, T_B = 2, T_W = 1: ZB-H1's first stage waits for B0
  // from 4 (after F0 F1) to 6 (stage 1 ran F0 2..4, B0 4..6): one (p-1)(T_F + T_B - T_W) = 3 in
  // all, the rest of the wait at the end.
  EXPECT_DOUBLE_EQ(first_stage_bubble(PipelineScheduleKind::kZbH1, 2, 4, 2, 2, 1), 3.0);
}

TEST(ZeroBubblePaper, IdealBubbleFractions) {
  // Unit costs: ZB-H1 (p-1) T_F over 3m T_F of work, ZB-H2 none (as the paper measures it).
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineScheduleKind::kZbH1, 4, 8, 1), 3.0 / 27.0);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineScheduleKind::kZbH2, 4, 8, 1), 0.0);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineScheduleKind::k1F1B, 4, 8, 1), 3.0 / 11.0);
}

}  // namespace
}  // namespace traintwin
