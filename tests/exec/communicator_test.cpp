// Communicators. LocalCommunicator: a world of one rank (copies, no-ops, no peers).
// MpiCommunicator: real collectives and transfers between 8 MPI processes. The
// MpiCommunicatorEightRanks tests do their work only in a process started by mpirun with
// TRAINTWIN_MPI_CHILD=1 (otherwise they skip); MpiRun.CommunicatorTestsPassOnEightRanks starts
// this executable under `mpirun -np 8` with that filter and checks that every rank passed.
// Expected values are worked by hand from the rank formula of the layout (order tp-cp-dp-pp,
// tp fastest): for TP=2, DP=2, PP=2, rank = tp + 2 dp + 4 pp; for TP=2, PP=4, rank = tp + 2 pp.
#include "exec/communicator.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rank_layout.hpp"
#include "exec/local_communicator.hpp"
#include "exec/mpi_communicator.hpp"
#include "tests/all_to_all_v_case.hpp"
#include "tests/mpi_child_run.hpp"

namespace traintwin::exec {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::array<GroupKind, 12> kAllKinds = {
    GroupKind::kTp,        GroupKind::kCp,    GroupKind::kDp,    GroupKind::kPp,
    GroupKind::kDpCp,      GroupKind::kEmbedding, GroupKind::kModelParallel, GroupKind::kWorld,
    GroupKind::kEp,        GroupKind::kEtp,   GroupKind::kEdp,   GroupKind::kEtpEp};

// --- LocalCommunicator ------------------------------------------------------------------------

TEST(LocalCommunicator, RefusesALayoutOfMoreThanOneRank) {
  try {
    LocalCommunicator c(RankLayout(2, 1, 1, 1));
    FAIL() << "a world of 2 ranks was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("world size is 2"), HasSubstr("tp=2"), HasSubstr("world size 1")));
  }
  EXPECT_THROW(LocalCommunicator(RankLayout(1, 1, 1, 3)), InvalidArgument);
  EXPECT_THROW(LocalCommunicator(RankLayout(1, 2, 1, 1)), InvalidArgument);
}

TEST(LocalCommunicator, IsRankZeroOfAWorldOfOne) {
  const LocalCommunicator c(RankLayout(1, 1, 1, 1));
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.world_size(), 1);
  EXPECT_EQ(c.layout().world_size(), 1);
  EXPECT_EQ(c.layout().order(), "tp-cp-dp-pp");
}

TEST(LocalCommunicator, AllReduceOverOneMemberLeavesTheDataUnchanged) {
  LocalCommunicator c(RankLayout(1, 1, 1, 1));
  for (GroupKind g : kAllKinds) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      std::vector<float> f = {1.5f, -2.0f, 3.25f};
      std::vector<double> d = {1e-300, -7.0, 0.1};
      c.all_reduce(g, f, op)->wait();
      c.all_reduce(g, d, op)->wait();
      EXPECT_THAT(f, ElementsAre(1.5f, -2.0f, 3.25f)) << to_string(g);
      EXPECT_THAT(d, ElementsAre(1e-300, -7.0, 0.1)) << to_string(g);
    }
  }
}

TEST(LocalCommunicator, AllGatherAndReduceScatterCopyAfterCheckingLengths) {
  LocalCommunicator c(RankLayout(1, 1, 1, 1));
  const std::vector<float> in = {1, 2, 3};
  for (GroupKind g : kAllKinds) {
    std::vector<float> out(3, 0.0f);
    c.all_gather(g, in, out)->wait();
    EXPECT_EQ(out, in) << to_string(g);
    std::fill(out.begin(), out.end(), 0.0f);
    c.reduce_scatter(g, in, out, ReduceOp::kSum)->wait();
    EXPECT_EQ(out, in) << to_string(g);
  }
  std::vector<float> wrong(4);
  try {
    c.all_gather(GroupKind::kTp, in, wrong);
    FAIL() << "all_gather with output 4 != 1 x 3 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("all_gather"), HasSubstr("tp"), HasSubstr("4")));
  }
  EXPECT_THROW(c.reduce_scatter(GroupKind::kDp, in, wrong, ReduceOp::kSum), InvalidArgument);
  std::vector<float> empty;
  EXPECT_THROW(c.all_gather(GroupKind::kWorld, in, empty), InvalidArgument);
}

