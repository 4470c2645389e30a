#include "parallel/launch.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "parallel/tensor_parallel.h"

extern "C" void openblas_set_num_threads(int);  // OpenBLAS (the BLAS CMake links)

namespace tf::parallel {
namespace {
World g_world;
int g_err_fd = 2;  // where abort_all writes (the terminal's stderr, also on a quiet worker)

bool launched_by_mpi() {
  // Open MPI's mpirun; PMI-1/PMI-2 (srun --mpi=pmi2, MPICH's hydra); PMIx (srun --mpi=pmix, prterun).
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_STEP_ID"})
    if (std::getenv(v)) return true;
  return false;
}

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : dflt;
}

// Workers run the same command as rank 0 (see tensor_parallel.h); only rank 0
// talks. Their stdout and stderr go to /dev/null, but abort_all keeps the
// original stderr so an error on any rank is still printed.
void quiet_worker() {
  if (const char* v = std::getenv("TRIFORCE_TP_VERBOSE"); v && *v && std::strcmp(v, "0") != 0) return;
  const int null_fd = open("/dev/null", O_WRONLY);
  if (null_fd < 0) return;
  std::fflush(stdout);
  std::fflush(stderr);
  g_err_fd = dup(2);
  if (g_err_fd < 0) g_err_fd = 2;
  dup2(null_fd, 1);
  dup2(null_fd, 2);
  close(null_fd);
}
}  // namespace

World& init(int* argc, char*** argv) {
  if (!launched_by_mpi()) return g_world;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  g_world.mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size);
  // Ranks that share a node share memory: their count splits the node's cores.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL, &node);
  int node_rank = 0, node_size = 1;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  int local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", env_int("MPI_LOCALRANKID", -1)));
  if (local < 0) local = node_rank;  // no launcher hint
  // CPU ranks on one node: each BLAS gets its share of the cores, not all of them
  // (N ranks x all cores threads run 2x slower on this VM). An explicit setting wins.
  if (node_size > 1 && !std::getenv("OPENBLAS_NUM_THREADS") && !std::getenv("OMP_NUM_THREADS"))
    openblas_set_num_threads(std::max(1, int(std::thread::hardware_concurrency()) / node_size));
  g_world.local_rank = local;
  if (g_world.size > 1 && g_world.rank != 0) quiet_worker();
  return g_world;
}

World& world() { return g_world; }

void finalize() {
  if (g_world.mpi && g_world.rank == 0) shutdown_workers();  // workers serving an op stream stop too
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Finalize();
}

void abort_all(const std::string& msg, int code) {
  // A worker gives rank 0 half a second to abort first: an error every rank
  // hits (a bad option, the head count) is then printed once, by rank 0; an
  // error of this rank alone is still printed, half a second later.
  if (g_world.mpi && g_world.size > 1 && g_world.rank != 0) usleep(500000);
  if (g_world.size > 1)
    dprintf(g_err_fd, "triforce: error (rank %d): %s\n", g_world.rank, msg.c_str());
  else
    dprintf(g_err_fd, "triforce: error: %s\n", msg.c_str());
  if (g_world.mpi && g_world.size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  finalize();
  std::exit(code);
}

}  // namespace tf::parallel
