#include "exec/mpi_communicator.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "exec/mpi_groups.hpp"
#include "exec/mpi_watchdog.hpp"

namespace traintwin::exec {
namespace {

constexpr const char* kWho = "MPI communicator";

/// Throws CommError "MPI communicator: <what> failed: <MPI_Error_string>" for code != success.
void check(int code, const std::string& what) { check_mpi(code, kWho, what); }

int to_count(size_t n, const std::string& what) {
  if (n > static_cast<size_t>(INT_MAX)) {
    throw InvalidArgument(
        "MPI communicator: " + what + ": " + std::to_string(n) +
        " elements exceed the MPI count limit INT_MAX = " + std::to_string(INT_MAX));
  }
  return static_cast<int>(n);
}

MPI_Op to_mpi(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }
const char* to_text(ReduceOp op) { return op == ReduceOp::kMax ? "max" : "sum"; }

/// An MPI_Request in flight. `op.what` names the operation and group for error messages. A recv
/// (expected_count >= 0) also checks that the message filled its buffer. Waiting goes through the
/// communicator's watchdog (the distributed timeout).
class MpiRequest final : public Request {
 public:
  /// `keep_alive` holds what MPI reads until completion (the count arrays of a non-blocking
  /// alltoallv).
  MpiRequest(MPI_Request request, std::shared_ptr<MpiWatchdog> watchdog, PendingOp op,
             int expected_count = -1, std::shared_ptr<const void> keep_alive = nullptr)
      : request_(request),
        watchdog_(std::move(watchdog)),
        op_(std::move(op)),
        what_(op_.what),
        expected_count_(expected_count),
        keep_alive_(std::move(keep_alive)) {}
  ~MpiRequest() override {
    if (request_ == MPI_REQUEST_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    // Not after a timeout, nor while an exception unwinds (the job is about to be aborted): the
    // peers of this request may never come, and waiting here would hang the exit.
    if (finalized || watchdog_->broken() || std::uncaught_exceptions() > 0) return;
    MPI_Wait(&request_, MPI_STATUS_IGNORE);  // errors dropped: no throw here
  }

  void wait() override {
    if (request_ == MPI_REQUEST_NULL) return;  // done (or never started): idempotent
    MPI_Status status;
    const int code = watchdog_->wait(request_, status, op_);
    request_ = MPI_REQUEST_NULL;  // a failed request is not waited for again
    check(code, what_ + " (wait)");
    if (expected_count_ >= 0) {
      int count = 0;
      check(MPI_Get_count(&status, MPI_FLOAT, &count), what_ + " (MPI_Get_count)");
      if (count != expected_count_) {
        throw CommError("MPI communicator: " + what_ + ": received " + std::to_string(count) +
                        " floats into a buffer of " + std::to_string(expected_count_) +
                        " (the send and the recv of one transfer must have the same length)");
      }
    }
  }

 private:
  MPI_Request request_;
  std::shared_ptr<MpiWatchdog> watchdog_;
  PendingOp op_;
  std::string what_;
  int expected_count_;
  std::shared_ptr<const void> keep_alive_;
};

/// A reduce-scatter as an all-to-all of the pieces (`exchange`: member j's piece of every member
/// lands in slot j of `pieces`), then, at wait(), this member's piece reduced over the members in
/// member order into `output`. Each member sends and receives (p-1)/p of the input, as a ring
/// reduce-scatter does, in one step. Not libnbc's MPI_Ireduce_scatter_block: that reduces the
/// whole input to one root over a binomial tree and scatters it from there (on 2 Zen 5 cores,
/// 2 ranks, 204 MB: 140 ms against 40 ms this way). Destroyed without wait(), the exchange
/// completes (MpiRequest) and `output` is left as it was.
class ReduceScatterRequest final : public Request {
 public:
  ReduceScatterRequest(RequestPtr exchange, std::shared_ptr<float[]> pieces, size_t members,
                       std::span<float> output, ReduceOp op)
      : exchange_(std::move(exchange)),
        pieces_(std::move(pieces)),
        members_(members),
        output_(output),
        op_(op) {}