TEST(LocalCommunicator, AllToAllVCopiesItsOwnPieceAfterCheckingCounts) {
  LocalCommunicator c(RankLayout(1, 1, 1, 1));
  const std::vector<float> in = {1, 2, 3};
  std::vector<float> out(3, 0.0f);
  const std::vector<int64_t> three = {3};
  c.all_to_all_v(GroupKind::kWorld, in, three, out, three)->wait();
  EXPECT_EQ(out, in);
  std::vector<float> none;
  const std::vector<int64_t> zero = {0};
  c.all_to_all_v(GroupKind::kTp, none, zero, none, zero)->wait();  // no token routed: fine
  try {
    c.all_to_all_v(GroupKind::kDp, in, std::vector<int64_t>{2}, out, three);
    FAIL() << "send counts summing to 2 for 3 elements were accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("all_to_all_v"), HasSubstr("send_counts"),
                                HasSubstr("sum to 2"), HasSubstr("3")));
  }
  EXPECT_THROW(c.all_to_all_v(GroupKind::kDp, in, std::vector<int64_t>{3, 0}, out, three),
               InvalidArgument);
  EXPECT_THROW(c.all_to_all_v(GroupKind::kDp, in, std::vector<int64_t>{-3}, out, three),
               InvalidArgument);
}

TEST(LocalCommunicator, RingExchangeOverOneMemberCopies) {
  LocalCommunicator c(RankLayout(1, 1, 1, 1));
  const std::vector<float> send = {1.0f, 2.0f};
  std::vector<float> recv(2);
  c.ring_exchange(GroupKind::kCp, send, recv)->wait();
  EXPECT_EQ(recv, send);
  std::vector<float> wrong(3);
  EXPECT_THROW(c.ring_exchange(GroupKind::kCp, send, wrong), InvalidArgument);
}

TEST(LocalCommunicator, SendAndRecvHaveNoPeer) {
  LocalCommunicator c(RankLayout(1, 1, 1, 1));
  std::vector<float> buf(2);
  for (int64_t peer : {0, 1}) {
    try {
      c.send(peer, 3, buf);
      FAIL() << "send was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("send"), HasSubstr("no peer")));
    }
    EXPECT_THROW(c.recv(peer, 3, buf), InvalidArgument);
  }
}

TEST(LocalCommunicator, RequestsAreCompleteAndWaitIsIdempotent) {
  LocalCommunicator c(RankLayout(1, 1, 1, 1));
  const std::vector<float> in = {4, 5};
  std::vector<float> out(2);
  RequestPtr r = c.all_gather(GroupKind::kWorld, in, out);
  // Complete when started: the output is already there before wait().
  EXPECT_EQ(out, in);
  r->wait();
  r->wait();
  EXPECT_EQ(out, in);
}

// --- MpiCommunicator (under mpirun) -----------------------------------------------------------

bool mpi_child() {
  const char* v = std::getenv("TRAINTWIN_MPI_CHILD");
  return v != nullptr && std::string(v) == "1";
}

// MPI is initialized once per child process, before the first test and finalized after the last.
class MpiChildEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!mpi_child()) return;
    for (const MpiParameterDefault& d : kMpiCollectiveDefaults) {
      const char* v = std::getenv(d.variable);
      launch_values()[d.variable] = v == nullptr ? std::string() : std::string(v);
    }
    env_ = std::make_unique<MpiEnvironment>();
  }
  /// The Open MPI parameters of kMpiCollectiveDefaults as the launch gave them ("" = unset),
  /// read before MpiEnvironment set its defaults.
  static std::map<std::string, std::string>& launch_values() {
    static std::map<std::string, std::string> values;
    return values;
  }
  void TearDown() override { env_.reset(); }

 private:
  std::unique_ptr<MpiEnvironment> env_;
};
[[maybe_unused]] ::testing::Environment* const kMpiChildEnvironment =
    ::testing::AddGlobalTestEnvironment(new MpiChildEnvironment);

int mpi_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Every test runs on all 8 ranks in the same order; each starts the same collectives in the same
// order on every rank and checks only local results, so that a failed expectation on one rank
// does not leave the others waiting. Failures print the rank.
class MpiCommunicatorEightRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!mpi_child()) {
      GTEST_SKIP() << "runs under mpirun: MpiRun.CommunicatorTestsPassOnEightRanks starts it "
                      "with TRAINTWIN_MPI_CHILD=1";
    }
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ASSERT_EQ(size, 8) << "the MPI tests need exactly 8 ranks";
    rank_ = mpi_rank();
  }
  std::string at() const { return "on rank " + std::to_string(rank_); }

  int64_t rank_ = 0;
  const RankLayout layout_{2, 1, 2, 2};  // TP=2, CP=1, DP=2, PP=2
};

