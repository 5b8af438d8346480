// The timing layer shared by the replay and the estimator: TimedProgram (compute durations and
// what-if factors), the matching rules (sim/matching.hpp) and the gap attribution
// (sim/attribution.hpp), each against numbers worked by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.hpp"
#include "core/program.hpp"
#include "core/scenario.hpp"
#include "sim/attribution.hpp"
#include "sim/collectives.hpp"
#include "sim/matching.hpp"
#include "sim_test_support.hpp"
#include "sim/timed_program.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
using testing::TableCostModel;

Scenario small() {
  return load_scenario(std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-1.3b-h100-8.yaml");
}

// ----- gap attribution -------------------------------------------------------------------------

TEST(Attribution, EachWaitGoesToItsCategory) {
  Op tp_coll;
  tp_coll.kind = OpKind::kCollective;
  tp_coll.group = GroupKind::kTp;
  Op dp_coll = tp_coll;
  dp_coll.group = GroupKind::kDp;
  Op emb = tp_coll;
  emb.group = GroupKind::kEmbedding;
  Op recv;
  recv.kind = OpKind::kRecv;
  Op compute;

  TimeBreakdown b;
  attribute_gap(b, 1.0, waited_for(tp_coll));
  attribute_gap(b, 2.0, waited_for(dp_coll));
  attribute_gap(b, 4.0, waited_for(emb));
  // A recv waited 3 s, of which the transfer took 0.5 s: 0.5 exposed PP, 2.5 bubble.
  attribute_gap(b, 3.0, waited_for(recv, 0.5));
  // A transfer longer than the gap: the whole gap is exposed.
  attribute_gap(b, 0.25, waited_for(recv, 1.0));
  attribute_gap(b, 8.0, waited_for(compute));
  attribute_gap(b, 16.0, WaitedFor{});
  attribute_gap(b, -5.0, waited_for(tp_coll));  // no gap: nothing
  EXPECT_DOUBLE_EQ(b.exposed_tp_s, 1.0);
  EXPECT_DOUBLE_EQ(b.exposed_dp_s, 6.0);
  EXPECT_DOUBLE_EQ(b.exposed_pp_s, 0.75);
  EXPECT_DOUBLE_EQ(b.bubble_s, 2.5 + 8.0 + 16.0);
  EXPECT_DOUBLE_EQ(b.compute_s, 0.0);
  EXPECT_DOUBLE_EQ(b.total_s(), 1 + 6 + 3 + 0.25 + 8 + 16);
}

// A collective's gap split by cause. Gap [0, 5]; the rank reached the collective at 1 and its
// last member at 3: [1, 3] (2 s) is waiting for that member. Reached at -10 (before the gap):
// only the part inside the gap counts, [0, 3]. The last member there first: no wait. The sync wait
// an engine finds goes to sync_wait_s, at most the gap; the rest to the collective's kind.
TEST(Attribution, ACollectivesGapIsSplitIntoSyncWaitAndItsOwnTime) {
  EXPECT_DOUBLE_EQ(late_member_wait_s(0, 5, 1, 3), 2.0);
  EXPECT_DOUBLE_EQ(late_member_wait_s(0, 5, -10, 3), 3.0);
  EXPECT_DOUBLE_EQ(late_member_wait_s(0, 5, 1, 1), 0.0);
  EXPECT_DOUBLE_EQ(late_member_wait_s(0, 2, 1, 3), 1.0);  // the gap ends at 2
  Op dp_coll;
  dp_coll.kind = OpKind::kCollective;
  dp_coll.group = GroupKind::kDp;
  Op tp_coll = dp_coll;
  tp_coll.group = GroupKind::kTp;
  TimeBreakdown b;
  attribute_gap(b, 5.0, waited_for(dp_coll, 0, 2.0));
  EXPECT_DOUBLE_EQ(b.sync_wait_s, 2.0);
  EXPECT_DOUBLE_EQ(b.exposed_dp_s, 3.0);
  attribute_gap(b, 1.0, waited_for(tp_coll, 0, 4.0));  // capped at the gap
  EXPECT_DOUBLE_EQ(b.sync_wait_s, 3.0);
  EXPECT_DOUBLE_EQ(b.exposed_tp_s, 0.0);
  attribute_gap(b, 2.0, waited_for(tp_coll, 0, -1.0));  // negative: none
  EXPECT_DOUBLE_EQ(b.exposed_tp_s, 2.0);
  EXPECT_DOUBLE_EQ(b.total_s(), 5.0 + 1.0 + 2.0);
}

// Megatron-LM's pipeline scatter/gather (core/rank_lowering.cpp p2p_batch): the TP all-gather of
// a received chunk (Role::kPipeline) is part of the p2p transfer, not TP communication: its
// comm_s (the gather's and the transfer's own time) is exposed PP, the rest of the gap bubble,
// and a late TP member of it is no sync wait (it was late receiving its own chunk).
TEST(Attribution, APipelineGatherIsPartOfTheTransfer) {
  Op gather;
  gather.kind = OpKind::kCollective;
  gather.group = GroupKind::kTp;
  gather.role = Role::kPipeline;
  const WaitedFor w = waited_for(gather, 0.75, 2.0);
  EXPECT_EQ(w.kind, WaitedFor::Kind::kTransfer);
  EXPECT_DOUBLE_EQ(w.sync_wait_s, 0.0);
  TimeBreakdown b;
  attribute_gap(b, 3.0, w);
  EXPECT_DOUBLE_EQ(b.exposed_pp_s, 0.75);
  EXPECT_DOUBLE_EQ(b.bubble_s, 2.25);
  EXPECT_DOUBLE_EQ(b.exposed_tp_s, 0.0);
  EXPECT_DOUBLE_EQ(b.sync_wait_s, 0.0);
  // Any other TP collective stays TP.
  gather.role = Role::kQkv;
  EXPECT_EQ(waited_for(gather).kind, WaitedFor::Kind::kTpCollective);
}

// ----- matching rules --------------------------------------------------------------------------

TEST(Matching, CollectiveSequenceCountsPerGroupKind) {
  RankProgram rp;
  const GroupKind kinds[] = {GroupKind::kTp, GroupKind::kDp, GroupKind::kTp, GroupKind::kTp,
                             GroupKind::kDp};
  for (GroupKind g : kinds) {
    Op op;
    op.id = static_cast<uint32_t>(rp.ops.size());
    op.kind = OpKind::kCollective;
    op.group = g;
    rp.ops.push_back(op);
    Op c;
    c.id = static_cast<uint32_t>(rp.ops.size());
    rp.ops.push_back(c);  // a compute op between: no sequence number
  }
  EXPECT_EQ(collective_sequence(rp), (std::vector<int64_t>{0, -1, 0, -1, 1, -1, 2, -1, 1, -1}));
}

TEST(Matching, CollectiveKeysMeetWithinAGroupOnly) {
  const RankLayout layout(2, 1, 2, 2);  // tp fastest: ranks 0,1 one TP group; 2,3 the next
  Op op;
  op.kind = OpKind::kCollective;
  op.group = GroupKind::kTp;
  EXPECT_EQ(collective_key(layout, 0, op, 3), collective_key(layout, 1, op, 3));
  EXPECT_FALSE(collective_key(layout, 0, op, 3) == collective_key(layout, 2, op, 3));
  EXPECT_FALSE(collective_key(layout, 0, op, 3) == collective_key(layout, 1, op, 4));
  CollectiveRendezvous<int> r;
  EXPECT_FALSE(r.arrive(collective_key(layout, 0, op, 0), 10, 2).has_value());
  EXPECT_FALSE(r.arrive(collective_key(layout, 2, op, 0), 30, 2).has_value());
  const auto done = r.arrive(collective_key(layout, 1, op, 0), 11, 2);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(*done, (std::vector<int>{10, 11}));
  EXPECT_EQ(r.pending(), 1u);
}

TEST(Matching, SendPairsWithTheRecvOfTheSameTagAndDuplicatesAreErrors) {
  Op send;
  send.kind = OpKind::kSend;
  send.tag = 7;
  Op recv = send;
  recv.kind = OpKind::kRecv;
  EXPECT_EQ(transfer_key(0, send, 4), transfer_key(4, recv, 0));
  TransferMatcher<int> m;
  EXPECT_FALSE(m.post(transfer_key(0, send, 4), true, 1).has_value());
  EXPECT_THAT([&] { m.post(transfer_key(0, send, 4), true, 2, "send activation"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("posted twice (send activation)")));
  const auto other = m.post(transfer_key(4, recv, 0), false, 3);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(*other, 1);
  EXPECT_EQ(m.pending(), 0u);
  EXPECT_THROW(transfer_key(0, Op{}, 1), InvalidArgument);
}

TEST(Matching, MappedPeerShiftsByThePeersOffset) {
  const RankLayout layout(2, 1, 2, 4);  // tp-cp-dp-pp: rank = tp + 2 dp + 4 pp
  Op send;
  send.kind = OpKind::kSend;
  send.peer = layout.rank({0, 0, 0, 1});  // lowered for (0,0,0,0): to the next stage
  const RankCoord program{0, 0, 0, 0};
  EXPECT_EQ(mapped_peer(layout, program, program, send), send.peer);
  EXPECT_EQ(mapped_peer(layout, program, {1, 0, 1, 0}, send), layout.rank({1, 0, 1, 1}));
  // A ring neighbour wraps: the last stage's "next" is stage 0.
  send.peer = layout.rank({0, 0, 0, 3});  // lowered for stage 0, peer stage 3 (offset -1)
  EXPECT_EQ(mapped_peer(layout, program, {1, 0, 0, 2}, send), layout.rank({1, 0, 0, 1}));
}

// ----- TimedProgram ----------------------------------------------------------------------------

TEST(TimedProgram, ComputeDurationsSumKernelsAndApplyEachFactorOnce) {
  const Scenario s = small();
  const Program prog = build_program(s, {0, 1});
  const TableCostModel costs({{"gemm_fwd", 1e-3}, {"adamw_step", 2e-3}});
  const TopologySpec topo = testing::h100();
  const TimedProgram base(prog, costs, topo.gpu);
  const TimedProgram fast(prog, costs, topo.gpu, ComputeScaling{2.0, Straggler{1, 3.0}});
  const RankProgram& rp = prog.ranks.at(0);
  int checked = 0;
  for (const Op& op : rp.ops) {
    double expected = 0;
    for (uint32_t k : op.kernels) {
      const std::string& name = prog.kernels[k].key.name;
      expected += name == "gemm_fwd" ? 1e-3 : name == "adamw_step" ? 2e-3 : 0.0;
    }
    EXPECT_DOUBLE_EQ(base.durations(0)[op.id], expected);
    EXPECT_DOUBLE_EQ(fast.durations(0)[op.id], expected / 2);
    // Rank 1 runs rank 0's ops as the straggler: x 3 on top of the GPU speed, once.
    EXPECT_DOUBLE_EQ(fast.compute_s(1, 0, op.id), expected / 2 * 3);
    EXPECT_DOUBLE_EQ(fast.compute_s(0, 0, op.id), expected / 2);
    checked += expected > 0;
  }
  EXPECT_GT(checked, 0);
  std::map<CostSource, double> by_source;
  fast.add_compute_by_source(1, 0, 2.0, by_source);
  double total = 0;
  for (const Op& op : rp.ops) total += fast.compute_s(1, 0, op.id);
  EXPECT_NEAR(by_source[CostSource::kRoofline], 2.0 * total, 1e-12);
  EXPECT_THROW(base.durations(5), InvalidArgument);
}

TEST(TimedProgram, RefusesImpossibleFactors) {
  const Program prog = build_program(small(), {0});
  const TableCostModel costs;
  const GpuSpec gpu = testing::h100().gpu;
  EXPECT_THAT([&] { TimedProgram(prog, costs, gpu, ComputeScaling{0.0, {}}); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("gpu_speed_scale")));
  EXPECT_THROW(TimedProgram(prog, costs, gpu, ComputeScaling{1.0, Straggler{8, 1.5}}), ConfigError);
  EXPECT_THROW(TimedProgram(prog, costs, gpu, ComputeScaling{1.0, Straggler{0, -1.0}}), ConfigError);
}

// ----- uncontended closed forms ----------------------------------------------------------------

TEST(Uncontended, CollectiveTimeIsTheSlowestFlowOrTheLocalPartPlusLatency) {
  const TopologySpec topo = testing::h100();
  CollectivePlan plan;
  plan.local_time_s = 1e-3;
  plan.latency_s = 5e-6;
  EXPECT_DOUBLE_EQ(uncontended_time_s(plan, topo), 1e-3 + 5e-6);
  plan.flows = {{0, 8, 100e6}, {1, 9, 50e6}};
  const double slowest = uncontended_transfer_s(0, 8, 100e6, topo);
  EXPECT_GT(slowest, 1e-3);
  EXPECT_DOUBLE_EQ(uncontended_time_s(plan, topo), slowest + 5e-6);
}

}  // namespace
}  // namespace traintwin
