// NcclCommunicator on devices. NcclCommunicatorWorldOfOne: a world of one rank (RankLayout
// 1,1,1,1, MPI started as a singleton): every collective over device buffers equals its input,
// argument errors, stream ordering against a compute stream. NcclCommunicatorRanks: the
// MpiCommunicator checks of tests/exec/communicator_test.cpp on N ranks, one device each; they
// do their work only in a process started by mpirun with TRAINTWIN_NCCL_CHILD=1 (otherwise they
// skip); NcclMpiRun.CommunicatorTestsPassOnEveryDevice starts this executable under
// `mpirun -np N` (N = visible devices, at most 8; skipped below 2 devices or without mpirun) and
// checks that every rank passed. Expected values are worked from the group members
// (layout.group), as in the MPI tests; results must be exact (sums of small integers).
#include "exec/cuda/nccl_communicator.hpp"

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rank_layout.hpp"
#include "exec/cuda/cuda_check.hpp"
#include "tests/all_to_all_v_case.hpp"
#include "exec/mpi_communicator.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/mpi_child_run.hpp"

namespace traintwin::exec::cuda {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr std::array<GroupKind, 8> kAllKinds = {GroupKind::kTp,
                                                GroupKind::kCp,
                                                GroupKind::kDp,
                                                GroupKind::kPp,
                                                GroupKind::kDpCp,
                                                GroupKind::kEmbedding,
                                                GroupKind::kModelParallel,
                                                GroupKind::kWorld};

bool nccl_child() {
  const char* v = std::getenv("TRAINTWIN_NCCL_CHILD");
  return v != nullptr && std::string(v) == "1";
}

// MPI for the whole process: started before the first test in an mpirun child, lazily (as a
// singleton) by the first world-of-one test otherwise; finalized after the last test.
std::unique_ptr<MpiEnvironment>& mpi_env() {
  static std::unique_ptr<MpiEnvironment> env;
  return env;
}
void ensure_mpi() {
  if (!mpi_env()) mpi_env() = std::make_unique<MpiEnvironment>();
}
class NcclMpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (nccl_child()) ensure_mpi();
  }
  void TearDown() override { mpi_env().reset(); }
};
[[maybe_unused]] ::testing::Environment* const kNcclMpiEnvironment =
    ::testing::AddGlobalTestEnvironment(new NcclMpiEnvironment);