std::vector<float> as_floats(const std::vector<int64_t>& v) {
  return std::vector<float>(v.begin(), v.end());
}

TEST_F(MpiCommunicatorEightRanks, OpenMpiCollectiveDefaultsApplyUnlessTheLaunchGaveThem) {
  for (const MpiParameterDefault& d : kMpiCollectiveDefaults) {
    const char* v = std::getenv(d.variable);
    ASSERT_NE(v, nullptr) << d.variable << " " << at();
    const std::string given = MpiChildEnvironment::launch_values().at(d.variable);
    EXPECT_EQ(std::string(v), given.empty() ? std::string(d.value) : given) << d.variable << " " << at();
  }
  EXPECT_EQ(std::string(kMpiCollectiveDefaults[0].variable),
            "OMPI_MCA_coll_libnbc_iallreduce_algorithm");
  EXPECT_EQ(std::string(kMpiCollectiveDefaults[0].value), "3");  // reduce-scatter + all-gather
}

TEST_F(MpiCommunicatorEightRanks, RankAndWorldSizeAreMpiWorlds) {
  MpiCommunicator c(layout_);
  EXPECT_EQ(c.rank(), rank_);
  EXPECT_EQ(c.world_size(), 8);
  EXPECT_EQ(c.layout().world_size(), 8);
  EXPECT_GE(c.max_tag(), 32767);  // the MPI standard's minimum MPI_TAG_UB
}

TEST_F(MpiCommunicatorEightRanks, AllReduceSumOfGlobalRanksOverEachGroup) {
  MpiCommunicator c(layout_);
  const int64_t r = rank_;
  // Hand sums (rank = tp + 2 dp + 4 pp): tp group {r - r%2, +1}; dp group {r - (r&2), +2};
  // pp group {r%4, r%4 + 4}; world 0 + ... + 7 = 28.
  const int64_t tp0 = r - r % 2, dp0 = r - (r & 2), pp0 = r % 4;
  const std::vector<std::pair<GroupKind, int64_t>> hand = {
      {GroupKind::kTp, 2 * tp0 + 1},
      {GroupKind::kDp, 2 * dp0 + 2},
      {GroupKind::kPp, 2 * pp0 + 4},
      {GroupKind::kWorld, 28},
      {GroupKind::kCp, r},                   // CP = 1
      {GroupKind::kDpCp, 2 * dp0 + 2},       // CP = 1: the dp group
      {GroupKind::kEmbedding, 2 * pp0 + 4},  // PP = 2: first and last stage = the pp group
  };
  for (const auto& [kind, sum] : hand) {
    std::vector<float> data = {static_cast<float>(r), static_cast<float>(10 * r + 1)};
    c.all_reduce(kind, data, ReduceOp::kSum)->wait();
    const std::vector<int64_t> members = layout_.group(kind, r);
    const int64_t group_sum = std::accumulate(members.begin(), members.end(), int64_t{0});
    EXPECT_EQ(group_sum, sum) << to_string(kind) << " " << at();
    const auto n = static_cast<int64_t>(members.size());
    EXPECT_THAT(data, ElementsAre(static_cast<float>(sum), static_cast<float>(10 * sum + n)))
        << to_string(kind) << " " << at();
  }
  // mp (TP x PP, same dp): {2dp, 2dp+1, 2dp+4, 2dp+5}, sum 8 dp' + 10 with dp' = 2 dp.
  std::vector<float> mp = {static_cast<float>(r)};
  c.all_reduce(GroupKind::kModelParallel, mp, ReduceOp::kSum)->wait();
  EXPECT_EQ(mp[0], static_cast<float>(4 * (r & 2) + 10)) << at();
}

TEST_F(MpiCommunicatorEightRanks, AllReduceMaxOverEachGroup) {
  MpiCommunicator c(layout_);
  const int64_t r = rank_;
  for (GroupKind kind : kAllKinds) {
    std::vector<float> data = {static_cast<float>(r), static_cast<float>(-r)};
    c.all_reduce(kind, data, ReduceOp::kMax)->wait();
    const std::vector<int64_t> members = layout_.group(kind, r);
    const int64_t hi = *std::max_element(members.begin(), members.end());
    const int64_t lo = *std::min_element(members.begin(), members.end());
    EXPECT_THAT(data, ElementsAre(static_cast<float>(hi), static_cast<float>(-lo)))
        << to_string(kind) << " " << at();
  }
  // By hand: the tp group's max is r | 1, the world's 7.
  std::vector<float> tp = {static_cast<float>(r)};
  c.all_reduce(GroupKind::kTp, tp, ReduceOp::kMax)->wait();
  EXPECT_EQ(tp[0], static_cast<float>(r | 1)) << at();
  std::vector<float> world = {static_cast<float>(r)};
  c.all_reduce(GroupKind::kWorld, world, ReduceOp::kMax)->wait();
  EXPECT_EQ(world[0], 7.0f) << at();
}