  void wait() override {
    if (!exchange_) return;  // done: idempotent
    exchange_->wait();
    exchange_.reset();
    const size_t n = output_.size();
    const float* first = pieces_.get();
    float* out = output_.data();
    std::copy(first, first + n, out);
    for (size_t j = 1; j < members_; ++j) {
      const float* piece = first + j * n;
      if (op_ == ReduceOp::kMax) {
        for (size_t i = 0; i < n; ++i) out[i] = std::max(out[i], piece[i]);
      } else {
        for (size_t i = 0; i < n; ++i) out[i] += piece[i];
      }
    }
    pieces_.reset();
  }

 private:
  RequestPtr exchange_;
  std::shared_ptr<float[]> pieces_;
  size_t members_;
  std::span<float> output_;
  ReduceOp op_;
};

}  // namespace

MpiEnvironment::MpiEnvironment() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw CommError("MPI environment: MPI was already finalized; it cannot restart");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    for (const MpiParameterDefault& d : kMpiCollectiveDefaults) {
      ::setenv(d.variable, d.value, /*overwrite=*/0);
    }
    int provided = 0;
    const int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (code != MPI_SUCCESS) {
      throw CommError("MPI environment: MPI_Init_thread(MPI_THREAD_FUNNELED) failed: " +
                      mpi_error_text(code));
    }
    initialized_here_ = true;
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      throw CommError("MPI environment: MPI_Init_thread provides thread level " +
                      std::to_string(provided) + ", less than MPI_THREAD_FUNNELED (" +
                      std::to_string(MPI_THREAD_FUNNELED) + ")");
    }
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  rank_ = rank;
  size_ = size;
}

MpiEnvironment::~MpiEnvironment() {
  if (!initialized_here_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MpiCommunicator::MpiCommunicator(const RankLayout& layout, MPI_Comm world,
                                 double distributed_timeout_minutes)
    : layout_(layout) {
  comms_.fill(MPI_COMM_NULL);
  std::tie(rank_, world_size_) = require_mpi_world(layout, world, kWho);
  watchdog_ = std::make_shared<MpiWatchdog>(world, distributed_timeout_minutes);
  try {
    check(MPI_Comm_dup(world, &world_dup_), "MPI_Comm_dup(world)");
    check(MPI_Comm_set_errhandler(world_dup_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    void* tag_ub = nullptr;
    int flag = 0;
    check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag),
          "MPI_Comm_get_attr(MPI_TAG_UB)");
    // MPI_TAG_UB is a predefined attribute of MPI_COMM_WORLD; 32767 is the standard's minimum.
    max_tag_ = flag ? *static_cast<int*>(tag_ub) : 32767;
    for (size_t k = 0; k < kNumGroupKinds; ++k) {
      comms_[k] = split_group(world_dup_, layout, static_cast<GroupKind>(k), rank_, kWho);
    }
  } catch (...) {
    free_communicators();
    throw;
  }
}

MpiCommunicator::~MpiCommunicator() { free_communicators(); }

void MpiCommunicator::free_communicators() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm& c : comms_) {
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  }
  if (world_dup_ != MPI_COMM_NULL) MPI_Comm_free(&world_dup_);
}

PendingOp MpiCommunicator::pending(GroupKind group, const std::string& what) {
  return PendingOp{what, static_cast<int>(group), watchdog_->enter(static_cast<int>(group)),
                   layout_.group(group, rank_)};
}

MPI_Comm MpiCommunicator::comm(GroupKind group, const char* op) const {
  const MPI_Comm c = comms_[static_cast<size_t>(group)];
  if (c == MPI_COMM_NULL) {
    const std::string reason = unusable_group_reason(layout_, group);
    if (!reason.empty()) {
      throw InvalidArgument(std::string("MPI communicator: ") + op + " on group " +
                            to_string(group) + ": " + reason);
    }
    throw InvalidArgument(std::string("MPI communicator: ") + op + " on group " + to_string(group) +
                          ": rank " + std::to_string(rank_) + " is not a member of its " +
                          to_string(group) + " group {" +
                          members_text(layout_.group(group, rank_)) +
                          "} (only the first and last pipeline stages hold the embedding)");
  }
  return c;
}

RequestPtr MpiCommunicator::all_reduce_impl(GroupKind group, void* data, size_t count,
                                            MPI_Datatype type, ReduceOp op, const char* type_name) {
  const std::string what = std::string("MPI_Iallreduce(") + to_text(op) + ", " + type_name + ", " +
                           std::to_string(count) + " elements) on group " + to_string(group);
  const MPI_Comm c = comm(group, "all_reduce");
  const int n = to_count(count, what);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallreduce(MPI_IN_PLACE, data, n, type, to_mpi(op), c, &request), what);
  return std::make_unique<MpiRequest>(request, watchdog_, pending(group, what));
}