/// A device array of T (freed on destruction); upload/download through the compute stream
/// `s` (0: the legacy default stream), download synchronizing it.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    TRAINTWIN_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(n, 1) * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& v, cudaStream_t s = nullptr) : DeviceArray(v.size()) {
    upload(v, s);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr_); }

  void upload(const std::vector<T>& v, cudaStream_t s = nullptr) {
    ASSERT_EQ(v.size(), n_);
    TRAINTWIN_CUDA_CHECK(
        cudaMemcpyAsync(ptr_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, s));
    TRAINTWIN_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  std::vector<T> download(cudaStream_t s = nullptr) const {
    std::vector<T> v(n_);
    TRAINTWIN_CUDA_CHECK(
        cudaMemcpyAsync(v.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost, s));
    TRAINTWIN_CUDA_CHECK(cudaStreamSynchronize(s));
    return v;
  }
  std::span<T> span() { return {ptr_, n_}; }
  std::span<const T> cspan() const { return {ptr_, n_}; }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

std::vector<float> as_floats(const std::vector<int64_t>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// --- a world of one ---------------------------------------------------------------------------

class NcclCommunicatorWorldOfOne : public ::testing::Test {
 protected:
  void SetUp() override {
    if (nccl_child()) GTEST_SKIP() << "runs outside mpirun (a world of one)";
    TRAINTWIN_REQUIRE_GPU();
    ensure_mpi();
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 1) GTEST_SKIP() << "needs a world of one process (MPI world has " << size << ")";
  }
  const RankLayout layout_{1, 1, 1, 1};
};

TEST_F(NcclCommunicatorWorldOfOne, RankWorldDeviceAndOneStreamPerGroup) {
  NcclCommunicator c(layout_);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.world_size(), 1);
  EXPECT_EQ(c.layout().world_size(), 1);
  EXPECT_EQ(c.device(), 0);  // local rank 0 mod device count
  std::vector<cudaStream_t> streams;
  for (GroupKind kind : kAllKinds) {
    ASSERT_NE(c.stream(kind), nullptr) << to_string(kind);
    streams.push_back(c.stream(kind));
  }
  std::sort(streams.begin(), streams.end());
  EXPECT_EQ(std::unique(streams.begin(), streams.end()), streams.end()) << "streams are shared";
  EXPECT_EQ(c.compute_stream(), nullptr);
  cudaStream_t s = nullptr;
  TRAINTWIN_CUDA_CHECK(cudaStreamCreate(&s));
  c.set_compute_stream(s);
  EXPECT_EQ(c.compute_stream(), s);
  c.set_compute_stream(nullptr);
  TRAINTWIN_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_F(NcclCommunicatorWorldOfOne, AllReduceSumAndMaxLeaveTheDataUnchanged) {
  NcclCommunicator c(layout_);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  for (GroupKind kind : kAllKinds) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      const std::vector<double> d = testing::random_vec(gen, 1000);
      const std::vector<float> f(d.begin(), d.end());
      DeviceArray<float> fd(f);
      DeviceArray<double> dd(d);
      c.all_reduce(kind, fd.span(), op)->wait();
      c.all_reduce(kind, dd.span(), op)->wait();
      EXPECT_EQ(fd.download(), f) << to_string(kind);
      EXPECT_EQ(dd.download(), d) << to_string(kind);
    }
  }
  c.synchronize();
}

TEST_F(NcclCommunicatorWorldOfOne, AllGatherAndReduceScatterCopyTheInput) {
  NcclCommunicator c(layout_);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  for (GroupKind kind : kAllKinds) {
    const std::vector<double> d = testing::random_vec(gen, 777);
    const std::vector<float> in(d.begin(), d.end());
    const std::vector<float> nan(in.size(), std::numeric_limits<float>::quiet_NaN());
    DeviceArray<float> input(in), output(nan);
    c.all_gather(kind, input.cspan(), output.span())->wait();
    EXPECT_EQ(output.download(), in) << "all_gather " << to_string(kind);
    output.upload(nan);
    c.reduce_scatter(kind, input.cspan(), output.span(), ReduceOp::kSum)->wait();
    EXPECT_EQ(output.download(), in) << "reduce_scatter " << to_string(kind);
    EXPECT_EQ(input.download(), in) << "the input is not modified";
  }
}

TEST_F(NcclCommunicatorWorldOfOne, AllToAllVCopiesItsOwnPiece) {
  NcclCommunicator c(layout_);
  const std::vector<float> in = {1, 2, 3, 4, 5};
  DeviceArray<float> src(in), dst(in.size());
  const std::vector<int64_t> five = {5};
  c.all_to_all_v(GroupKind::kWorld, src.cspan(), five, dst.span(), five)->wait();
  EXPECT_EQ(dst.download(), in);
  EXPECT_THROW(c.all_to_all_v(GroupKind::kWorld, src.cspan(), std::vector<int64_t>{4},
                              dst.span(), five),
               InvalidArgument);
  c.synchronize();
}

