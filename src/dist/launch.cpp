#include "dist/launch.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace tf::dist {
namespace {
World g_world;

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_ID"})
    if (std::getenv(v)) return true;
  return false;
}

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : dflt;
}
}  // namespace

World& init(int* argc, char*** argv) {
  if (!launched_by_mpi()) return g_world;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  g_world.mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size);
  int local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", -1));
  if (local < 0) {  // no launcher hint: ranks that share a node share memory
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
  }
  g_world.local_rank = local;
  return g_world;
}

World& world() { return g_world; }

void finalize() {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Finalize();
}

void abort_all(const std::string& msg, int code) {
  if (g_world.size > 1)
    std::fprintf(stderr, "triforce: error (rank %d): %s\n", g_world.rank, msg.c_str());
  else
    std::fprintf(stderr, "triforce: error: %s\n", msg.c_str());
  std::fflush(stderr);
  if (g_world.mpi && g_world.size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  finalize();
  std::exit(code);
}

}  // namespace tf::dist