RequestPtr MpiCommunicator::all_reduce(GroupKind group, std::span<float> data, ReduceOp op) {
  return all_reduce_impl(group, data.data(), data.size(), MPI_FLOAT, op, "float");
}

RequestPtr MpiCommunicator::all_reduce(GroupKind group, std::span<double> data, ReduceOp op) {
  return all_reduce_impl(group, data.data(), data.size(), MPI_DOUBLE, op, "double");
}

RequestPtr MpiCommunicator::all_gather(GroupKind group, std::span<const float> input,
                                       std::span<float> output) {
  const std::string what = "MPI_Iallgather(" + std::to_string(input.size()) +
                           " floats per member) on group " + to_string(group);
  const MPI_Comm c = comm(group, "all_gather");
  const auto members = static_cast<size_t>(layout_.size(group));
  if (output.size() != members * input.size()) {
    throw InvalidArgument("MPI communicator: all_gather on group " + std::string(to_string(group)) +
                          ": output has " + std::to_string(output.size()) +
                          " elements, expected group size " + std::to_string(members) +
                          " x input " + std::to_string(input.size()) + " = " +
                          std::to_string(members * input.size()));
  }
  const int n = to_count(input.size(), what);
  to_count(output.size(), what);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(input.data(), n, MPI_FLOAT, output.data(), n, MPI_FLOAT, c, &request), what);
  return std::make_unique<MpiRequest>(request, watchdog_, pending(group, what));
}

RequestPtr MpiCommunicator::reduce_scatter(GroupKind group, std::span<const float> input,
                                           std::span<float> output, ReduceOp op) {
  const std::string what = std::string("reduce_scatter (MPI_Ialltoall, then ") + to_text(op) +
                           ", " + std::to_string(output.size()) + " floats per member) on group " +
                           to_string(group);
  const MPI_Comm c = comm(group, "reduce_scatter");
  const auto members = static_cast<size_t>(layout_.size(group));
  if (input.size() != members * output.size()) {
    throw InvalidArgument("MPI communicator: reduce_scatter on group " +
                          std::string(to_string(group)) + ": input has " +
                          std::to_string(input.size()) + " elements, expected group size " +
                          std::to_string(members) + " x output " + std::to_string(output.size()) +
                          " = " + std::to_string(members * output.size()));
  }
  const int n = to_count(output.size(), what);
  to_count(input.size(), what);
  // Member j's piece of every member lands in slot j of `pieces`; wait() reduces them.
  std::shared_ptr<float[]> pieces = std::make_shared_for_overwrite<float[]>(input.size());
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ialltoall(input.data(), n, MPI_FLOAT, pieces.get(), n, MPI_FLOAT, c, &request), what);
  auto exchange =
      std::make_unique<MpiRequest>(request, watchdog_, pending(group, what), -1, pieces);
  return std::make_unique<ReduceScatterRequest>(std::move(exchange), std::move(pieces), members,
                                                output, op);
}

RequestPtr MpiCommunicator::all_to_all_v(GroupKind group, std::span<const float> input,
                                         std::span<const int64_t> send_counts,
                                         std::span<float> output,
                                         std::span<const int64_t> recv_counts) {
  const std::string what = "MPI_Ialltoallv(" + std::to_string(input.size()) + " floats out, " +
                           std::to_string(output.size()) + " in) on group " + to_string(group);
  const MPI_Comm c = comm(group, "all_to_all_v");
  const auto members = static_cast<size_t>(layout_.size(group));
  const std::vector<int64_t> sdispl =
      all_to_all_displacements(kWho, group, members, "send_counts", send_counts, input.size());
  const std::vector<int64_t> rdispl =
      all_to_all_displacements(kWho, group, members, "recv_counts", recv_counts, output.size());
  to_count(input.size(), what);
  to_count(output.size(), what);
  // One array: send counts, send displacements, recv counts, recv displacements.
  std::vector<int> arrays(4 * members);
  for (size_t j = 0; j < members; ++j) {
    arrays[j] = static_cast<int>(send_counts[j]);
    arrays[members + j] = static_cast<int>(sdispl[j]);
    arrays[2 * members + j] = static_cast<int>(recv_counts[j]);
    arrays[3 * members + j] = static_cast<int>(rdispl[j]);
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ialltoallv(input.data(), arrays.data(), arrays.data() + members, MPI_FLOAT,
                       output.data(), arrays.data() + 2 * members, arrays.data() + 3 * members,
                       MPI_FLOAT, c, &request),
        what);
  // The vector's heap block moves with it: the pointers MPI holds stay valid.
  return std::make_unique<MpiRequest>(request, watchdog_, pending(group, what), -1,
                                      std::make_shared<const std::vector<int>>(std::move(arrays)));
}