TEST_F(NcclCommunicatorWorldOfOne, OperationsFollowTheComputeStreamAndWaitOrdersIt) {
  // 32 Mi floats: the copies take long enough that a missing order would show stale data.
  NcclCommunicator c(layout_);
  cudaStream_t compute = nullptr;
  TRAINTWIN_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  c.set_compute_stream(compute);
  const size_t n = size_t{1} << 25;
  DeviceArray<float> input(n), output(n);
  for (int round = 1; round <= 3; ++round) {
    // Fill on the compute stream (bytes 0x3f80 0000 = 1.0f only for round 1; use memset byte).
    const auto byte = static_cast<unsigned char>(0x10 * round);
    TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(input.span().data(), byte, n * sizeof(float), compute));
    TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(output.span().data(), 0xff, n * sizeof(float), compute));
    RequestPtr r = c.all_gather(GroupKind::kWorld, input.cspan(), output.span());
    r->wait();
    r->wait();  // idempotent
    const std::vector<float> out = output.download(compute);
    float expected = 0;
    const std::array<unsigned char, 4> bytes = {byte, byte, byte, byte};
    std::memcpy(&expected, bytes.data(), 4);
    EXPECT_EQ(std::count(out.begin(), out.end(), expected), static_cast<std::ptrdiff_t>(n))
        << "round " << round;
  }
  c.synchronize();
  c.set_compute_stream(nullptr);
  TRAINTWIN_CUDA_CHECK(cudaStreamDestroy(compute));
}

TEST_F(NcclCommunicatorWorldOfOne, DestroyingARequestOrdersTheComputeStreamToo) {
  NcclCommunicator c(layout_);
  const std::vector<float> in = {1.5f, -2.0f, 3.25f};
  DeviceArray<float> input(in), output(3);
  RequestPtr r = c.reduce_scatter(GroupKind::kTp, input.cspan(), output.span(), ReduceOp::kMax);
  r.reset();
  EXPECT_EQ(output.download(), in);
}

TEST_F(NcclCommunicatorWorldOfOne, BufferLengthsHostPointersAndNullsAreRefused) {
  NcclCommunicator c(layout_);
  DeviceArray<float> three(3), five(5);
  try {
    c.all_gather(GroupKind::kDp, three.cspan(), five.span());
    FAIL() << "all_gather 3 -> 5 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("all_gather on group dp: output has 5 elements, expected "
                                    "group size 1 x input 3 = 3"));
  }
  try {
    c.reduce_scatter(GroupKind::kWorld, five.cspan(), three.span(), ReduceOp::kSum);
    FAIL() << "reduce_scatter 5 -> 3 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("reduce_scatter on group world: input has 5 elements, "
                                    "expected group size 1 x output 3 = 3"));
  }
  std::vector<float> host(4, 1.0f);
  try {
    c.all_reduce(GroupKind::kTp, std::span<float>(host), ReduceOp::kSum);
    FAIL() << "a host buffer accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("all_reduce on group tp"), HasSubstr("host memory")));
  }
  EXPECT_THAT(host, ElementsAreArray(std::vector<float>(4, 1.0f)));
  EXPECT_THROW(c.all_gather(GroupKind::kTp, std::span<const float>(host), five.span().first(4)),
               InvalidArgument);
  EXPECT_THROW(c.all_reduce(GroupKind::kTp, std::span<float>(static_cast<float*>(nullptr), 2),
                            ReduceOp::kSum),
               InvalidArgument);
  // Zero elements: nothing to do, but a valid Request.
  c.all_reduce(GroupKind::kTp, std::span<float>(), ReduceOp::kSum)->wait();
  c.all_gather(GroupKind::kTp, std::span<const float>(), std::span<float>())->wait();
  c.synchronize();
}

TEST_F(NcclCommunicatorWorldOfOne, SendAndRecvToSelfAreRefused) {
  NcclCommunicator c(layout_);
  DeviceArray<float> buf(4);
  try {
    c.send(0, 0, buf.cspan());
    FAIL() << "send to self accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("peer rank 0 is this rank"));
  }
  EXPECT_THROW(c.recv(0, 0, buf.span()), InvalidArgument);
  try {
    c.recv(1, 0, buf.span());
    FAIL() << "recv from rank 1 of a world of one accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("peer rank 1 is outside the world [0, 1)"));
  }
  const std::array<P2pTransfer, 2> self = {P2pTransfer::send(0, 1, buf.cspan()),
                                           P2pTransfer::recv(0, 1, buf.span())};
  EXPECT_THROW(c.send_recv_batch(self), InvalidArgument);
  c.send_recv_batch({})->wait();  // an empty batch: complete
}

