// The zero-bubble paper's profiled costs as fixtures and the bubble rates the paper computes from
// them, reproduced by our schedules' orders in the paper's event model (pipeline_event_model.hpp:
// communication T_comm on every hop between ranks, each stage timed from its own first pass).
// Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, arXiv:2401.10241.
//
// Table 9 (Appendix D: T_F, T_B, T_W and T_comm per stage, in ms, profiled in ZB-2p for the four
// GPT-3-like models of Table 3) with Table 5's rates (sec. 5.3: (cost - m (T_F + T_B + T_W)) /
// cost, the cost the longest stage time): 1F1B (one_f_one_b_schedule, each backward B + W as one
// pass that sends its input gradient at its end), ZB-H1 (zb_h1_schedule) and ZB-H2
// (zb_h2_schedule) reproduce every row to the table's 4 decimals.
//
// 1F1B-I (Megatron's interleaved 1F1B, each transformer layer a chunk: v = 3, 4, 3, 2 for the four
// models, T/v per chunk pass, T_comm per hop) reproduces too, in the event model of the authors'
// script for that column (branch arxiv of sail-sg/zero-bubble-pipeline-parallelism, commit
// f68d3879 "for arxiv paper", megatron/core/pipeline_parallel/efficiency.py: iclr_bubble_rates()
// holds Table 9's inputs in us and prints Table 5's rows; get_interleave_schedule is the order of
// interleaved_1f1b_schedule). That script waits for the wrap-around hop of interleaved 1F1B (the
// last rank's chunk c - 1 to the first rank's chunk c, and back in the backward) only for the first
// micro-batch of each group of p (`elif _rk == 0 and v > 0`): micro-batches 1..p-1 of a group
// cross it for free (Hops::kAsQiEtAlInterleaveScript). With every hop waited for, as Megatron
// runs it and as our engines time it, the same order gives 2.3-4.2 % (relative) more bubble than
// Table 5 (1.5B, m = 24: 0.1090 against 0.1055; the authors' script with that condition removed
// gives the same 0.1090). Table 5's 1F1B-I column is therefore slightly optimistic; our model is
// not changed to match it.
//
// Table 8 (arXiv version, sec. 6: 6.2B on 16 stages, 14.6B on 24, 28.3B on 32, m = 3p, 4p, 8p)
// is computed from "the profiled values obtained in the experiments for ZB-V", which the paper
// does not print but the same script does (arxiv_bubble_rates(): T_F, T_B, T_W, T_comm of one
// chunk, half a stage, in us; the stage costs twice those), with the same event models: 1F1B,
// 1F1B-I (v = 2), ZB-H1 and ZB-H2 reproduce to 4 decimals. Its ZB-V column comes from the
// authors' V scheduler run with those costs (v_schedule.py, PipelineGraph.get_v_schedule: a
// greedy order that places each W and the warm-up forwards by the costs and T_comm, the best of
// four variants), while zb_v_schedule is the fixed order that scheduler emits for T_F = T_B = T_W
// without communication. On Table 8's costs our fixed order is within 1e-3 of the table on the
// 24- and 32-stage rows (0.1-1.0e-3 less bubble) and 1.0-2.3e-3 above it on the 16-stage rows.
// The scheduler itself, zb_v_cost_aware_schedule (core/zb_v_cost_aware.hpp), given the script's
// costs in us and the memory model the script gives it (34 h + 5 a s per forward, s = 1024, the
// limit 2p forwards), builds orders that give Table 8's ZB-V column to 4 decimals in this event
// model, and its own bubble estimate equals the event model's: the gap is the order, not the
// timing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/schedule.hpp"
#include "core/zb_v_cost_aware.hpp"
#include "pipeline_event_model.hpp"

