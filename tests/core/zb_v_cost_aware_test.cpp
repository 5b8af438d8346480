// ZB-V's cost-aware order (zb_v_cost_aware_schedule, core/zb_v_cost_aware.hpp; the greedy V
// scheduler of Qi et al., arXiv:2401.10241 v2, sec. 6): a valid pipeline schedule for any costs
// (each (micro-batch, chunk) F, B and W once and in that order on its rank, the cross-rank
// dependencies met without deadlock in the event model, the memory limit kept), the fixed order
// zb_v_schedule for equal costs without communication, its own bubble estimate equal to the event
// model's, and its argument checks. Table 8's rates: tests/core/zero_bubble_table9_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/schedule.hpp"
#include "core/zb_v_cost_aware.hpp"
#include "pipeline_event_model.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
constexpr auto kZbV = PipelineScheduleKind::kZbV;

std::string text(const std::vector<ScheduleStep>& steps) {
  std::string out;
  for (const ScheduleStep& s : steps) out += (out.empty() ? "" : " ") + to_string(s);
  return out;
}

// A grid of costs, integral as the authors' script has them in us: balanced, the paper's
// profiled shape (T_W < T_F ~ T_B, comm a tenth of T_F), a W heavier than F, a B much cheaper.
const std::vector<ZbVPassCosts> kCosts = {
    {1000, 1000, 1000, 0}, {14407, 14380, 9676, 1610}, {5, 7, 13, 2}, {13, 4, 9, 3}, {9, 9, 3, 5}};

// The longest rank span in the event model (each rank from its own first pass), and the paper's
// bubble rate of it.
double span_of(const ZbVCostAwareSchedule& s, int64_t p, const ZbVPassCosts& c) {
  double span = 0;
  for (const auto& r : pipeline_events::run_event_model_of(kZbV, p, 2, s.ranks,
                                                           {c.f, c.b, c.w, c.comm})) {
    span = std::max(span, r.end - r.start);
  }
  return span;
}

TEST(ZbVCostAware, EachChunkRunsFThenBThenWOnceAndTheRanksNeverDeadlock) {
  for (const ZbVPassCosts& c : kCosts) {
    for (int64_t p : {1, 2, 3, 4, 6, 8}) {
      for (int64_t m : {2 * p, 2 * p + 1, 3 * p, 5 * p + 3}) {
        const ZbVCostAwareSchedule s =
            zb_v_cost_aware_schedule(p, m, c, zb_v_megatron_memory(p, 4096, 32, 1024));
        ASSERT_EQ(static_cast<int64_t>(s.ranks.size()), p);
        for (int64_t r = 0; r < p; ++r) {
          const auto& steps = s.ranks[static_cast<size_t>(r)];
          EXPECT_EQ(static_cast<int64_t>(steps.size()), 6 * m) << "p " << p << " m " << m;
          // (micro-batch, chunk) -> passes seen so far, in order F, B, W.
          std::map<std::pair<int64_t, int64_t>, int> seen;
          for (const ScheduleStep& st : steps) {
            ASSERT_GE(st.micro_batch, 0);
            ASSERT_LT(st.micro_batch, m);
            ASSERT_TRUE(st.model_chunk == 0 || st.model_chunk == 1);
            int& n = seen[{st.micro_batch, st.model_chunk}];
            EXPECT_EQ(n, static_cast<int>(st.pass)) << "rank " << r << " " << to_string(st);
            ++n;
          }
          EXPECT_EQ(static_cast<int64_t>(seen.size()), 2 * m);
          for (const auto& [key, n] : seen) EXPECT_EQ(n, 3);
        }
        // Cross-rank dependencies (forward down the chunks 0 and up the chunks 1, backward the
        // other way, the turns on ranks p - 1 and 0): the event model fails on a deadlock.
        const double span = span_of(s, p, c);
        EXPECT_GE(span, 2.0 * static_cast<double>(m) * (c.f + c.b + c.w));
      }
    }
  }
}

// The scheduler times its passes as the event model does (each pass at once when its rank is
// free and its input has arrived): its bubble is the event model's longest span less the work.
TEST(ZbVCostAware, ItsBubbleIsTheEventModels) {
  for (const ZbVPassCosts& c : kCosts) {
    for (int64_t p : {2, 4, 8}) {
      for (int64_t m : {2 * p, 3 * p + 1}) {
        const ZbVCostAwareSchedule s =
            zb_v_cost_aware_schedule(p, m, c, zb_v_megatron_memory(p, 4096, 32, 1024));
        const double work = 2.0 * static_cast<double>(m) * (c.f + c.b + c.w);
        EXPECT_NEAR(s.bubble, span_of(s, p, c) - work, 1e-9 * work) << "p " << p << " m " << m;
      }
    }
  }
}