TEST_F(MpiCommunicatorEightRanks, AllReduceInDoubleKeepsDoublePrecision) {
  MpiCommunicator c(layout_);
  const double eps = std::ldexp(1.0, -40);  // below float's resolution at 1 (2^-23)
  std::vector<double> data = {1.0 + static_cast<double>(rank_) * eps, -static_cast<double>(rank_)};
  c.all_reduce(GroupKind::kWorld, data, ReduceOp::kSum)->wait();
  // 8 + 28 eps spans 2^3 .. 2^-38: exact in double (every partial sum too), lost in float.
  EXPECT_EQ(data[0], 8.0 + 28.0 * eps) << at();
  EXPECT_NE(static_cast<double>(static_cast<float>(data[0])), data[0]);
  EXPECT_EQ(data[1], -28.0) << at();
  std::vector<double> mx = {1.0 + static_cast<double>(rank_) * eps};
  c.all_reduce(GroupKind::kPp, mx, ReduceOp::kMax)->wait();
  EXPECT_EQ(mx[0], 1.0 + static_cast<double>(rank_ % 4 + 4) * eps) << at();
}

TEST_F(MpiCommunicatorEightRanks, AllGatherConcatenatesInGroupOrder) {
  MpiCommunicator c(layout_);
  const int64_t r = rank_;
  for (GroupKind kind : kAllKinds) {
    const std::vector<int64_t> members = layout_.group(kind, r);
    const std::vector<float> in = {static_cast<float>(r), static_cast<float>(r) + 0.5f};
    std::vector<float> out(2 * members.size(), -1.0f);
    c.all_gather(kind, in, out)->wait();
    std::vector<float> expected;
    for (int64_t m : members) {
      expected.push_back(static_cast<float>(m));
      expected.push_back(static_cast<float>(m) + 0.5f);
    }
    EXPECT_EQ(out, expected) << to_string(kind) << " " << at();
  }
  // By hand: the pp group is {r%4, r%4+4}, the mp group {2dp, 2dp+1, 2dp+4, 2dp+5}.
  const std::vector<float> one = {static_cast<float>(r)};
  std::vector<float> pp(2), mp(4);
  c.all_gather(GroupKind::kPp, one, pp)->wait();
  c.all_gather(GroupKind::kModelParallel, one, mp)->wait();
  const int64_t d2 = r & 2;
  EXPECT_EQ(pp, as_floats({r % 4, r % 4 + 4})) << at();
  EXPECT_EQ(mp, as_floats({d2, d2 + 1, d2 + 4, d2 + 5})) << at();
}

TEST_F(MpiCommunicatorEightRanks, ReduceScatterGivesEachMemberItsReducedPiece) {
  MpiCommunicator c(layout_);
  const int64_t r = rank_;
  constexpr int64_t k = 3;  // elements per member
  for (GroupKind kind : {GroupKind::kTp, GroupKind::kDp, GroupKind::kPp, GroupKind::kModelParallel,
                         GroupKind::kWorld}) {
    const std::vector<int64_t> members = layout_.group(kind, r);
    const auto n = static_cast<int64_t>(members.size());
    const auto pos = std::find(members.begin(), members.end(), r) - members.begin();
    // input[i k + j] = 100 r + 10 i + j: member `pos` gets sum over members m of
    // (100 m + 10 pos + j) = 100 sum(m) + n (10 pos + j); max: 100 max(m) + 10 pos + j.
    std::vector<float> in(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < k; ++j) in[i * k + j] = static_cast<float>(100 * r + 10 * i + j);
    }
    const int64_t sum = std::accumulate(members.begin(), members.end(), int64_t{0});
    const int64_t hi = *std::max_element(members.begin(), members.end());
    std::vector<float> out(k), out_max(k);
    c.reduce_scatter(kind, in, out, ReduceOp::kSum)->wait();
    c.reduce_scatter(kind, in, out_max, ReduceOp::kMax)->wait();
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(out[j], static_cast<float>(100 * sum + n * (10 * pos + j)))
          << to_string(kind) << " j=" << j << " " << at();
      EXPECT_EQ(out_max[j], static_cast<float>(100 * hi + 10 * pos + j))
          << to_string(kind) << " j=" << j << " " << at();
    }
  }
}

