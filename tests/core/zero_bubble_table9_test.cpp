// The zero-bubble paper's profiled costs as a fixture (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024, arXiv:2401.10241; Appendix D, Table 9: T_F, T_B, T_W and T_comm per
// stage, in ms, profiled in ZB-2p for the four GPT-3-like models of Table 3) and the bubble rates
// the paper computes from them (Table 5, sec. 5.3: (cost - m (T_F + T_B + T_W)) / cost, the cost
// the longest stage time), reproduced by our schedules' orders in the paper's event model
// (pipeline_event_model.hpp: communication T_comm on every hop between stages, each stage timed
// from its own first pass).
//
// What reproduces (every row, to the table's 4 decimals): 1F1B (one_f_one_b_schedule, each
// backward B + W as one pass that sends its input gradient at its end), ZB-H1 (zb_h1_schedule)
// and ZB-H2 (zb_h2_schedule).
// What does not: 1F1B-I (Table 5's "1F1B-I", Megatron's interleaved 1F1B with each transformer
// layer a chunk: v = 3, 4, 3, 2 for the four models, whose first and last stages hold one layer
// less). Our interleaved order is the authors' own (scheduler/vpp.py is Megatron's formula, as
// interleaved_1f1b_schedule), but in this model with T/v per chunk pass and T_comm per hop it gives
// 2-3.5 % (relative) more bubble than Table 5 (1.5B, m = 24: 0.1090 against 0.1055); T_comm / v
// per hop gives less (0.0955), and neither v = 2, 3, 4, 6, a split backward nor no communication
// matches. The authors' repository holds no script for the 1F1B-I column, so its inputs (the
// per-chunk costs of the short first and last stages, the delay per hop) are not known; those
// rows are left out rather than matched with a looser tolerance.
// Table 8 (ZB-V, arXiv v2 sec. 6.2) is computed from "the profiled values ... obtained in the
// experiments for ZB-V" (6.2B on 16 stages, 14.6B on 24, 28.3B on 32), which the paper does not
// publish (Table 9 holds only the sec. 5 settings), so it has no fixture here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/schedule.hpp"
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

}  // namespace
}  // namespace traintwin
