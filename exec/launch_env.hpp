// Where this process sits in a job started by a launcher: Open MPI's mpirun (OMPI_COMM_WORLD_*),
// Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE, SLURM_NODEID),
// or a PMI/PMIx launcher (PMIX_RANK / PMI_RANK, PMI_SIZE). One reading for every command that
// runs under a launcher (train, sweep), so that srun and mpirun are told apart in one place.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace traintwin::exec {

/// This process's place in the job. A process started without a launcher is rank 0 of 1.
struct LaunchEnvironment {
  std::string launcher = "none";  ///< "none" | "mpirun" | "srun" | "pmi"
  int64_t rank = 0;               ///< global rank (OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMIX_RANK)
  int64_t world_size = 1;         ///< OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, PMI_SIZE
  int64_t local_rank = 0;         ///< rank on this node (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID)
  int64_t local_size = 1;         ///< ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE; Slurm:
                                  ///< SLURM_TASKS_PER_NODE's entry for SLURM_NODEID)
  /// More than one process: the job needs MPI.
  bool distributed() const { return world_size > 1; }
};

/// Reads the launcher's variables through `getenv` (std::getenv by default; tests pass a map).
/// Open MPI's variables win when both are set (mpirun inside a Slurm allocation). Throws
/// ConfigError naming the variable when a value is not a number, or a rank lies outside
/// [0, size). SLURM_TASKS_PER_NODE has Slurm's compressed form, e.g. "4(x2),3".
LaunchEnvironment read_launch_environment(
    const std::function<const char*(const char*)>& getenv = [](const char* name) {
      return static_cast<const char*>(std::getenv(name));
    });

/// For the commands that run mpirun themselves (the elastic agent of `train --max-restarts`,
/// `goodput --live`): throws ConfigError "<flag>: <who> launches mpirun itself, but this process
/// was started by <launcher>; run `<usage>` without mpirun/srun" when `env` has a launcher.
void require_no_launcher(const LaunchEnvironment& env, const std::string& flag,
                         const std::string& who, const std::string& usage);

}  // namespace traintwin::exec
