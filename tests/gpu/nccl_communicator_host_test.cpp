// The NCCL communicator's host side, which needs no device: the argument checks it runs before
// any CUDA or NCCL call (nccl_checks::), the CommError text built from ncclGetErrorString and
// ncclGetLastError, and the constructor refusing to start without MPI before touching CUDA.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/rank_layout.hpp"
#include "exec/cuda/nccl_communicator.hpp"

namespace traintwin::exec::cuda {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(NcclChecksHost, AllGatherOutputMustBeGroupSizeTimesInput) {
  // Group of 4, input 3: output must be 12.
  EXPECT_NO_THROW(
      nccl_checks::check_pieces("all_gather", GroupKind::kDp, 4, "output", 12, "input", 3));
  for (size_t whole : {size_t{0}, size_t{3}, size_t{11}, size_t{13}}) {
    try {
      nccl_checks::check_pieces("all_gather", GroupKind::kDp, 4, "output", whole, "input", 3);
      FAIL() << "output " << whole << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()), "NCCL communicator: all_gather on group dp: output has " +
                                           std::to_string(whole) +
                                           " elements, expected group size 4 x input 3 = 12");
    }
  }
  // Zero-length pieces: 0 = 4 x 0.
  EXPECT_NO_THROW(
      nccl_checks::check_pieces("all_gather", GroupKind::kTp, 4, "output", 0, "input", 0));
}

TEST(NcclChecksHost, ReduceScatterInputMustBeGroupSizeTimesOutput) {
  EXPECT_NO_THROW(
      nccl_checks::check_pieces("reduce_scatter", GroupKind::kWorld, 8, "input", 16, "output", 2));
  try {
    nccl_checks::check_pieces("reduce_scatter", GroupKind::kWorld, 8, "input", 15, "output", 2);
    FAIL() << "input 15 accepted for 8 members x 2";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "NCCL communicator: reduce_scatter on group world: input has 15 elements, "
              "expected group size 8 x output 2 = 16");
  }
  // A group of one: the two buffers have the same length.
  EXPECT_NO_THROW(
      nccl_checks::check_pieces("reduce_scatter", GroupKind::kTp, 1, "input", 5, "output", 5));
  EXPECT_THROW(
      nccl_checks::check_pieces("reduce_scatter", GroupKind::kTp, 1, "input", 5, "output", 4),
      InvalidArgument);
}

TEST(NcclChecksHost, PeersOutsideTheWorldSelfAndNegativeTagsAreRefused) {
  EXPECT_NO_THROW(nccl_checks::check_peer("send", 2, 8, 3, 0));
  EXPECT_NO_THROW(nccl_checks::check_peer("recv", 2, 8, 0, int64_t{1} << 40));  // no tag bound
  EXPECT_NO_THROW(nccl_checks::check_peer("recv", 2, 8, 7, 5));
  for (int64_t peer : {int64_t{-1}, int64_t{8}, int64_t{100}}) {
    try {
      nccl_checks::check_peer("send", 2, 8, peer, 0);
      FAIL() << "peer " << peer << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()), "NCCL communicator: send: peer rank " +
                                           std::to_string(peer) + " is outside the world [0, 8)");
    }
  }
  try {
    nccl_checks::check_peer("recv", 2, 8, 2, 0);
    FAIL() << "a recv from self accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("recv: peer rank 2 is this rank"),
                                HasSubstr("transfers to self are not supported")));
  }
  // A world of one has no peer at all.
  EXPECT_THROW(nccl_checks::check_peer("send", 0, 1, 0, 0), InvalidArgument);
  try {
    nccl_checks::check_peer("send", 2, 8, 3, -1);
    FAIL() << "tag -1 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("send with rank 3"), HasSubstr("tag -1 is negative")));
  }
}

TEST(NcclChecksHost, NullBufferOnlyWithZeroLength) {
  EXPECT_NO_THROW(nccl_checks::check_not_null("all_reduce", GroupKind::kTp, nullptr, 0));
  float x = 0;
  EXPECT_NO_THROW(nccl_checks::check_not_null("all_reduce", GroupKind::kTp, &x, 1));
  try {
    nccl_checks::check_not_null("all_gather", GroupKind::kPp, nullptr, 7);
    FAIL() << "a null buffer of 7 elements accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "NCCL communicator: all_gather on group pp: null buffer of 7 elements");
  }
}

TEST(NcclErrorTextHost, NamesTheOperationNcclsStringAndTheLastError) {
  const std::string what = "ncclAllReduce(sum, float, 4 elements) on group tp";
  for (ncclResult_t code : {ncclUnhandledCudaError, ncclSystemError, ncclInternalError,
                            ncclInvalidArgument, ncclInvalidUsage, ncclRemoteError}) {
    const std::string nccl_text = ncclGetErrorString(code);
    ASSERT_FALSE(nccl_text.empty()) << code;
    EXPECT_EQ(
        nccl_checks::error_text(what, code, "peer 3 closed the connection"),
        "NCCL communicator: " + what + " failed: " + nccl_text + " (peer 3 closed the connection)");
    // Without a last error, no empty parentheses.
    EXPECT_EQ(nccl_checks::error_text(what, code, ""),
              "NCCL communicator: " + what + " failed: " + nccl_text);
  }
  // The codes' strings differ (the message tells them apart).
  EXPECT_NE(std::string(ncclGetErrorString(ncclInvalidUsage)),
            std::string(ncclGetErrorString(ncclSystemError)));
  EXPECT_THAT(nccl_checks::error_text(what, ncclInvalidUsage, ""), Not(HasSubstr("()")));
}

TEST(NcclCommunicatorHost, RefusesToStartWithoutMpiBeforeTouchingCuda) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) GTEST_SKIP() << "MPI is initialized in this process";
  // No device is needed: the MPI check comes first (a CUDA error would be a CudaError).
  try {
    NcclCommunicator c(RankLayout(1, 1, 1, 1));
    FAIL() << "constructed without MPI";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("MPI is not initialized"),
                                HasSubstr("create an MpiEnvironment first")));
  }
}

}  // namespace
}  // namespace traintwin::exec::cuda