TEST_F(NcclCommunicatorWorldOfOne, LayoutAndDeviceMustFitTheWorld) {
  try {
    NcclCommunicator c(RankLayout(2, 1, 1, 1));
    FAIL() << "a layout of 2 ranks accepted in a world of 1";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("world size is 2"), HasSubstr("MPI world has 1 processes")));
  }
  int count = 0;
  TRAINTWIN_CUDA_CHECK(cudaGetDeviceCount(&count));
  try {
    NcclCommunicator c(layout_, MPI_COMM_WORLD, count);
    FAIL() << "device " << count << " accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("device " + std::to_string(count) + " is outside [0, " +
                                    std::to_string(count) + ")"));
  }
  NcclCommunicator last(layout_, MPI_COMM_WORLD, count - 1);
  EXPECT_EQ(last.device(), count - 1);
}

// --- N ranks under mpirun ---------------------------------------------------------------------

/// The layout of the N-rank tests: TP = 2 when 4 | N, PP = 2 for even N (PP = N for odd N, so
/// that send/recv and middle stages are exercised), DP the rest. N = 8: TP=2, DP=2, PP=2.
RankLayout layout_for(int64_t n) {
  if (n % 2 != 0) return RankLayout(1, 1, 1, n);
  const int64_t tp = n % 4 == 0 ? 2 : 1;
  return RankLayout(tp, 1, n / (2 * tp), 2);
}

// Every test runs on all ranks in the same order and checks only local results.
class NcclCommunicatorRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!nccl_child()) {
      GTEST_SKIP() << "runs under mpirun: NcclMpiRun.CommunicatorTestsPassOnEveryDevice starts "
                      "it with TRAINTWIN_NCCL_CHILD=1";
    }
    int size = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ASSERT_GE(size, 2);
    n_ = size;
    rank_ = rank;
    layout_ = std::make_unique<RankLayout>(layout_for(n_));
  }
  std::string at() const { return "on rank " + std::to_string(rank_); }

  int64_t n_ = 0, rank_ = 0;
  std::unique_ptr<RankLayout> layout_;
};

TEST_F(NcclCommunicatorRanks, RankWorldAndDeviceFollowMpi) {
  NcclCommunicator c(*layout_);
  EXPECT_EQ(c.rank(), rank_);
  EXPECT_EQ(c.world_size(), n_);
  int count = 0;
  TRAINTWIN_CUDA_CHECK(cudaGetDeviceCount(&count));
  EXPECT_EQ(c.device(), rank_ % count) << at();  // one node: local rank = rank
}

TEST_F(NcclCommunicatorRanks, AllReduceSumAndMaxOverEachGroup) {
  NcclCommunicator c(*layout_);
  const int64_t r = rank_;
  for (GroupKind kind : kAllKinds) {
    const std::vector<int64_t> members = layout_->group(kind, r);
    if (std::find(members.begin(), members.end(), r) == members.end()) continue;
    const int64_t sum = std::accumulate(members.begin(), members.end(), int64_t{0});
    const auto m = static_cast<int64_t>(members.size());
    DeviceArray<float> data(
        std::vector<float>{static_cast<float>(r), static_cast<float>(10 * r + 1)});
    c.all_reduce(kind, data.span(), ReduceOp::kSum)->wait();
    EXPECT_EQ(data.download(), as_floats({sum, 10 * sum + m})) << to_string(kind) << " " << at();
    data.upload({static_cast<float>(r), static_cast<float>(-r)});
    c.all_reduce(kind, data.span(), ReduceOp::kMax)->wait();
    const int64_t hi = *std::max_element(members.begin(), members.end());
    const int64_t lo = *std::min_element(members.begin(), members.end());
    EXPECT_EQ(data.download(), as_floats({hi, -lo})) << to_string(kind) << " " << at();
  }
  // By hand: the world's sum is N(N-1)/2, its max N-1.
  DeviceArray<float> world(std::vector<float>{static_cast<float>(r)});
  c.all_reduce(GroupKind::kWorld, world.span(), ReduceOp::kSum)->wait();
  EXPECT_EQ(world.download()[0], static_cast<float>(n_ * (n_ - 1) / 2)) << at();
}