// With T_F = T_B = T_W and no communication the scheduler emits the fixed order zb_v_schedule
// (that order's documented source), which runs every rank without a gap: bubble 0. Any equal
// cost gives it, the memory model's split between B and W does not matter.
TEST(ZbVCostAware, EqualCostsWithoutCommunicationGiveTheFixedOrder) {
  for (double unit : {1.0, 1000.0}) {
    for (int64_t p : {1, 2, 3, 4, 5, 8, 12, 16}) {
      for (int64_t m = 2 * p; m <= 5 * p; m += (p > 4 ? p / 2 : 1)) {
        for (const ZbVPassMemory& mem :
             {zb_v_megatron_memory(p, 4096, 32, 1024), ZbVPassMemory{1, 0, -1, 2.0 * p}}) {
          const ZbVCostAwareSchedule s = zb_v_cost_aware_schedule(p, m, {unit, unit, unit, 0}, mem);
          EXPECT_EQ(s.bubble, 0.0) << "p " << p << " m " << m;
          for (int64_t r = 0; r < p; ++r) {
            EXPECT_EQ(text(s.ranks[static_cast<size_t>(r)]), text(zb_v_schedule(p, r, m)))
                << "p " << p << " rank " << r << " m " << m;
          }
        }
      }
    }
  }
}

// The activation memory of each rank, summed pass by pass with the model's per-pass deltas,
// never exceeds the limit; with B freeing nothing and the default limit of 2p forwards that is
// zb_v_schedule's bound of 2p chunk activation sets in flight (p M_B). A wider limit lets the
// warm-up run more forwards ahead where they fit before the first chunk-1 forward's input.
TEST(ZbVCostAware, KeepsTheMemoryLimit) {
  const ZbVPassCosts c{14407, 14380, 9676, 1610};
  for (int64_t p : {2, 4, 8}) {
    const int64_t m = 3 * p;
    const double two_p = 2.0 * static_cast<double>(p);
    for (const ZbVPassMemory& mem :
         {zb_v_megatron_memory(p, 4096, 32, 1024), ZbVPassMemory{1, 0, -1, two_p},
          ZbVPassMemory{1, -0.5, -0.5, two_p}, ZbVPassMemory{1, 0, -1, two_p + 4}}) {
      const ZbVCostAwareSchedule s = zb_v_cost_aware_schedule(p, m, c, mem);
      for (int64_t r = 0; r < p; ++r) {
        double held = 0;
        double peak = 0;
        for (const ScheduleStep& st : s.ranks[static_cast<size_t>(r)]) {
          held += st.pass == Pass::kForward ? mem.f : st.pass == Pass::kBackward ? mem.b : mem.w;
          peak = std::max(peak, held);
        }
        EXPECT_LE(peak, mem.limit) << "p " << p << " rank " << r;
        if (mem.b == 0) {
          EXPECT_LE(max_in_flight(s.ranks[static_cast<size_t>(r)]), mem.limit) << "rank " << r;
        }
      }
    }
  }
}

// The memory model of the authors' runtime (runtime.py): 34 h + 5 a s per forward, the W frees
// 32 h, the B the rest, the limit 2p forwards. h = 4096, a = 32, s = 1024: 139264 + 163840.
TEST(ZbVCostAware, MegatronMemoryModel) {
  const ZbVPassMemory m = zb_v_megatron_memory(16, 4096, 32, 1024);
  EXPECT_EQ(m.f, 303104.0);
  EXPECT_EQ(m.w, -131072.0);
  EXPECT_EQ(m.b, -172032.0);
  EXPECT_EQ(m.limit, 32 * 303104.0);
  EXPECT_THROW(zb_v_megatron_memory(0, 4096, 32, 1024), InvalidArgument);
  EXPECT_THROW(zb_v_megatron_memory(4, 4096, 0, 1024), InvalidArgument);
}

TEST(ZbVCostAware, RefusesBadArguments) {
  const ZbVPassMemory mem{1, 0, -1, 8};
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message([&] { zb_v_cost_aware_schedule(4, 7, {1, 1, 1, 0}, mem); }),
              HasSubstr("num_micro_batches (7) must be >= 2 x pp_size = 8"));
  EXPECT_THAT(message([&] { zb_v_cost_aware_schedule(0, 8, {1, 1, 1, 0}, mem); }),
              HasSubstr("pp_size must be >= 1"));
  EXPECT_THAT(message([&] { zb_v_cost_aware_schedule(4, 8, {1, 0, 1, 0}, mem); }),
              HasSubstr("costs must be > 0"));
  EXPECT_THAT(message([&] { zb_v_cost_aware_schedule(4, 8, {1, 1, 1, -1}, mem); }),
              HasSubstr("comm >= 0"));
  EXPECT_THAT(message([&] { zb_v_cost_aware_schedule(4, 8, {1, 1, 1, 0}, {1, 0, -1, 1}); }),
              HasSubstr("memory.limit >= 2 x memory.f"));
  // The warm-up runs up to 2p forwards on the last rank before any W can free memory: a limit
  // of 2p - 1 forwards stops it there (rank 3 of 4, its seventh forward, F3.1).
  EXPECT_THAT(message([&] { zb_v_cost_aware_schedule(4, 8, {1, 1, 1, 0}, {1, -0.5, -0.5, 7}); }),
              HasSubstr("rank 3 cannot run the forward of micro-batch 3, model chunk 1 within the "
                        "activation memory limit 7"));
}

}  // namespace
}  // namespace traintwin
