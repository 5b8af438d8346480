// Splitting a sweep over MPI ranks: `mpirun -np N traintwin sweep ...` evaluates configuration
// i on rank i mod N (each rank with its own worker processes) and gathers the rows on rank 0,
// which ranks and prints them.
#pragma once

#include <functional>
#include <vector>

#include "sim/sweep.hpp"

namespace traintwin::cli {

/// True when this process was started by an MPI launcher (mpirun / srun) with more than one rank
/// (exec::read_launch_environment(): Open MPI's OMPI_COMM_WORLD_SIZE, srun's SLURM_NTASKS with a
/// job step, PMIX_SIZE / PMI_SIZE > 1).
bool launched_by_mpi();

/// Runs `work` on this MPI rank; an Error it throws is printed ("traintwin: error: ...") and
/// ends every rank with MPI_Abort (others may be waiting in a collective). For the commands that
/// run one process per rank (train, profile, validate --live).
void run_or_abort_all(const std::function<void()>& work);

/// Runs `sweep` on this rank's share of `configurations` (index mod size == rank) and gathers
/// every row on rank 0. Returns the ranked rows on rank 0 and an empty vector on the others;
/// `is_root` tells which. Initializes and finalizes MPI.
std::vector<SweepRow> mpi_sweep(
    const std::vector<SweepConfiguration>& configurations,
    const std::function<std::vector<SweepRow>(const std::vector<SweepConfiguration>&)>& sweep,
    bool& is_root);

}  // namespace traintwin::cli