namespace traintwin {
namespace {

/// One setting of Table 9 with its bubble rates from Table 5.
struct PaperRow {
  const char* model;
  int64_t p, m;
  double t_f, t_b, t_w, t_comm;                  // Table 9, ms per stage
  double one_f_one_b, interleaved, zb_h1, zb_h2;  // Table 5: 1F1B, 1F1B-I, ZB-H1, ZB-H2
};

// clang-format off
const std::vector<PaperRow> kTable9 = {
  {"1.5B",   8,  24, 18.522, 18.086,  9.337, 0.601, 0.2431, 0.1055, 0.1585, 0.1083},
  {"1.5B",   8,  32, 18.513, 18.086,  9.331, 0.626, 0.1985, 0.0818, 0.1242, 0.0837},
  {"1.5B",   8,  64, 18.546, 18.097,  9.321, 0.762, 0.1240, 0.0443, 0.0674, 0.0444},
  {"6.2B",   8,  24, 29.718, 29.444, 19.927, 0.527, 0.2347, 0.0808, 0.1323, 0.0698},
  {"6.2B",   8,  32, 29.802, 29.428, 19.530, 0.577, 0.1898, 0.0628, 0.1045, 0.0559},
  {"6.2B",   8,  64, 29.935, 29.621, 19.388, 0.535, 0.1091, 0.0320, 0.0554, 0.0294},
  {"14.6B", 16,  48, 11.347, 11.248,  8.132, 0.377, 0.2552, 0.1104, 0.1397, 0.0672},
  {"14.6B", 16,  64, 11.307, 11.254,  8.101, 0.379, 0.2082, 0.0852, 0.1088, 0.0516},
  {"14.6B", 16, 128, 11.325, 11.308,  8.109, 0.378, 0.1251, 0.0445, 0.0576, 0.0266},
  {"28.3B", 32,  96, 10.419, 10.207,  7.715, 0.408, 0.2646, 0.1493, 0.1421, 0.0641},
  {"28.3B", 32, 128, 10.408, 10.204,  7.703, 0.408, 0.2168, 0.1164, 0.1106, 0.0490},
  {"28.3B", 32, 256, 10.402, 10.248,  7.698, 0.460, 0.1352, 0.0624, 0.0594, 0.0257},
};
// clang-format on

// Table 5 prints 4 decimals: a reproduced rate is within half a unit of the last one.
constexpr double kPrinted = 0.5e-4 + 1e-9;

double rate(PipelineScheduleKind kind, const PaperRow& row) {
  return pipeline_events::bubble_rate(kind, row.p, row.m, 1,
                                      {row.t_f, row.t_b, row.t_w, row.t_comm});
}

std::string name(const PaperRow& row) {
  return std::string(row.model) + " p" + std::to_string(row.p) + " m" + std::to_string(row.m);
}

/// Transformer layers of each model of Table 3 (1.5B 24, 6.2B 32, 14.6B 48, 28.3B 64): 1F1B-I
/// runs one layer per chunk, v = layers / p (efficiency.py: ll = l // p).
int64_t layers_of(const std::string& model) {
  if (model == "1.5B") return 24;
  if (model == "6.2B") return 32;
  if (model == "14.6B") return 48;
  return 64;  // 28.3B
}

double interleaved_rate(const PaperRow& row, pipeline_events::Hops hops) {
  return pipeline_events::bubble_rate(PipelineScheduleKind::k1F1B, row.p, row.m,
                                      layers_of(row.model) / row.p,
                                      {row.t_f, row.t_b, row.t_w, row.t_comm}, hops);
}

TEST(ZeroBubblePaperTable9, OneFOneBBubbleRatesOfTable5) {
  for (const PaperRow& row : kTable9) {
    EXPECT_NEAR(rate(PipelineScheduleKind::k1F1B, row), row.one_f_one_b, kPrinted) << name(row);
  }
}

TEST(ZeroBubblePaperTable9, ZbH1BubbleRatesOfTable5) {
  for (const PaperRow& row : kTable9) {
    EXPECT_NEAR(rate(PipelineScheduleKind::kZbH1, row), row.zb_h1, kPrinted) << name(row);
  }
}

TEST(ZeroBubblePaperTable9, ZbH2BubbleRatesOfTable5) {
  for (const PaperRow& row : kTable9) {
    EXPECT_NEAR(rate(PipelineScheduleKind::kZbH2, row), row.zb_h2, kPrinted) << name(row);
  }
}

// Table 5's 1F1B-I column, in the authors' event model for it (see the opening comment: the
// wrap-around hop waited for by the first micro-batch of each group of p only).
TEST(ZeroBubblePaperTable9, InterleavedBubbleRatesOfTable5InTheAuthorsModel) {
  for (const PaperRow& row : kTable9) {
    EXPECT_NEAR(interleaved_rate(row, pipeline_events::Hops::kAsQiEtAlInterleaveScript),
                row.interleaved, kPrinted)
        << name(row);
  }
}

// With every hop waited for (as Megatron runs interleaved 1F1B and as the engines time it) the
// same order idles more than Table 5 says on every row, by 2.3-4.2 % of the rate (1.5B m = 24:
// 0.1090 against 0.1055, what the authors' script gives with its `_rk == 0` condition removed).
TEST(ZeroBubblePaperTable9, InterleavedWithEveryHopIdlesMoreThanTable5) {
  for (const PaperRow& row : kTable9) {
    const double every_hop = interleaved_rate(row, pipeline_events::Hops::kEveryHop);
    EXPECT_GT(every_hop, row.interleaved * 1.015) << name(row);
    EXPECT_LT(every_hop, row.interleaved * 1.045) << name(row);
  }
  EXPECT_NEAR(interleaved_rate(kTable9.front(), pipeline_events::Hops::kEveryHop), 0.1090,
              kPrinted);
}

// The communication is what separates the model from Table 2's closed forms: with T_comm = 0
// ZB-H1's bubble is (p - 1)(T_F + T_B - T_W) exactly (its first stage's span less its work), and
// the profiled T_comm = 0.601 ms per hop raises the 1.5B m = 24 rate from that closed form's
// 0.1476 to Table 5's 0.1585.
TEST(ZeroBubblePaperTable9, CommunicationOnEveryHopIsPartOfTheRates) {
  const PaperRow& row = kTable9.front();
  const double work = static_cast<double>(row.m) * (row.t_f + row.t_b + row.t_w);
  const double bubble = static_cast<double>(row.p - 1) * (row.t_f + row.t_b - row.t_w);
  const double closed = bubble / (work + bubble);
  EXPECT_NEAR(pipeline_events::bubble_rate(PipelineScheduleKind::kZbH1, row.p, row.m, 1,
                                   {row.t_f, row.t_b, row.t_w, 0.0}),
              closed, 1e-12);
  EXPECT_NEAR(closed, 0.1476, 1e-4);
  EXPECT_GT(rate(PipelineScheduleKind::kZbH1, row), closed + 0.005);
}

/// One setting of the arXiv version's Table 8: the per-chunk costs the authors' script holds for
/// it (efficiency.py, arxiv_bubble_rates(), us -> ms; a chunk is half a stage) and the rates that
/// script prints for the table's columns 1F1B, 1F1B-I, ZB-H1, ZB-H2 and ZB-V (run with Python when
/// this fixture was written; the PDF's Table 8 itself was not at hand to compare digit by digit,
/// while the same script's ICLR rows are Table 5 exactly).
struct ZbVRow {
  const char* model;
  int64_t p, m;
  double t_f, t_b, t_w, t_comm;  // one chunk, ms
  double one_f_one_b, interleaved, zb_h1, zb_h2, zb_v;
};

// clang-format off
const std::vector<ZbVRow> kTable8 = {
  {"6.2B",  16,  48, 14.407, 14.380, 9.676, 1.610, 0.2668, 0.1499, 0.1536, 0.0823, 0.0697},
  {"6.2B",  16,  64, 14.412, 14.393, 9.688, 1.621, 0.2206, 0.1169, 0.1198, 0.0630, 0.0533},
  {"6.2B",  16, 128, 14.316, 14.306, 9.639, 1.619, 0.1390, 0.0621, 0.0637, 0.0325, 0.0274},
  {"14.6B", 24,  72,  6.763,  6.969, 5.251, 0.755, 0.2699, 0.1519, 0.1439, 0.0628, 0.0638},
  {"14.6B", 24,  96,  6.783,  6.984, 5.259, 0.758, 0.2229, 0.1184, 0.1121, 0.0480, 0.0483},
  {"14.6B", 24, 192,  6.785,  6.990, 5.260, 0.770, 0.1403, 0.0630, 0.0595, 0.0247, 0.0250},
  {"28.3B", 32,  96,  9.458,  9.748, 7.288, 0.879, 0.2676, 0.1509, 0.1429, 0.0629, 0.0593},
  {"28.3B", 32, 128,  9.469,  9.744, 7.306, 0.892, 0.2204, 0.1177, 0.1111, 0.0478, 0.0451},
  {"28.3B", 32, 256,  9.447,  9.644, 7.193, 0.887, 0.1362, 0.0626, 0.0593, 0.0251, 0.0236},
};
// clang-format on

/// A Table 8 row's costs per stage (two chunks) for the one-chunk schedules and 1F1B-I.
pipeline_events::PassCosts stage_of(const ZbVRow& row) {
  return {2 * row.t_f, 2 * row.t_b, 2 * row.t_w, row.t_comm};
}

std::string name(const ZbVRow& row) {
  return std::string(row.model) + " p" + std::to_string(row.p) + " m" + std::to_string(row.m);
}

TEST(ZeroBubblePaperTable8, OneChunkSchedulesAndInterleavedAsTheTable) {
  using pipeline_events::bubble_rate;
  for (const ZbVRow& row : kTable8) {
    EXPECT_NEAR(bubble_rate(PipelineScheduleKind::k1F1B, row.p, row.m, 1, stage_of(row)),
                row.one_f_one_b, kPrinted)
        << name(row);
    EXPECT_NEAR(bubble_rate(PipelineScheduleKind::kZbH1, row.p, row.m, 1, stage_of(row)),
                row.zb_h1, kPrinted)
        << name(row);
    EXPECT_NEAR(bubble_rate(PipelineScheduleKind::kZbH2, row.p, row.m, 1, stage_of(row)),
                row.zb_h2, kPrinted)
        << name(row);
    // 1F1B-I with 2 layers per stage as 2 chunks (l // p = 2 for all three models), in the
    // authors' event model for it.
    EXPECT_NEAR(bubble_rate(PipelineScheduleKind::k1F1B, row.p, row.m, 2, stage_of(row),
                            pipeline_events::Hops::kAsQiEtAlInterleaveScript),
                row.interleaved, kPrinted)
        << name(row);
  }
}

// ZB-V: our fixed order (zb_v_schedule, the authors' V scheduler's order for equal costs without
// communication) against the table's, which the scheduler computed for these costs (see the
// opening comment). Within 1e-3 of the table where the greedy order is no better than the fixed
// one (24 and 32 stages: the fixed order idles less), 1.0-2.3e-3 above it on the 16-stage rows
// (T_comm = 11 % of T_F there, where the greedy order adds warm-up forwards and moves W's).
TEST(ZeroBubblePaperTable8, ZbVFixedOrderAgainstTheTablesCostAwareOrder) {
  for (const ZbVRow& row : kTable8) {
    const double ours = pipeline_events::bubble_rate(PipelineScheduleKind::kZbV, row.p, row.m, 2,
                                                     stage_of(row));
    std::printf("ZB-V %-16s ours %.4f  Table 8 %.4f  %+.4f\n", name(row).c_str(), ours, row.zb_v,
                ours - row.zb_v);
    if (row.p >= 24) {
      EXPECT_NEAR(ours, row.zb_v, 1e-3) << name(row);
      EXPECT_LT(ours, row.zb_v) << name(row);
    } else {
      EXPECT_GT(ours, row.zb_v + 0.9e-3) << name(row);
      EXPECT_LT(ours, row.zb_v + 2.5e-3) << name(row);
    }
    // Below ZB-H2 on every row but one (14.6B m = 72: 0.0628 both), with half its activations.
    EXPECT_LT(ours, pipeline_events::bubble_rate(PipelineScheduleKind::kZbH2, row.p, row.m, 1,
                                                 stage_of(row)) + 1e-4)
        << name(row);
  }
}

/// Hidden size and attention heads of Table 8's models (Table 3; v_schedule.py's settings list:
/// 6.2B 4096 and 32, 14.6B 5120 and 40, 28.3B 6144 and 48), for the scheduler's memory model.
std::pair<int64_t, int64_t> hidden_and_heads_of(const std::string& model) {
  if (model == "6.2B") return {4096, 32};
  if (model == "14.6B") return {5120, 40};
  return {6144, 48};  // 28.3B
}

/// The authors' V scheduler run on a Table 8 row as their script runs it (v_schedule.py's
/// __main__: per-chunk costs in us, seq_length 1024, the default limit of 2p forwards).
ZbVCostAwareSchedule cost_aware_of(const ZbVRow& row) {
  auto us = [](double ms) { return std::round(ms * 1000.0); };
  const auto [h, a] = hidden_and_heads_of(row.model);
  return zb_v_cost_aware_schedule(row.p, row.m,
                                  {us(row.t_f), us(row.t_b), us(row.t_w), us(row.t_comm)},
                                  zb_v_megatron_memory(row.p, h, a, 1024));
}

/// The paper's bubble rate of given ZB-V orders in the event model, from per-chunk costs.
double v_rate_of(const std::vector<std::vector<ScheduleStep>>& ranks, int64_t p, int64_t m,
                 const pipeline_events::PassCosts& chunk) {
  double cost = 0;
  for (const auto& s :
       pipeline_events::run_event_model_of(PipelineScheduleKind::kZbV, p, 2, ranks, chunk)) {
    cost = std::max(cost, s.end - s.start);
  }
  const double work = 2.0 * static_cast<double>(m) * (chunk.f + chunk.b + chunk.w);
  return (cost - work) / cost;
}

// Table 8's ZB-V column, every row (the 16-stage ones included), to its 4 decimals: the cost-aware
// order in the event model. The scheduler's own bubble (its times are the event model's) gives
// the same rate; on the 16-stage rows it idles 1.0-2.3e-3 less than the fixed order.
TEST(ZeroBubblePaperTable8, ZbVCostAwareOrderGivesTheTable) {
  for (const ZbVRow& row : kTable8) {
    const ZbVCostAwareSchedule order = cost_aware_of(row);
    const pipeline_events::PassCosts chunk{row.t_f, row.t_b, row.t_w, row.t_comm};
    const double ours = v_rate_of(order.ranks, row.p, row.m, chunk);
    std::printf("ZB-V cost-aware %-16s ours %.4f  Table 8 %.4f  %+.5f\n", name(row).c_str(), ours,
                row.zb_v, ours - row.zb_v);
    EXPECT_NEAR(ours, row.zb_v, kPrinted) << name(row);
    const double work_us =
        2.0 * static_cast<double>(row.m) *
        (std::round(row.t_f * 1000) + std::round(row.t_b * 1000) + std::round(row.t_w * 1000));
    EXPECT_NEAR(order.bubble / (order.bubble + work_us), ours, 1e-6) << name(row);
    // The greedy order is not always the better one: on 24 and 32 stages the fixed order idles
    // 0.2-1.0e-3 less.
    const double fixed = pipeline_events::bubble_rate(PipelineScheduleKind::kZbV, row.p, row.m, 2,
                                                      stage_of(row));
    if (row.p == 16) {
      EXPECT_GT(fixed - ours, 0.9e-3) << name(row);
    } else {
      EXPECT_LT(fixed, ours) << name(row);
    }
  }
}

}  // namespace
}  // namespace traintwin