TEST_F(MpiCommunicatorEightRanks, AllToAllVDeliversVariablePiecesInMemberOrder) {
  // Over groups of 2 (tp), 4 (model-parallel) and 8 (world) ranks: member at position p sends
  // member q the (p + 2 q) % 3 values 1000 r + 10 q + i (i = 0, 1, ...), zero-length pieces
  // included; q receives from each p exactly those, in member order.
  MpiCommunicator c(layout_);
  const int64_t r = rank_;
  // An expert layout on the same 8 ranks: EP 2, ETP 1 (expert-DP 2), as MoE dispatch uses it.
  const RankLayout experts(2, 1, 2, 2, "tp-cp-ep-dp-pp", 2, 1);
  MpiCommunicator ce(experts);
  struct Case {
    MpiCommunicator* comm;
    const RankLayout* layout;
    GroupKind kind;
  };
  for (const Case& k : {Case{&c, &layout_, GroupKind::kTp}, Case{&c, &layout_, GroupKind::kModelParallel},
                        Case{&c, &layout_, GroupKind::kWorld}, Case{&ce, &experts, GroupKind::kEp},
                        Case{&ce, &experts, GroupKind::kEdp}}) {
    const GroupKind kind = k.kind;
    const auto t = traintwin::testing::all_to_all_v_case(k.layout->group(kind, r), r);
    std::vector<float> out(t.expected.size(), -1.0f);
    k.comm->all_to_all_v(kind, t.in, t.send_counts, out, t.recv_counts)->wait();
    EXPECT_EQ(out, t.expected) << to_string(kind) << " " << at();
  }
  // By hand: the expert generator (etp 1, ep 2, edp 2, pp 2; ep fastest) puts rank r at
  // ep = r % 2, edp = (r / 2) % 2: EP group {r - r % 2, +1}, expert-DP group {r - (r & 2), +2}.
  EXPECT_EQ(experts.group(GroupKind::kEp, r), (std::vector<int64_t>{r - r % 2, r - r % 2 + 1}));
  EXPECT_EQ(experts.group(GroupKind::kEdp, r), (std::vector<int64_t>{r - (r & 2), r - (r & 2) + 2}));
  // Two in flight at once on different groups (dispatch over one group while another finishes).
  const std::vector<float> one = {static_cast<float>(r)};
  const std::vector<int64_t> ones_tp = {1, 1}, ones_world(8, 1);
  std::vector<float> tp_in = {static_cast<float>(r), static_cast<float>(r)}, tp_out(2);
  std::vector<float> world_in(8, static_cast<float>(r)), world_out(8);
  RequestPtr a = c.all_to_all_v(GroupKind::kTp, tp_in, ones_tp, tp_out, ones_tp);
  RequestPtr b = c.all_to_all_v(GroupKind::kWorld, world_in, ones_world, world_out, ones_world);
  b->wait();
  a->wait();
  EXPECT_EQ(tp_out, as_floats({r - r % 2, r - r % 2 + 1})) << at();
  EXPECT_EQ(world_out, as_floats({0, 1, 2, 3, 4, 5, 6, 7})) << at();
  EXPECT_THROW(c.all_to_all_v(GroupKind::kTp, one, std::vector<int64_t>{1}, tp_out, ones_tp),
               InvalidArgument);
}

TEST_F(MpiCommunicatorEightRanks, BufferLengthsMustMatchTheGroupSize) {
  MpiCommunicator c(layout_);
  const std::vector<float> in(3);
  std::vector<float> out(5);
  try {
    c.all_gather(GroupKind::kTp, in, out);
    FAIL() << "all_gather output 5 != 2 x 3 accepted " << at();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("all_gather"), HasSubstr("group tp"),
                                HasSubstr("group size 2"), HasSubstr("= 6")));
  }
  try {
    c.reduce_scatter(GroupKind::kWorld, in, out, ReduceOp::kSum);
    FAIL() << "reduce_scatter input 3 != 8 x 5 accepted " << at();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("reduce_scatter"), HasSubstr("group world"), HasSubstr("= 40")));
  }
}