void MpiCommunicator::check_peer_and_tag(const char* op, int64_t peer, int64_t tag) const {
  if (peer < 0 || peer >= world_size_) {
    throw InvalidArgument(std::string("MPI communicator: ") + op + ": peer rank " +
                          std::to_string(peer) + " is outside the world [0, " +
                          std::to_string(world_size_) + ")");
  }
  if (tag < 0 || tag > max_tag_) {
    throw InvalidArgument(std::string("MPI communicator: ") + op + " with rank " +
                          std::to_string(peer) + ": tag " + std::to_string(tag) +
                          " is outside [0, MPI_TAG_UB = " + std::to_string(max_tag_) + "]");
  }
}

RequestPtr MpiCommunicator::ring_exchange(GroupKind group, std::span<const float> send,
                                         std::span<float> recv) {
  const std::string what = "ring exchange (MPI_Ialltoallv, " + std::to_string(send.size()) +
                           " floats to the next member) on group " + to_string(group);
  const MPI_Comm c = comm(group, "ring_exchange");
  if (send.size() != recv.size()) {
    throw InvalidArgument("MPI communicator: ring_exchange on group " +
                          std::string(to_string(group)) + ": send has " +
                          std::to_string(send.size()) + " elements, recv " +
                          std::to_string(recv.size()));
  }
  const int n = to_count(send.size(), what);
  int me = 0, members = 0;
  check(MPI_Comm_rank(c, &me), what);
  check(MPI_Comm_size(c, &members), what);
  // Counts and displacements per member; MPI reads them until the request completes.
  struct Arrays {
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  };
  auto a = std::make_shared<Arrays>();
  const auto m = static_cast<size_t>(members);
  a->send_counts.assign(m, 0);
  a->send_displs.assign(m, 0);
  a->recv_counts.assign(m, 0);
  a->recv_displs.assign(m, 0);
  a->send_counts[static_cast<size_t>((me + 1) % members)] = n;
  a->recv_counts[static_cast<size_t>((me + members - 1) % members)] = n;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ialltoallv(send.data(), a->send_counts.data(), a->send_displs.data(), MPI_FLOAT,
                       recv.data(), a->recv_counts.data(), a->recv_displs.data(), MPI_FLOAT, c,
                       &request),
        what);
  return std::make_unique<MpiRequest>(request, watchdog_, pending(group, what), -1, std::move(a));
}

RequestPtr MpiCommunicator::send(int64_t peer, int64_t tag, std::span<const float> data) {
  check_peer_and_tag("send", peer, tag);
  const std::string what = "MPI_Isend(" + std::to_string(data.size()) + " floats to rank " +
                           std::to_string(peer) + ", tag " + std::to_string(tag) +
                           ") on group world";
  const int n = to_count(data.size(), what);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Isend(data.data(), n, MPI_FLOAT, static_cast<int>(peer), static_cast<int>(tag),
                  world_dup_, &request),
        what);
  return std::make_unique<MpiRequest>(request, watchdog_, PendingOp{what, -1, 0, {peer}});
}

RequestPtr MpiCommunicator::recv(int64_t peer, int64_t tag, std::span<float> data) {
  check_peer_and_tag("recv", peer, tag);
  const std::string what = "MPI_Irecv(" + std::to_string(data.size()) + " floats from rank " +
                           std::to_string(peer) + ", tag " + std::to_string(tag) +
                           ") on group world";
  const int n = to_count(data.size(), what);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Irecv(data.data(), n, MPI_FLOAT, static_cast<int>(peer), static_cast<int>(tag),
                  world_dup_, &request),
        what);
  return std::make_unique<MpiRequest>(request, watchdog_, PendingOp{what, -1, 0, {peer}}, n);
}

}  // namespace traintwin::exec
