// The MPI side of the communicators (MpiCommunicator, and the NCCL one's bootstrap): checking
// that the MPI world is the layout's, and one MPI sub-communicator per group of the layout.
// `who` prefixes every message ("MPI communicator", "NCCL communicator").
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/rank_layout.hpp"

namespace traintwin::exec {

/// True for the expert groups (kEp, kEtp, kEdp, kEtpEp).
bool is_expert_group(GroupKind kind);

/// "" when the groups of `kind` exist in `layout`, else why not: an expert group of a layout
/// whose expert generator is unusable (RankLayout::check_expert_groups's message; dense models
/// never use those groups, so the communicators leave them out instead of failing), or an HSDP
/// group (kDpShard, kDpReplica) of a layout with one distributed-optimizer instance (they would
/// duplicate DP x CP and one rank; the Program uses them only for HSDP), or FP8's amax reduction group
/// (kTpDpCp: the executor runs no FP8).
std::string unusable_group_reason(const RankLayout& layout, GroupKind kind);

/// MPI_Error_string of `code` (or "MPI error <code>").
std::string mpi_error_text(int code);

/// Throws CommError "<who>: <what> failed: <MPI_Error_string>" when code != MPI_SUCCESS.
void check_mpi(int code, const std::string& who, const std::string& what);

/// Global ranks "0,2,4".
std::string members_text(const std::vector<int64_t>& members);

/// {rank, size} of `world` after checking that MPI is initialized and not finalized (CommError
/// "<who>: MPI is not initialized (create an MpiEnvironment first<hint>)"), that `world` is not
/// MPI_COMM_NULL and that its size is the layout's world size (InvalidArgument naming both).
std::pair<int64_t, int64_t> require_mpi_world(const RankLayout& layout, MPI_Comm world,
                                              const std::string& who, const std::string& hint = "");

/// The position of `rank` in layout.group(kind, rank), -1 when it is not a member (kEmbedding on
/// a middle pipeline stage).
int group_position(const RankLayout& layout, GroupKind kind, int64_t rank);

/// MPI_Comm_split of `world` into the groups of `kind` (color = group_index, key = position), so
/// that a member's rank in the result is its position in the group; MPI_ERRORS_RETURN set.
/// Returns MPI_COMM_NULL for a rank outside its group, and on every rank for a group kind that
/// unusable_group_reason() rules out. Collective over `world`.
MPI_Comm split_group(MPI_Comm world, const RankLayout& layout, GroupKind kind, int64_t rank,
                     const std::string& who);

}  // namespace traintwin::exec
