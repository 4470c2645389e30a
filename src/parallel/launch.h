// Process launch: MPI when started under mpirun/srun, a plain single process
// otherwise. Errors on any rank end every rank (MPI_Abort), never a hang.
#pragma once
#include <string>

namespace tf::parallel {

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  bool mpi = false;
};

// Initialises MPI only when a launcher set the environment (mpirun: OMPI_*;
// srun --mpi=pmi2 / pmix: PMI_* / PMIX_*; SLURM_STEP_ID), so `triforce` also
// runs as a plain process. local_rank (which GPU: local_rank % devices) comes
// from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or MPI_LOCALRANKID, else from
// an MPI_COMM_TYPE_SHARED split. Ranks other than 0 of a multi-rank job are
// quiet: stdout and stderr go to /dev/null (TRIFORCE_TP_VERBOSE=1 keeps them).
World& init(int* argc, char*** argv);
World& world();
void finalize();
// Prints `msg` on one line and stops this process; under MPI it takes every
// other rank down with it.
[[noreturn]] void abort_all(const std::string& msg, int code = 1);

}  // namespace tf::parallel