TEST_F(NcclCommunicatorRanks, AllReduceInDoubleKeepsDoublePrecision) {
  NcclCommunicator c(*layout_);
  const double eps = std::ldexp(1.0, -40);  // below float's resolution at 1 (2^-23)
  DeviceArray<double> data(
      std::vector<double>{1.0 + static_cast<double>(rank_) * eps, -static_cast<double>(rank_)});
  c.all_reduce(GroupKind::kWorld, data.span(), ReduceOp::kSum)->wait();
  const auto tri = static_cast<double>(n_ * (n_ - 1) / 2);
  // N + tri eps: exact in double for N <= 8 (every partial sum too), lost in float.
  const std::vector<double> out = data.download();
  EXPECT_EQ(out[0], static_cast<double>(n_) + tri * eps) << at();
  EXPECT_NE(static_cast<double>(static_cast<float>(out[0])), out[0]);
  EXPECT_EQ(out[1], -tri) << at();
}

TEST_F(NcclCommunicatorRanks, AllGatherConcatenatesInGroupOrder) {
  NcclCommunicator c(*layout_);
  const int64_t r = rank_;
  for (GroupKind kind : kAllKinds) {
    const std::vector<int64_t> members = layout_->group(kind, r);
    if (std::find(members.begin(), members.end(), r) == members.end()) continue;
    DeviceArray<float> in(std::vector<float>{static_cast<float>(r), static_cast<float>(100 + r)});
    DeviceArray<float> out(2 * members.size());
    c.all_gather(kind, in.cspan(), out.span())->wait();
    std::vector<int64_t> expected;
    for (int64_t m : members) {
      expected.push_back(m);
      expected.push_back(100 + m);
    }
    EXPECT_EQ(out.download(), as_floats(expected)) << to_string(kind) << " " << at();
  }
}

TEST_F(NcclCommunicatorRanks, ReduceScatterGivesEachMemberItsReducedPiece) {
  NcclCommunicator c(*layout_);
  const int64_t r = rank_;
  for (GroupKind kind : kAllKinds) {
    const std::vector<int64_t> members = layout_->group(kind, r);
    const auto it = std::find(members.begin(), members.end(), r);
    if (it == members.end()) continue;
    const auto m = static_cast<int64_t>(members.size());
    const int64_t p = it - members.begin();
    // Piece i, element j of rank r: r (i + 1) + j. Sum over members of piece p: (p + 1) S + m j.
    std::vector<float> in;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < 3; ++j) in.push_back(static_cast<float>(r * (i + 1) + j));
    }
    DeviceArray<float> input(in), output(3);
    c.reduce_scatter(kind, input.cspan(), output.span(), ReduceOp::kSum)->wait();
    const int64_t s = std::accumulate(members.begin(), members.end(), int64_t{0});
    EXPECT_EQ(output.download(), as_floats({(p + 1) * s, (p + 1) * s + m, (p + 1) * s + 2 * m}))
        << to_string(kind) << " " << at();
    c.reduce_scatter(kind, input.cspan(), output.span(), ReduceOp::kMax)->wait();
    const int64_t hi = *std::max_element(members.begin(), members.end());
    EXPECT_EQ(output.download(), as_floats({hi * (p + 1), hi * (p + 1) + 1, hi * (p + 1) + 2}))
        << to_string(kind) << " " << at();
  }
}