// A ring around each pipeline: every stage sends to the next and to the previous stage with two
// tags and different lengths; the receives are posted in the opposite order of the sends, so the
// messages are matched by tag (with PP = 2 the next and the previous stage are the same rank).
void pipeline_ring(MpiCommunicator& c, const RankLayout& layout, int64_t rank,
                   const std::string& at) {
  const RankCoord me = layout.coord(rank);
  const int64_t pp = layout.size(GroupKind::kPp);
  RankCoord n = me, p = me;
  n.pp = (me.pp + 1) % pp;
  p.pp = (me.pp + pp - 1) % pp;
  const int64_t next = layout.rank(n), prev = layout.rank(p);
  constexpr int64_t kForwardTag = 10, kBackwardTag = 20;
  const std::vector<float> forward = {static_cast<float>(rank), 1.0f};
  const std::vector<float> backward = {static_cast<float>(rank), 2.0f, static_cast<float>(me.pp)};
  std::vector<float> from_prev(2, -1.0f), from_next(3, -1.0f);
  RequestPtr r_back = c.recv(next, kBackwardTag, from_next);
  RequestPtr r_fwd = c.recv(prev, kForwardTag, from_prev);
  RequestPtr s_fwd = c.send(next, kForwardTag, forward);
  RequestPtr s_back = c.send(prev, kBackwardTag, backward);
  r_fwd->wait();
  s_back->wait();
  r_back->wait();
  s_fwd->wait();
  EXPECT_THAT(from_prev, ElementsAre(static_cast<float>(prev), 1.0f)) << at;
  EXPECT_THAT(from_next, ElementsAre(static_cast<float>(next), 2.0f, static_cast<float>(n.pp)))
      << at;
}

TEST_F(MpiCommunicatorEightRanks, SendRecvAroundThePipelineMatchesByTag) {
  MpiCommunicator c(layout_);
  pipeline_ring(c, layout_, rank_, at());
  // PP = 4 (TP = 2): next and previous stages differ; rank = tp + 2 pp.
  const RankLayout deep(2, 1, 1, 4);
  MpiCommunicator c4(deep);
  pipeline_ring(c4, deep, rank_, at());
}

TEST_F(MpiCommunicatorEightRanks, PeersAndTagsOutsideTheirRangeAreRefused) {
  MpiCommunicator c(layout_);
  std::vector<float> buf(1);
  for (int64_t tag : {int64_t{-1}, c.max_tag() + 1, int64_t{1} << 40}) {
    try {
      c.send((rank_ + 1) % 8, tag, buf);
      FAIL() << "tag " << tag << " accepted " << at();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("tag " + std::to_string(tag)),
                                  HasSubstr("MPI_TAG_UB = " + std::to_string(c.max_tag()))));
    }
    EXPECT_THROW(c.recv((rank_ + 1) % 8, tag, buf), InvalidArgument);
  }
  for (int64_t peer : {-1, 8}) {
    try {
      c.recv(peer, 0, buf);
      FAIL() << "peer " << peer << " accepted " << at();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(),
                  AllOf(HasSubstr("peer rank " + std::to_string(peer)), HasSubstr("[0, 8)")));
    }
  }
}

TEST_F(MpiCommunicatorEightRanks, ARecvOfTheWrongLengthIsACommError) {
  MpiCommunicator c(layout_);
  // Pairs (even, odd) = the tp groups. Longer message than the buffer: MPI_ERR_TRUNCATE.
  const bool even = rank_ % 2 == 0;
  const int64_t peer = even ? rank_ + 1 : rank_ - 1;
  const std::vector<float> four = {1, 2, 3, 4};
  if (even) {
    c.send(peer, 5, four)->wait();
  } else {
    std::vector<float> two(2);
    RequestPtr r = c.recv(peer, 5, two);
    try {
      r->wait();
      ADD_FAILURE() << "a 4-float message into a 2-float buffer was accepted " << at();
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(),
                  AllOf(HasSubstr("MPI_Irecv"), HasSubstr("tag 5"), HasSubstr("TRUNCATE")));
    }
  }
  // Shorter message than the buffer: the transfer's lengths differ.
  if (even) {
    c.send(peer, 6, std::span<const float>(four).first(2))->wait();
  } else {
    std::vector<float> buf(4);
    RequestPtr r = c.recv(peer, 6, buf);
    try {
      r->wait();
      ADD_FAILURE() << "a 2-float message into a 4-float buffer was accepted " << at();
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(),
                  AllOf(HasSubstr("received 2 floats into a buffer of 4"), HasSubstr("tag 6")));
    }
    r->wait();  // idempotent after a failure: the request is done
  }
}

