// Process launch: MPI when started under mpirun/srun, a plain single process
// otherwise. Errors on any rank end every rank (MPI_Abort), never a hang.
#pragma once
#include <string>

namespace tf::dist {

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  bool mpi = false;
};

// Initialises MPI only when a launcher set the environment (OMPI_*, PMI_*,
// SLURM_*), so `triforce` also runs as a plain process.
World& init(int* argc, char*** argv);
World& world();
void finalize();
// Prints `msg` on one line and stops this process; under MPI it takes every
// other rank down with it.
[[noreturn]] void abort_all(const std::string& msg, int code = 1);

}  // namespace tf::dist