TEST_F(NcclCommunicatorRanks, BatchedSendRecvAroundThePipeline) {
  NcclCommunicator c(*layout_);
  // To the next stage and from the previous one (a ring over the pp group), in one batch.
  RankCoord next_c = layout_->coord(rank_), prev_c = next_c;
  const int64_t pp = layout_->size(GroupKind::kPp);
  next_c.pp = (next_c.pp + 1) % pp;
  prev_c.pp = (prev_c.pp + pp - 1) % pp;
  const int64_t next = layout_->rank(next_c), prev = layout_->rank(prev_c);
  DeviceArray<float> out(std::vector<float>{static_cast<float>(rank_), 1.0f, -2.0f});
  DeviceArray<float> in(3);
  const std::array<P2pTransfer, 2> batch = {P2pTransfer::send(next, 7, out.cspan()),
                                            P2pTransfer::recv(prev, 7, in.span())};
  c.send_recv_batch(batch)->wait();
  EXPECT_EQ(in.download(), (std::vector<float>{static_cast<float>(prev), 1.0f, -2.0f})) << at();
}

TEST_F(NcclCommunicatorRanks, SingleSendAndRecvPairUpInIssueOrder) {
  NcclCommunicator c(*layout_);
  // Pairs (0,1), (2,3), ...; an odd last rank sits out. The lower rank sends first, the higher
  // receives first (single calls on one stream run in order: both sending first would hang).
  const int64_t partner = rank_ ^ 1;
  if (partner >= n_) return;
  const bool low = rank_ < partner;
  DeviceArray<float> a(std::vector<float>{static_cast<float>(rank_), 10.0f});
  DeviceArray<float> b(std::vector<float>{static_cast<float>(rank_), 20.0f, 30.0f});
  DeviceArray<float> got_a(2), got_b(3);
  std::vector<RequestPtr> rs;
  if (low) {
    rs.push_back(c.send(partner, 1, a.cspan()));
    rs.push_back(c.send(partner, 2, b.cspan()));
    rs.push_back(c.recv(partner, 3, got_a.span()));
  } else {
    rs.push_back(c.recv(partner, 1, got_a.span()));
    rs.push_back(c.recv(partner, 2, got_b.span()));
    rs.push_back(c.send(partner, 3, a.cspan()));
  }
  for (RequestPtr& r : rs) r->wait();
  const auto p = static_cast<float>(partner);
  EXPECT_EQ(got_a.download(), (std::vector<float>{p, 10.0f})) << at();
  if (!low) {
    EXPECT_EQ(got_b.download(), (std::vector<float>{p, 20.0f, 30.0f})) << at();
  }
}

TEST_F(NcclCommunicatorRanks, SeveralOperationsInFlightOnDifferentGroupsAtOnce) {
  NcclCommunicator c(*layout_);
  const int64_t r = rank_;
  const auto f = static_cast<float>(r);
  const std::vector<int64_t> tp = layout_->group(GroupKind::kTp, r);
  const std::vector<int64_t> dp = layout_->group(GroupKind::kDp, r);
  const std::vector<int64_t> mp = layout_->group(GroupKind::kModelParallel, r);
  DeviceArray<float> tp_sum(std::vector<float>{f});
  DeviceArray<float> dp_in(std::vector<float>{f}), dp_all(dp.size());
  DeviceArray<double> pp_max(std::vector<double>{static_cast<double>(r)});
  std::vector<float> world_host(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) world_host[i] = static_cast<float>(r * i);
  DeviceArray<float> world_in(world_host), world_piece(1);
  DeviceArray<float> mp_sum(std::vector<float>{1.0f});
  std::vector<RequestPtr> requests;
  requests.push_back(c.all_reduce(GroupKind::kTp, tp_sum.span(), ReduceOp::kSum));
  requests.push_back(c.all_gather(GroupKind::kDp, dp_in.cspan(), dp_all.span()));
  requests.push_back(c.all_reduce(GroupKind::kPp, pp_max.span(), ReduceOp::kMax));
  requests.push_back(
      c.reduce_scatter(GroupKind::kWorld, world_in.cspan(), world_piece.span(), ReduceOp::kSum));
  requests.push_back(c.all_reduce(GroupKind::kModelParallel, mp_sum.span(), ReduceOp::kSum));
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) (*it)->wait();
  c.synchronize();
  EXPECT_EQ(tp_sum.download()[0],
            static_cast<float>(std::accumulate(tp.begin(), tp.end(), int64_t{0})))
      << at();
  EXPECT_EQ(dp_all.download(), as_floats(dp)) << at();
  const std::vector<int64_t> pp = layout_->group(GroupKind::kPp, r);
  EXPECT_EQ(pp_max.download()[0], static_cast<double>(*std::max_element(pp.begin(), pp.end())));
  // World piece r: sum over ranks m of m r = r N(N-1)/2.
  EXPECT_EQ(world_piece.download()[0], static_cast<float>(r * n_ * (n_ - 1) / 2)) << at();
  EXPECT_EQ(mp_sum.download()[0], static_cast<float>(mp.size())) << at();
}