// Issue 14 defect 10: Megatron's --distributed-timeout-minutes. The even rank of each TP pair
// starts a TP all-reduce its partner never joins and gives up after the timeout, naming the
// operation, the group and the partner: first alive (it answers from its own wait, at
// collective 0 of the group), then stopped (SIGSTOP: no answer).
TEST_F(MpiCommunicatorEightRanks, DistributedTimeoutNamesTheOpGroupAndMissingRanks) {
  const bool even = rank_ % 2 == 0;
  const int64_t peer = even ? rank_ + 1 : rank_ - 1;
  int64_t pids[8] = {};
  const int64_t pid = getpid();
  MPI_Allgather(&pid, 1, MPI_INT64_T, pids, 1, MPI_INT64_T, MPI_COMM_WORLD);
  for (const bool stopped : {false, true}) {
    SCOPED_TRACE(stopped ? "partner stopped" : "partner alive");
    // One communicator per rank and round (its construction is collective over the world).
    if (even) {
      MpiCommunicator c(layout_, MPI_COMM_WORLD, 0.02);  // 1.2 s
      std::vector<float> x = {1, 2};
      RequestPtr r = c.all_reduce(GroupKind::kTp, x, ReduceOp::kSum);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        r->wait();
        ADD_FAILURE() << "an all-reduce without its partner completed " << at();
      } catch (const CommError& e) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_GE(s, 1.2);
        EXPECT_LT(s, 30.0);
        EXPECT_THAT(e.what(), AllOf(HasSubstr("MPI_Iallreduce"), HasSubstr("tp group"),
                                    HasSubstr("--distributed-timeout-minutes"),
                                    HasSubstr("did not arrive: " + std::to_string(peer))));
        EXPECT_THAT(e.what(), HasSubstr(stopped ? "no answer" : "alive, at collective 0"));
      }
      if (stopped) kill(static_cast<pid_t>(pids[peer]), SIGCONT);
      const std::vector<float> one = {1};
      c.send(peer, 9, one)->wait();  // point-to-point still works after the timeout
    } else {
      MpiCommunicator release(layout_);
      if (stopped) raise(SIGSTOP);  // until the even rank sends SIGCONT
      std::vector<float> buf(1);
      release.recv(peer, 9, buf)->wait();  // answers the partner's query meanwhile
    }
  }
}

TEST_F(MpiCommunicatorEightRanks, SeveralOperationsInFlightOnDifferentGroupsAtOnce) {
  MpiCommunicator c(layout_);
  const int64_t r = rank_;
  const auto f = static_cast<float>(r);
  // Started in the same order on every rank, none waited for until all are in flight.
  std::vector<float> tp_sum = {f};
  const std::vector<float> dp_in = {f};
  std::vector<float> dp_all(2);
  std::vector<double> pp_max = {static_cast<double>(r)};
  std::vector<float> world_in(8), world_piece(1);
  for (int64_t i = 0; i < 8; ++i) world_in[i] = static_cast<float>(r * i);
  std::vector<float> mp_sum = {1.0f};
  RankCoord peer = layout_.coord(r);
  peer.pp = 1 - peer.pp;
  const int64_t other_stage = layout_.rank(peer);
  const std::vector<float> out_msg = {f};
  std::vector<float> in_msg(1);

  std::vector<RequestPtr> requests;
  requests.push_back(c.all_reduce(GroupKind::kTp, tp_sum, ReduceOp::kSum));
  requests.push_back(c.recv(other_stage, 3, in_msg));
  requests.push_back(c.all_gather(GroupKind::kDp, dp_in, dp_all));
  requests.push_back(c.all_reduce(GroupKind::kPp, pp_max, ReduceOp::kMax));
  requests.push_back(c.reduce_scatter(GroupKind::kWorld, world_in, world_piece, ReduceOp::kSum));
  requests.push_back(c.send(other_stage, 3, out_msg));
  requests.push_back(c.all_reduce(GroupKind::kModelParallel, mp_sum, ReduceOp::kSum));
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) (*it)->wait();

  const int64_t tp0 = r - r % 2, dp0 = r - (r & 2);
  EXPECT_EQ(tp_sum[0], static_cast<float>(2 * tp0 + 1)) << at();
  EXPECT_EQ(dp_all, as_floats({dp0, dp0 + 2})) << at();
  EXPECT_EQ(pp_max[0], static_cast<double>(r % 4 + 4)) << at();
  // World piece r: sum over ranks m of m * r = 28 r.
  EXPECT_EQ(world_piece[0], static_cast<float>(28 * r)) << at();
  EXPECT_EQ(mp_sum[0], 4.0f) << at();
  EXPECT_EQ(in_msg[0], static_cast<float>(other_stage)) << at();
}

