#include "core/rank_layout.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Groups = std::vector<std::vector<int64_t>>;

// Megatron-LM's documented example (megatron/core/parallel_state.py, initialize_model_parallel):
// 16 GPUs, TP 2, PP 4 (so DP 2), order tp-dp-pp:
//   8 TP groups [g0,g1],[g2,g3],[g4,g5],[g6,g7],[g8,g9],[g10,g11],[g12,g13],[g14,g15]
//   8 DP groups [g0,g2],[g1,g3],[g4,g6],[g5,g7],[g8,g10],[g9,g11],[g12,g14],[g13,g15]
//   4 PP groups [g0,g4,g8,g12],[g1,g5,g9,g13],[g2,g6,g10,g14],[g3,g7,g11,g15]
TEST(RankLayout, MegatronDocumentedExample) {
  RankLayout layout(/*tp=*/2, /*cp=*/1, /*dp=*/2, /*pp=*/4, "tp-dp-pp");
  EXPECT_EQ(layout.world_size(), 16);
  EXPECT_EQ(layout.all_groups(GroupKind::kTp),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(layout.all_groups(GroupKind::kDp),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(layout.all_groups(GroupKind::kPp),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  // Embedding group: first and last stage of each pipeline.
  EXPECT_EQ(layout.all_groups(GroupKind::kEmbedding),
            (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  // The same layout with the full default order (cp of size 1 anywhere changes nothing).
  RankLayout full(2, 1, 2, 4, "tp-cp-dp-pp");
  for (int64_t r = 0; r < 16; ++r) EXPECT_EQ(full.coord(r), layout.coord(r));
}

TEST(RankLayout, CoordinatesFollowOrderFastestFirst) {
  RankLayout layout(2, 1, 2, 4, "tp-dp-pp");
  // rank = tp + 2*dp + 4*pp
  EXPECT_EQ(layout.coord(0), (RankCoord{0, 0, 0, 0}));
  EXPECT_EQ(layout.coord(1), (RankCoord{1, 0, 0, 0}));
  EXPECT_EQ(layout.coord(2), (RankCoord{0, 0, 1, 0}));
  EXPECT_EQ(layout.coord(13), (RankCoord{1, 0, 0, 3}));
  // Another order: pp fastest. rank = pp + 4*tp + 8*dp.
  RankLayout other(2, 1, 2, 4, "pp-tp-dp");
  EXPECT_EQ(other.coord(1), (RankCoord{0, 0, 0, 1}));
  EXPECT_EQ(other.coord(4), (RankCoord{1, 0, 0, 0}));
  EXPECT_EQ(other.coord(8), (RankCoord{0, 0, 1, 0}));
  EXPECT_THAT(other.group(GroupKind::kPp, 5), ElementsAre(4, 5, 6, 7));
}

// Invariants over a grid of sizes and all 24 orders: coord/rank are inverse bijections; the groups
// of each kind partition the world; every member of a group shares every other coordinate.
TEST(RankLayout, GroupsPartitionTheWorldForEveryOrder) {
  std::vector<std::string> dims = {"tp", "cp", "dp", "pp"};
  std::sort(dims.begin(), dims.end());
  int orders = 0;
  do {
    std::string order = dims[0] + "-" + dims[1] + "-" + dims[2] + "-" + dims[3];
    ++orders;
    for (auto [tp, cp, dp, pp] : std::vector<std::array<int64_t, 4>>{
             {1, 1, 1, 1}, {2, 1, 3, 2}, {4, 2, 2, 3}, {8, 1, 4, 2}, {2, 2, 2, 2}}) {
      RankLayout layout(tp, cp, dp, pp, order);
      const int64_t world = tp * cp * dp * pp;
      ASSERT_EQ(layout.world_size(), world);
      for (int64_t r = 0; r < world; ++r) ASSERT_EQ(layout.rank(layout.coord(r)), r) << order;
      for (GroupKind g : {GroupKind::kTp, GroupKind::kCp, GroupKind::kDp, GroupKind::kPp,
                          GroupKind::kDpCp, GroupKind::kModelParallel, GroupKind::kWorld,
                          GroupKind::kTpDpCp}) {
        auto groups = layout.all_groups(g);
        ASSERT_EQ(static_cast<int64_t>(groups.size()), world / layout.size(g));
        std::set<int64_t> seen;
        for (size_t i = 0; i < groups.size(); ++i) {
          ASSERT_EQ(static_cast<int64_t>(groups[i].size()), layout.size(g));
          for (int64_t m : groups[i]) {
            ASSERT_TRUE(seen.insert(m).second) << "rank in two groups";
            ASSERT_EQ(layout.group(g, m), groups[i]);
            ASSERT_EQ(layout.group_index(g, m), static_cast<int64_t>(i)) << order;
            RankCoord a = layout.coord(m), b = layout.coord(groups[i][0]);
            const bool world = g == GroupKind::kWorld, mp = g == GroupKind::kModelParallel;
            const bool dpcp = g == GroupKind::kDpCp || g == GroupKind::kTpDpCp;
            const bool tpdpcp = g == GroupKind::kTpDpCp;  // a pipeline stage
            if (g != GroupKind::kTp && !mp && !world && !tpdpcp) ASSERT_EQ(a.tp, b.tp);
            if (g != GroupKind::kCp && !dpcp && !world) ASSERT_EQ(a.cp, b.cp);
            if (g != GroupKind::kDp && !dpcp && !world) ASSERT_EQ(a.dp, b.dp);
            if (g != GroupKind::kPp && !mp && !world) ASSERT_EQ(a.pp, b.pp);
          }
        }
        ASSERT_EQ(static_cast<int64_t>(seen.size()), world);
      }
    }
  } while (std::next_permutation(dims.begin(), dims.end()));
  EXPECT_EQ(orders, 24);
}

TEST(RankLayout, PipelineGroupIsOrderedByStage) {
  RankLayout layout(2, 1, 2, 4, "tp-cp-dp-pp");
  auto pp = layout.group(GroupKind::kPp, 7);
  ASSERT_EQ(pp.size(), 4u);
  for (int64_t stage = 0; stage < 4; ++stage) EXPECT_EQ(layout.coord(pp[stage]).pp, stage);
  EXPECT_THAT(layout.group(GroupKind::kEmbedding, 7), ElementsAre(3, 15));
  RankLayout no_pp(2, 1, 2, 1);
  EXPECT_THAT(no_pp.group(GroupKind::kEmbedding, 3), ElementsAre(3));
}

// DualPipe's mirror groups (GroupKind::kPpMirror): pipeline ranks r and PP - 1 - r of one
// pipeline, which hold the same two stages. Megatron's documented layout (TP 2, DP 2, PP 4,
// tp-dp-pp): rank 1 (pp 0) pairs with 13 (pp 3), rank 5 (pp 1) with 9 (pp 2); the groups
// partition the world, each with its own index in 0 .. count - 1; with an odd PP the middle
// stage is alone, and with PP 1 every rank.
TEST(RankLayout, PipelineMirrorGroupsPairStagesRAndPMinus1MinusR) {
  RankLayout layout(2, 1, 2, 4, "tp-dp-pp");
  EXPECT_EQ(layout.size(GroupKind::kPpMirror), 2);
  EXPECT_STREQ(to_string(GroupKind::kPpMirror), "pp-mirror");
  EXPECT_THAT(layout.group(GroupKind::kPpMirror, 1), ElementsAre(1, 13));
  EXPECT_THAT(layout.group(GroupKind::kPpMirror, 13), ElementsAre(1, 13));
  EXPECT_THAT(layout.group(GroupKind::kPpMirror, 9), ElementsAre(5, 9));
  const auto groups = layout.all_groups(GroupKind::kPpMirror);
  ASSERT_EQ(groups.size(), 8u);
  std::set<int64_t> seen, indices;
  for (const auto& g : groups) {
    ASSERT_EQ(g.size(), 2u);
    const RankCoord a = layout.coord(g[0]), b = layout.coord(g[1]);
    EXPECT_EQ(a.pp + b.pp, 3);
    EXPECT_TRUE(a.tp == b.tp && a.dp == b.dp && a.cp == b.cp);
    for (int64_t m : g) {
      EXPECT_TRUE(seen.insert(m).second);
      EXPECT_EQ(layout.group_index(GroupKind::kPpMirror, m),
                layout.group_index(GroupKind::kPpMirror, g[0]));
    }
    indices.insert(layout.group_index(GroupKind::kPpMirror, g[0]));
  }
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_EQ(indices, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  RankLayout odd(1, 1, 1, 3);
  EXPECT_THAT(odd.group(GroupKind::kPpMirror, 1), ElementsAre(1));
  EXPECT_THAT(odd.group(GroupKind::kPpMirror, 2), ElementsAre(0, 2));
  RankLayout no_pp(2, 1, 2, 1);
  EXPECT_EQ(no_pp.size(GroupKind::kPpMirror), 1);
  EXPECT_THAT(no_pp.group(GroupKind::kPpMirror, 3), ElementsAre(3));
}

// HSDP groups (Megatron-Core's partial data-parallel groups with CP): TP 2, CP 2, DP 4, PP 2
// in the order tp-cp-dp-pp, 2 instances. Rank 0's DP x CP group is the 8 ranks with tp 0 and
// pp 0: {0, 2, 4, ..., 14}; its sharding group the first 4 of them, {0, 2, 4, 6}; rank 10's the
// last 4; the replica groups pair position i of the two blocks: {0, 8}, {2, 10}, ... Each kind
// partitions the world, and group_index numbers its groups 0 .. count - 1, one index per group.
TEST(RankLayout, HsdpShardAndReplicaGroupsCutTheDpCpGroup) {
  const RankLayout layout(2, 2, 4, 2, "tp-cp-dp-pp", 1, 0, /*dp_replicas=*/2);
  EXPECT_EQ(layout.size(GroupKind::kDpShard), 4);
  EXPECT_EQ(layout.size(GroupKind::kDpReplica), 2);
  EXPECT_THAT(layout.group(GroupKind::kDpCp, 0), ElementsAre(0, 2, 4, 6, 8, 10, 12, 14));
  EXPECT_THAT(layout.group(GroupKind::kDpShard, 0), ElementsAre(0, 2, 4, 6));
  EXPECT_THAT(layout.group(GroupKind::kDpShard, 10), ElementsAre(8, 10, 12, 14));
  EXPECT_THAT(layout.group(GroupKind::kDpReplica, 2), ElementsAre(2, 10));
  EXPECT_THAT(layout.group(GroupKind::kDpReplica, 17), ElementsAre(17, 25));
  EXPECT_STREQ(to_string(GroupKind::kDpShard), "dp-shard");
  EXPECT_STREQ(to_string(GroupKind::kDpReplica), "dp-replica");
  EXPECT_STREQ(to_string(GroupKind::kTpDpCp), "tp-dp-cp");
  for (GroupKind g : {GroupKind::kDpShard, GroupKind::kDpReplica}) {
    const auto groups = layout.all_groups(g);
    EXPECT_EQ(static_cast<int64_t>(groups.size()), 32 / layout.size(g));
    std::set<int64_t> indices;
    for (const auto& members : groups) {
      const int64_t index = layout.group_index(g, members.front());
      for (int64_t r : members) {
        EXPECT_EQ(layout.group_index(g, r), index) << to_string(g) << " rank " << r;
        EXPECT_EQ(layout.group(g, r), members);
      }
      indices.insert(index);
    }
    EXPECT_EQ(indices.size(), groups.size());
    EXPECT_EQ(*indices.rbegin(), static_cast<int64_t>(groups.size()) - 1);
  }
  // One instance: the sharding group is DP x CP, a replica group one rank.
  const RankLayout one(2, 2, 4, 2);
  EXPECT_EQ(one.group(GroupKind::kDpShard, 0), one.group(GroupKind::kDpCp, 0));
  EXPECT_THAT(one.group(GroupKind::kDpReplica, 6), ElementsAre(6));
  EXPECT_THROW(RankLayout(2, 2, 4, 2, "tp-cp-dp-pp", 1, 0, 3), InvalidArgument);
  EXPECT_THROW(RankLayout(2, 2, 4, 2, "tp-cp-dp-pp", 1, 0, 0), InvalidArgument);
}

TEST(RankLayout, RejectsBadOrdersAndSizes) {
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message([] { RankLayout(2, 1, 2, 2, "tp-dp-xx"); }), HasSubstr("unknown dimension 'xx'"));
  EXPECT_THAT(message([] { RankLayout(2, 1, 2, 2, "tp-tp-dp-pp"); }), HasSubstr("appears twice"));
  // ep of size 1 may stand in the order (Megatron's default order has it); ep > 1 must.
  EXPECT_EQ(RankLayout(2, 1, 2, 2, "tp-cp-ep-dp-pp").coord(5), (RankCoord{1, 0, 0, 1}));
  EXPECT_THAT(message([] { RankLayout(2, 1, 2, 2, "tp-cp-dp-pp", 2); }),
              HasSubstr("ep has size 2 but is not in the order"));
  EXPECT_THAT(message([] { RankLayout(2, 1, 2, 2, "tp-cp-ep-dp-pp", 3); }),
              HasSubstr("must divide tp x cp x dp"));
  EXPECT_THAT(message([] { RankLayout(2, 1, 2, 2, "tp-cp-ep-dp-pp", 1, 8); }),
              HasSubstr("must divide tp x cp x dp"));
  EXPECT_THAT(message([] { RankLayout(2, 1, 2, 2, "tp-cp-ep-pp-dp", 4, 1).group(GroupKind::kEp, 0); }),
              HasSubstr("put pp last"));
  EXPECT_THAT(message([] { RankLayout(2, 1, 2, 2, "tp-cp-dp"); }), HasSubstr("pp has size 2 but is not in the order"));
  EXPECT_THAT(message([] { RankLayout(0, 1, 2, 2); }), HasSubstr(">= 1"));
  EXPECT_THAT(message([] { RankLayout(2, 1, 2, 2).coord(8); }), HasSubstr("outside [0, 8)"));
}

// Parallel folding (Megatron-Core expert_decoder_rank_generator), worked by hand for 16 ranks,
// TP 2, DP 4, PP 2, order tp-cp-ep-dp-pp: dense rank = tp + 2 dp + 8 pp.
TEST(RankLayout, ExpertGroupsFoldOverTheSameRanks) {
  // EP 4, ETP 1: expert-DP = 2 x 4 / 4 = 2; expert rank = ep + 4 edp + 8 pp.
  const RankLayout a(2, 1, 4, 2, "tp-cp-ep-dp-pp", 4, 1);
  EXPECT_EQ(a.size(GroupKind::kEdp), 2);
  EXPECT_THAT(a.group(GroupKind::kEp, 0), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(a.group(GroupKind::kEp, 13), ElementsAre(12, 13, 14, 15));
  EXPECT_THAT(a.group(GroupKind::kEdp, 0), ElementsAre(0, 4));
  EXPECT_THAT(a.group(GroupKind::kEtp, 6), ElementsAre(6));
  EXPECT_THAT(a.group(GroupKind::kEtpEp, 6), ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(a.expert_coord(13), (ExpertCoord{0, 1, 1, 1}));
  // The dense TP group of rank 0 ({0, 1}) lies inside its EP group: attention and experts fold
  // over the same ranks.
  EXPECT_THAT(a.group(GroupKind::kTp, 0), ElementsAre(0, 1));
  // EP 2, ETP 2 (= TP, Megatron's default): expert rank = etp + 2 ep + 4 edp + 8 pp.
  const RankLayout b(2, 1, 4, 2, "tp-cp-ep-dp-pp", 2);
  EXPECT_EQ(b.size(GroupKind::kEtp), 2);
  EXPECT_THAT(b.group(GroupKind::kEp, 5), ElementsAre(5, 7));
  EXPECT_THAT(b.group(GroupKind::kEtp, 5), ElementsAre(4, 5));
  EXPECT_THAT(b.group(GroupKind::kEdp, 5), ElementsAre(1, 5));
  EXPECT_THAT(b.group(GroupKind::kEtpEp, 5), ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(b.expert_coord(5), (ExpertCoord{1, 0, 1, 0}));
  // CP folds into the expert groups too: TP 1, CP 2, DP 2, EP 4 -> one EP group per stage.
  const RankLayout c(1, 2, 2, 1, "tp-cp-ep-dp-pp", 4);
  EXPECT_THAT(c.group(GroupKind::kEp, 3), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(c.size(GroupKind::kEdp), 1);
}

TEST(RankLayout, ExpertGroupsPartitionEveryStage) {
  for (auto [tp, cp, dp, pp, ep, etp] : std::vector<std::array<int64_t, 6>>{
           {2, 1, 4, 2, 4, 1}, {2, 1, 4, 2, 2, 2}, {4, 2, 2, 2, 8, 2}, {1, 2, 4, 1, 4, 2},
           {8, 1, 8, 1, 8, 8}}) {
    for (const char* order : {"tp-cp-ep-dp-pp", "tp-ep-cp-dp-pp", "tp-cp-ep-pp-dp"}) {
      const bool stages_differ = std::string(order) == "tp-cp-ep-pp-dp" && pp > 1 &&
                                 tp * cp != etp * ep;
      if (stages_differ) {
        EXPECT_THROW(RankLayout(tp, cp, dp, pp, order, ep, etp).check_expert_groups(),
                     InvalidArgument) << order;
        continue;
      }
      const RankLayout layout(tp, cp, dp, pp, order, ep, etp);
      const int64_t world = layout.world_size();
      EXPECT_EQ(layout.size(GroupKind::kEtp) * layout.size(GroupKind::kEp) *
                    layout.size(GroupKind::kEdp),
                tp * cp * dp);
      for (GroupKind g : {GroupKind::kEp, GroupKind::kEtp, GroupKind::kEdp, GroupKind::kEtpEp}) {
        const auto groups = layout.all_groups(g);
        ASSERT_EQ(static_cast<int64_t>(groups.size()), world / layout.size(g)) << order;
        std::set<int64_t> seen;
        for (size_t i = 0; i < groups.size(); ++i) {
          for (int64_t m : groups[i]) {
            ASSERT_TRUE(seen.insert(m).second) << "rank in two groups";
            ASSERT_EQ(layout.group_index(g, m), static_cast<int64_t>(i)) << order;
            // Every expert group stays inside one pipeline stage.
            ASSERT_EQ(layout.coord(m).pp, layout.coord(groups[i][0]).pp);
            ASSERT_EQ(layout.expert_coord(m).pp, layout.coord(m).pp);
          }
        }
        ASSERT_EQ(static_cast<int64_t>(seen.size()), world);
      }
    }
  }
}

// The check that both generators put every rank on the same pipeline stage (Megatron-Core's
// assert) against rank-by-rank enumeration with Megatron's RankGenerator rule (the first name of
// the order varies fastest): over every order of the five dimensions and a set of sizes, the
// layout refuses expert groups exactly when some rank's stages differ, naming the first such rank.
TEST(RankLayout, ExpertStageCheckMatchesEveryRank) {
  std::array<std::string, 5> names = {"cp", "dp", "ep", "pp", "tp"};  // sorted: all permutations
  int refused = 0, accepted = 0;
  do {
    const std::string order =
        names[0] + "-" + names[1] + "-" + names[2] + "-" + names[3] + "-" + names[4];
    for (auto [tp, cp, dp, pp, ep, etp] : std::vector<std::array<int64_t, 6>>{
             {2, 1, 4, 2, 4, 1}, {2, 1, 4, 2, 2, 2}, {4, 2, 2, 2, 8, 2}, {1, 2, 4, 3, 4, 2},
             {2, 2, 2, 4, 2, 1}, {8, 1, 8, 1, 8, 8}, {1, 1, 4, 2, 1, 1}}) {
      const int64_t edp = tp * cp * dp / (etp * ep);
      // Sizes by name in the dense and the expert generator (tp = etp, cp = 1, dp = expert-DP).
      auto stage = [&](int64_t rank, bool expert) {
        int64_t stride = 1;
        for (const std::string& n : names) {
          const int64_t size = n == "tp"   ? (expert ? etp : tp)
                               : n == "cp" ? (expert ? 1 : cp)
                               : n == "ep" ? (expert ? ep : 1)
                               : n == "dp" ? (expert ? edp : dp)
                                           : pp;
          if (n == "pp") return (rank / stride) % pp;
          stride *= size;
        }
        return int64_t{-1};
      };
      int64_t first_differing = -1;
      for (int64_t r = 0; r < tp * cp * dp * pp && first_differing < 0; ++r) {
        if (stage(r, false) != stage(r, true)) first_differing = r;
      }
      const RankLayout layout(tp, cp, dp, pp, order, ep, etp);
      if (first_differing < 0) {
        EXPECT_NO_THROW(layout.check_expert_groups()) << order;
        ++accepted;
        continue;
      }
      ++refused;
      try {
        layout.check_expert_groups();
        ADD_FAILURE() << order << ": rank " << first_differing << " changes stage, accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_THAT(e.what(), HasSubstr("would put rank " + std::to_string(first_differing) +
                                        " on another pipeline stage"))
            << order;
      }
    }
  } while (std::next_permutation(names.begin(), names.end()));
  EXPECT_GT(refused, 100);
  EXPECT_GT(accepted, 100);
}

}  // namespace
}  // namespace traintwin
