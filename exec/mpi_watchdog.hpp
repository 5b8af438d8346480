// The distributed timeout of the MPI communicator (Megatron-LM's --distributed-timeout-minutes,
// the timeout of torch.distributed's process groups): a rank that waits longer than the timeout
// on a collective or a point-to-point transfer gives up with a CommError naming the operation, the
// group and the ranks that did not arrive, instead of spinning forever behind a stopped, hung or
// dead rank.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "exec/mpi_groups.hpp"

namespace traintwin::exec {

/// Megatron-LM's default --distributed-timeout-minutes.
inline constexpr double kDefaultDistributedTimeoutMinutes = 10.0;

/// What one MpiRequest waits for, for the timeout message.
struct PendingOp {
  std::string what;              ///< "MPI_Iallreduce(sum, float, 8 elements) on group tp"
  int group = -1;                ///< GroupKind as int; -1 for a point-to-point transfer
  int64_t sequence = 0;          ///< this rank's count of collectives on `group`, this one included
  std::vector<int64_t> members;  ///< global ranks expected to take part (the peer for p2p)
};

/// One per MpiCommunicator. Counts the collectives this rank entered per group, answers other
/// ranks' status queries (on its own duplicate of the world, so nothing mixes with the
/// training's messages) whenever this rank waits, and on a timeout asks the members of the
/// group where they are: a member that answers with a smaller count has not reached the
/// collective; one that does not answer within the query time is stopped, hung or dead.
class MpiWatchdog {
 public:
  /// One per GroupKind (kTp .. kEtpEp), plus point-to-point.
  static constexpr size_t kCounters = kNumGroupKinds + 1;

  /// `world` is duplicated (collective over it). timeout_minutes must be > 0 and finite
  /// (InvalidArgument otherwise).
  MpiWatchdog(MPI_Comm world, double timeout_minutes);
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  /// Counts one more collective on `group` and returns its sequence number (1, 2, ...).
  int64_t enter(int group);

  /// Waits for `request` (MPI_Test in a loop, answering status queries meanwhile) and returns
  /// MPI_Test's code and status. After the timeout, throws CommError naming `op`, the timeout,
  /// and the members that did not arrive; the watchdog is then broken().
  int wait(MPI_Request& request, MPI_Status& status, const PendingOp& op);

  /// True after a timeout: pending requests must not be waited for again (the job is aborted).
  bool broken() const { return broken_; }

  double timeout_minutes() const { return timeout_s_ / 60.0; }

 private:
  void answer_queries();
  [[noreturn]] void fail(const PendingOp& op, double waited_s);

  MPI_Comm status_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  double timeout_s_;
  bool broken_ = false;
  std::array<int64_t, kCounters> entered_{};
  std::deque<std::array<int64_t, kCounters>> reply_buffers_;
  std::deque<MPI_Request> replies_;
};

}  // namespace traintwin::exec
