// MPI backend of the Communicator (Open MPI, one process per global rank): one sub-communicator
// per GroupKind, non-blocking MPI-3 collectives (MPI_Iallreduce, MPI_Iallgather, MPI_Ialltoallv;
// reduce_scatter as MPI_Ialltoall of the pieces, reduced at wait()) and MPI_Isend / MPI_Irecv for
// point-to-point transfers.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "core/rank_layout.hpp"
#include "exec/communicator.hpp"
#include "exec/mpi_groups.hpp"
#include "exec/mpi_watchdog.hpp"

namespace traintwin::exec {

/// One Open MPI parameter MpiEnvironment sets when the environment leaves it unset.
struct MpiParameterDefault {
  const char* variable;  ///< the environment variable Open MPI reads at MPI_Init (OMPI_MCA_...)
  const char* value;
};

/// coll_libnbc_iallreduce_algorithm = 3, reduce-scatter + all-gather (Rabenseifner, "Optimization
/// of Collective Reduction Operations", ICCS 2004): each rank moves 2 (p-1)/p of the message, the
/// bandwidth-optimal structure of NCCL's ring all-reduce and of Open MPI's blocking all-reduce
/// for large messages. libnbc otherwise takes a
/// binomial reduce + broadcast whenever the group has fewer than 4 ranks or the call is in place,
/// as every all-reduce of the executor is (gradient buckets, TP partial sums): the whole message
/// crosses twice, one way at a time, after an extra copy in the call. Measured on 2 Zen 5 cores,
/// 2 ranks, the 204 MB gradient bucket of a GPT h 512 (with retain_freed_memory): 13 ms in the
/// call + 80 ms to complete, against 0 + 40 ms. Messages of fewer elements than the largest
/// power of two <= the group size keep libnbc's ring.
inline constexpr MpiParameterDefault kMpiCollectiveDefaults[] = {
    {"OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3"}};

/// Initializes MPI for the lifetime of this object (RAII). When MPI is not initialized yet, the
/// constructor calls MPI_Init_thread(MPI_THREAD_FUNNELED) and the destructor MPI_Finalize; when
/// it is (e.g. by the caller), neither happens. Only one thread (the one that created it) may make
/// MPI calls. Throws CommError when MPI was already finalized, when MPI_Init_thread fails, or
/// when the library provides less than MPI_THREAD_FUNNELED. Before MPI_Init_thread it sets the
/// collective defaults of kMpiCollectiveDefaults where the environment does not set them (a
/// user's `mpirun --mca ...` or OMPI_MCA_* wins).
class MpiEnvironment {
 public:
  MpiEnvironment();
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  /// Rank of this process in MPI_COMM_WORLD, and the size of MPI_COMM_WORLD.
  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  /// True when this object called MPI_Init_thread (and will call MPI_Finalize).
  bool initialized_here() const { return initialized_here_; }

 private:
  bool initialized_here_ = false;
  int64_t rank_ = 0;
  int64_t size_ = 1;
};

/// The communicator of one MPI process; its global rank is its rank in `world`. The constructor
/// is collective over `world` (every process must construct it, with the same layout): it
/// duplicates `world` (with MPI_ERRORS_RETURN set, so that failures become CommError instead of
/// aborting; the caller's communicator is not changed) and splits the duplicate once per
/// GroupKind, color = layout.group_index(kind, rank), key = position in layout.group(kind, rank),
/// so that the rank of a member in a sub-communicator is its position in the group. A rank that
/// is not in its embedding group (a middle pipeline stage) gets MPI_COMM_NULL for kEmbedding.
/// Point-to-point transfers use the world duplicate, so its tags never match the caller's
/// messages on `world`.
///
/// Errors: InvalidArgument for a layout whose world size differs from the size of `world`
/// (naming both), a collective on a group this rank is not in, buffer lengths that do not match
/// the group size, a peer outside [0, world size), a tag outside [0, MPI_TAG_UB], or a buffer
/// longer than INT_MAX elements (MPI counts are int); CommError for an MPI failure (MPI not
/// initialized, or an MPI error code: the message has the operation, the group and
/// MPI_Error_string's text), also from Request::wait(), e.g. a recv whose message is longer
/// (MPI_ERR_TRUNCATE) or shorter than its buffer.
///
/// Distributed timeout (Megatron-LM's --distributed-timeout-minutes, default 10): a wait() longer
/// than `distributed_timeout_minutes` throws CommError naming the operation, the group (its
/// ranks) and the ranks that did not arrive (see exec/mpi_watchdog.hpp); the caller then aborts
/// the job (MPI_Abort). InvalidArgument for a timeout that is not finite and > 0.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const RankLayout& layout, MPI_Comm world = MPI_COMM_WORLD,
                           double distributed_timeout_minutes = kDefaultDistributedTimeoutMinutes);
  /// Frees the sub-communicators (unless MPI is already finalized). Operations in flight
  /// complete first (MPI_Comm_free semantics).
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return world_size_; }
  const RankLayout& layout() const override { return layout_; }

  RequestPtr all_reduce(GroupKind group, std::span<float> data, ReduceOp op) override;
  RequestPtr all_reduce(GroupKind group, std::span<double> data, ReduceOp op) override;
  RequestPtr all_gather(GroupKind group, std::span<const float> input,
                        std::span<float> output) override;
  RequestPtr reduce_scatter(GroupKind group, std::span<const float> input, std::span<float> output,
                            ReduceOp op) override;
  /// MPI_Ialltoallv on the group's sub-communicator (the request keeps the int counts and
  /// displacements alive until it completes).
  RequestPtr all_to_all_v(GroupKind group, std::span<const float> input,
                          std::span<const int64_t> send_counts, std::span<float> output,
                          std::span<const int64_t> recv_counts) override;
  /// MPI_Ialltoallv on the group's communicator with one non-empty block each way (to the next
  /// member, from the previous one): one collective request, so the watchdog names the group.
  RequestPtr ring_exchange(GroupKind group, std::span<const float> send,
                           std::span<float> recv) override;
  RequestPtr send(int64_t peer, int64_t tag, std::span<const float> data) override;
  RequestPtr recv(int64_t peer, int64_t tag, std::span<float> data) override;

  /// The largest tag MPI accepts (the MPI_TAG_UB attribute, >= 32767 by the standard).
  int64_t max_tag() const { return max_tag_; }

 private:
  /// The sub-communicator of `group`; InvalidArgument when this rank is not in it.
  MPI_Comm comm(GroupKind group, const char* op) const;
  RequestPtr all_reduce_impl(GroupKind group, void* data, size_t count, MPI_Datatype type,
                             ReduceOp op, const char* type_name);
  void check_peer_and_tag(const char* op, int64_t peer, int64_t tag) const;
  /// Counts a collective on `group` with the watchdog; what its request waits for.
  PendingOp pending(GroupKind group, const std::string& what);
  void free_communicators() noexcept;

  RankLayout layout_;
  int64_t rank_ = 0;
  int64_t world_size_ = 0;
  int64_t max_tag_ = 0;
  MPI_Comm world_dup_ = MPI_COMM_NULL;
  std::array<MPI_Comm, kNumGroupKinds> comms_{};
  std::shared_ptr<MpiWatchdog> watchdog_;  // shared with the requests in flight
};

}  // namespace traintwin::exec