TEST_F(MpiCommunicatorEightRanks, DestroyingARequestWaitsAndWaitIsIdempotent) {
  MpiCommunicator c(layout_);
  std::vector<float> data = {static_cast<float>(rank_)};
  RequestPtr r = c.all_reduce(GroupKind::kWorld, data, ReduceOp::kSum);
  r.reset();  // waits
  EXPECT_EQ(data[0], 28.0f) << at();
  std::vector<float> again = {1.0f};
  r = c.all_reduce(GroupKind::kWorld, again, ReduceOp::kSum);
  r->wait();
  r->wait();
  EXPECT_EQ(again[0], 8.0f) << at();
}

// Ring exchange (ring attention's K/V pass): each member receives the previous member's buffer,
// cyclically in group order; CP 4 x TP 2 (rank = tp + 2 cp), and over the 2-member TP group.
TEST_F(MpiCommunicatorEightRanks, RingExchangeReceivesFromThePreviousMember) {
  const RankLayout cp4(2, 4, 1, 1);
  MpiCommunicator c(cp4);
  const int64_t tp = rank_ % 2, cp = rank_ / 2;
  const std::vector<float> send = {static_cast<float>(rank_), static_cast<float>(10 * rank_)};
  std::vector<float> recv(2, -1.0f);
  RequestPtr r = c.ring_exchange(GroupKind::kCp, send, recv);
  r->wait();
  const int64_t previous = tp + 2 * ((cp + 3) % 4);
  EXPECT_EQ(recv, (std::vector<float>{static_cast<float>(previous),
                                      static_cast<float>(10 * previous)}))
      << at();
  c.ring_exchange(GroupKind::kTp, send, recv)->wait();
  EXPECT_EQ(recv[0], static_cast<float>(rank_ ^ 1)) << at();
  std::vector<float> wrong(3);
  EXPECT_THROW(c.ring_exchange(GroupKind::kCp, send, wrong), InvalidArgument);
}

TEST_F(MpiCommunicatorEightRanks, EmbeddingGroupIsRefusedOnMiddleStages) {
  const RankLayout deep(2, 1, 1, 4);  // TP=2, PP=4: rank = tp + 2 pp
  MpiCommunicator c(deep);
  const int64_t stage = rank_ / 2;
  std::vector<float> data = {static_cast<float>(rank_)};
  if (stage == 1 || stage == 2) {
    try {
      c.all_reduce(GroupKind::kEmbedding, data, ReduceOp::kSum);
      FAIL() << "embedding all_reduce on middle stage " << stage << " accepted " << at();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(),
                  AllOf(HasSubstr("all_reduce on group embd"),
                        HasSubstr("rank " + std::to_string(rank_)), HasSubstr("not a member")));
    }
    std::vector<double> d(1);
    EXPECT_THROW(c.all_reduce(GroupKind::kEmbedding, d, ReduceOp::kMax), InvalidArgument);
    std::vector<float> out(2);
    EXPECT_THROW(c.all_gather(GroupKind::kEmbedding, data, out), InvalidArgument);
    EXPECT_THROW(c.reduce_scatter(GroupKind::kEmbedding, out, data, ReduceOp::kSum),
                 InvalidArgument);
  } else {
    // First stage {0, 1} pairs with last stage {6, 7}: embedding groups {0, 6} and {1, 7}.
    const int64_t first = rank_ % 2, last = first + 6;
    c.all_reduce(GroupKind::kEmbedding, data, ReduceOp::kSum)->wait();
    EXPECT_EQ(data[0], static_cast<float>(first + last)) << at();
    const std::vector<float> in = {static_cast<float>(rank_)};
    std::vector<float> out(2);
    c.all_gather(GroupKind::kEmbedding, in, out)->wait();
    EXPECT_EQ(out, as_floats({first, last})) << at();
  }
}

TEST_F(MpiCommunicatorEightRanks, LayoutWorldSizeMustEqualTheMpiWorld) {
  for (const RankLayout& wrong : {RankLayout(2, 1, 2, 1), RankLayout(2, 1, 2, 4)}) {
    try {
      MpiCommunicator c(wrong);
      FAIL() << "a layout of " << wrong.world_size() << " ranks accepted in a world of 8 " << at();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("world size is " + std::to_string(wrong.world_size())),
                                  HasSubstr("MPI world has 8 processes")));
    }
  }
}

// --- the driver -------------------------------------------------------------------------------

TEST(MpiRun, CommunicatorTestsPassOnEightRanks) {
  if (mpi_child()) GTEST_SKIP() << "already a child";
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "mpirun not found: the MpiCommunicator tests need Open MPI's mpirun";
  }
  traintwin::testing::expect_suite_passes_on_ranks("TRAINTWIN_MPI_CHILD", "MpiCommunicator", 8);
}

}  // namespace
}  // namespace traintwin::exec
