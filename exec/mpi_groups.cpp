#include "exec/mpi_groups.hpp"

#include "core/error.hpp"

namespace traintwin::exec {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(length));
}

void check_mpi(int code, const std::string& who, const std::string& what) {
  if (code != MPI_SUCCESS) throw CommError(who + ": " + what + " failed: " + mpi_error_text(code));
}

std::string members_text(const std::vector<int64_t>& members) {
  std::string s;
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(members[i]);
  }
  return s;
}

std::pair<int64_t, int64_t> require_mpi_world(const RankLayout& layout, MPI_Comm world,
                                              const std::string& who, const std::string& hint) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw CommError(who + ": MPI is " + (finalized ? "already finalized" : "not initialized") +
                    " (create an MpiEnvironment first" + hint + ")");
  }
  if (world == MPI_COMM_NULL) throw InvalidArgument(who + ": world is MPI_COMM_NULL");
  int rank = 0, size = 0;
  check_mpi(MPI_Comm_rank(world, &rank), who, "MPI_Comm_rank(world)");
  check_mpi(MPI_Comm_size(world, &size), who, "MPI_Comm_size(world)");
  if (layout.world_size() != size) {
    throw InvalidArgument(
        who + ": the layout's world size is " + std::to_string(layout.world_size()) +
        " (tp=" + std::to_string(layout.size(GroupKind::kTp)) +
        ", cp=" + std::to_string(layout.size(GroupKind::kCp)) +
        ", dp=" + std::to_string(layout.size(GroupKind::kDp)) +
        ", pp=" + std::to_string(layout.size(GroupKind::kPp)) + ") but the MPI world has " +
        std::to_string(size) + " processes; they must be equal");
  }
  return {rank, size};
}

int group_position(const RankLayout& layout, GroupKind kind, int64_t rank) {
  const std::vector<int64_t> members = layout.group(kind, rank);
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == rank) return static_cast<int>(i);
  }
  return -1;
}

bool is_expert_group(GroupKind kind) {
  return kind == GroupKind::kEp || kind == GroupKind::kEtp || kind == GroupKind::kEdp ||
         kind == GroupKind::kEtpEp;
}

std::string unusable_group_reason(const RankLayout& layout, GroupKind kind) {
  // With one distributed-optimizer instance the sharding group is DP x CP and the replica group
  // one rank: the communicators leave them out rather than duplicate DP x CP (the Program uses
  // them only for HSDP, training.num_distributed_optimizer_instances > 1).
  if ((kind == GroupKind::kDpShard || kind == GroupKind::kDpReplica) &&
      layout.size(GroupKind::kDpReplica) == 1) {
    return "the HSDP groups (dp-shard, dp-replica) exist only with "
           "training.num_distributed_optimizer_instances > 1";
  }
  if (kind == GroupKind::kTpDpCp) {
    return "the FP8 amax reduction group (tp-dp-cp) is not executed (training.fp8_format is "
           "refused by the executor)";
  }
  if (!is_expert_group(kind)) return "";
  try {
    layout.check_expert_groups();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

MPI_Comm split_group(MPI_Comm world, const RankLayout& layout, GroupKind kind, int64_t rank,
                     const std::string& who) {
  // The same answer on every rank, so either all of them split or none.
  if (!unusable_group_reason(layout, kind).empty()) return MPI_COMM_NULL;
  const int key = group_position(layout, kind, rank);
  const int color = key < 0 ? MPI_UNDEFINED : static_cast<int>(layout.group_index(kind, rank));
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(world, color, key < 0 ? 0 : key, &comm), who,
            std::string("MPI_Comm_split for group ") + to_string(kind));
  if (comm != MPI_COMM_NULL) {
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), who,
              std::string("MPI_Comm_set_errhandler for group ") + to_string(kind));
  }
  return comm;
}

}  // namespace traintwin::exec
