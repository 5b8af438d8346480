#include "exec/mpi_watchdog.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "core/error.hpp"
#include "core/rank_layout.hpp"

namespace traintwin::exec {
namespace {

constexpr int kQueryTag = 1;
constexpr int kReplyTag = 2;
/// How long a timed-out rank waits for the members' answers.
constexpr double kQuerySeconds = 5.0;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

MpiWatchdog::MpiWatchdog(MPI_Comm world, double timeout_minutes) : timeout_s_(timeout_minutes * 60) {
  if (!(timeout_minutes > 0) || !std::isfinite(timeout_minutes)) {
    throw InvalidArgument(fmt::format("--distributed-timeout-minutes: {} is not allowed (allowed: "
                                      "a finite number of minutes > 0; Megatron-LM's default is {})",
                                      timeout_minutes, kDefaultDistributedTimeoutMinutes));
  }
  if (MPI_Comm_dup(world, &status_comm_) != MPI_SUCCESS) {
    throw CommError("MPI communicator: MPI_Comm_dup(world) for the distributed timeout failed");
  }
  MPI_Comm_set_errhandler(status_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(status_comm_, &rank_);
}

MpiWatchdog::~MpiWatchdog() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || broken_) return;  // after a timeout the job is aborted; nothing to tidy
  for (MPI_Request& r : replies_) MPI_Request_free(&r);
  if (status_comm_ != MPI_COMM_NULL) MPI_Comm_free(&status_comm_);
}

int64_t MpiWatchdog::enter(int group) { return ++entered_.at(static_cast<size_t>(group)); }

void MpiWatchdog::answer_queries() {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, status_comm_, &flag, &st) != MPI_SUCCESS || !flag) {
      break;
    }
    int query = 0;
    MPI_Recv(&query, 1, MPI_INT, st.MPI_SOURCE, kQueryTag, status_comm_, MPI_STATUS_IGNORE);
    reply_buffers_.push_back(entered_);
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Isend(reply_buffers_.back().data(), static_cast<int>(kCounters), MPI_INT64_T, st.MPI_SOURCE,
              kReplyTag, status_comm_, &r);
    replies_.push_back(r);
  }
  // Forget the replies that went out (oldest first: the buffers are a queue).
  while (!replies_.empty()) {
    int done = 0;
    MPI_Test(&replies_.front(), &done, MPI_STATUS_IGNORE);
    if (!done) break;
    replies_.pop_front();
    reply_buffers_.pop_front();
  }
}

int MpiWatchdog::wait(MPI_Request& request, MPI_Status& status, const PendingOp& op) {
  const Clock::time_point t0 = Clock::now();
  for (uint64_t spin = 0;; ++spin) {
    int done = 0;
    const int code = MPI_Test(&request, &done, &status);
    if (code != MPI_SUCCESS || done) return code;
    if (spin % 64 == 0) {
      answer_queries();
      const double waited = seconds_since(t0);
      if (waited > timeout_s_) fail(op, waited);
      // Past the first millisecond, leave the core to the other ranks between tests.
      if (waited > 1e-3) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void MpiWatchdog::fail(const PendingOp& op, double waited_s) {
  broken_ = true;
  // Ask every other member where it is; answer the queries of others meanwhile.
  struct Asked {
    int64_t rank;
    std::array<int64_t, kCounters> counters{};
    MPI_Request recv = MPI_REQUEST_NULL;
    MPI_Request send = MPI_REQUEST_NULL;
    bool answered = false;
  };
  // Leaked on purpose: the job is aborted after this throw, and a late answer must still land in
  // live memory.
  auto& asked = *new std::deque<Asked>();
  static int query = 0;
  query = op.group;
  for (int64_t m : op.members) {
    if (m == rank_) continue;
    Asked& a = asked.emplace_back();
    a.rank = m;
    MPI_Irecv(a.counters.data(), static_cast<int>(kCounters), MPI_INT64_T, static_cast<int>(m),
              kReplyTag, status_comm_, &a.recv);
    MPI_Isend(&query, 1, MPI_INT, static_cast<int>(m), kQueryTag, status_comm_, &a.send);
  }
  const Clock::time_point t0 = Clock::now();
  size_t pending = asked.size();
  while (pending > 0 && seconds_since(t0) < kQuerySeconds) {
    answer_queries();
    for (Asked& a : asked) {
      if (a.answered) continue;
      int done = 0;
      MPI_Test(&a.recv, &done, MPI_STATUS_IGNORE);
      if (done) {
        a.answered = true;
        --pending;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<std::string> missing;
  for (const Asked& a : asked) {
    if (!a.answered) {
      missing.push_back(fmt::format("{} (no answer within {:.0f} s: stopped, hung or dead)", a.rank,
                                    kQuerySeconds));
    } else if (op.group >= 0 &&
               a.counters[static_cast<size_t>(op.group)] < op.sequence) {
      missing.push_back(fmt::format("{} (alive, at collective {} of this group; this is {})", a.rank,
                                    a.counters[static_cast<size_t>(op.group)], op.sequence));
    } else if (op.group < 0) {
      missing.push_back(fmt::format("{} (alive, but it has not matched this transfer)", a.rank));
    }
  }
  const std::string group =
      op.group >= 0 && op.group < static_cast<int>(kCounters) - 1
          ? fmt::format("the {} group {{{}}}", to_string(static_cast<GroupKind>(op.group)),
                        fmt::join(op.members, ", "))
          : fmt::format("a point-to-point transfer with rank {}", fmt::join(op.members, ", "));
  throw CommError(fmt::format(
      "MPI communicator: rank {} waited {:.1f} s for {} ({}), more than the distributed timeout "
      "of {} minutes (--distributed-timeout-minutes); ranks that did not arrive: {}",
      rank_, waited_s, op.what, group, timeout_s_ / 60.0,
      missing.empty() ? std::string("none known (they all answered past this operation)")
                      : fmt::format("{}", fmt::join(missing, "; "))));
}

}  // namespace traintwin::exec