// As the MPI test: member p sends member q (p + 2 q) % 3 values 1000 r + 10 q + i, zero-length
// pieces included, over the world and the TP group.
TEST_F(NcclCommunicatorRanks, AllToAllVDeliversVariablePiecesInMemberOrder) {
  NcclCommunicator c(*layout_);
  const int64_t r = rank_;
  for (GroupKind kind : {GroupKind::kTp, GroupKind::kWorld}) {
    const auto t = traintwin::testing::all_to_all_v_case(layout_->group(kind, r), r);
    DeviceArray<float> src(t.in), dst(t.expected.size());
    c.all_to_all_v(kind, src.cspan(), t.send_counts, dst.span(), t.recv_counts)->wait();
    EXPECT_EQ(dst.download(), t.expected) << to_string(kind) << " " << at();
  }
  c.synchronize();
}

TEST_F(NcclCommunicatorRanks, EmbeddingGroupIsRefusedOnMiddleStages) {
  const RankLayout deep(1, 1, 1, n_);  // PP = N: stages 1 .. N-2 are middle stages
  NcclCommunicator c(deep);
  DeviceArray<float> data(std::vector<float>{static_cast<float>(rank_)});
  if (rank_ != 0 && rank_ != n_ - 1) {
    try {
      c.all_reduce(GroupKind::kEmbedding, data.span(), ReduceOp::kSum);
      FAIL() << "embedding all_reduce on a middle stage accepted " << at();
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(),
                  AllOf(HasSubstr("all_reduce on group embd"),
                        HasSubstr("rank " + std::to_string(rank_)), HasSubstr("not a member")));
    }
  } else {
    c.all_reduce(GroupKind::kEmbedding, data.span(), ReduceOp::kSum)->wait();
    EXPECT_EQ(data.download()[0], static_cast<float>(n_ - 1)) << at();  // 0 + (N - 1)
  }
}

TEST_F(NcclCommunicatorRanks, LayoutWorldSizeMustEqualTheMpiWorld) {
  try {
    NcclCommunicator c(RankLayout(1, 1, 1, n_ + 1));
    FAIL() << "a layout of " << n_ + 1 << " ranks accepted " << at();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("world size is " + std::to_string(n_ + 1)),
                                HasSubstr("MPI world has " + std::to_string(n_) + " processes")));
  }
}

// --- the driver -------------------------------------------------------------------------------

TEST(NcclMpiRun, CommunicatorTestsPassOnEveryDevice) {
  if (nccl_child()) GTEST_SKIP() << "already a child";
  TRAINTWIN_REQUIRE_GPU();
  int count = 0;
  TRAINTWIN_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 2) {
    GTEST_SKIP() << "1 CUDA device: the N-rank NCCL tests need >= 2 (one device per rank)";
  }
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "mpirun not found: the N-rank NCCL tests need Open MPI's mpirun";
  }
  const int ranks = std::min(count, 8);
  traintwin::testing::expect_suite_passes_on_ranks("TRAINTWIN_NCCL_CHILD", "NcclCommunicatorRanks", ranks);
}

}  // namespace
}  // namespace traintwin::exec::cuda
