#include "parallel/gpu_comm.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/check.h"
#include "parallel/host_staged_comm.h"
#include "parallel/launch.h"
#include "parallel/nccl_bootstrap.h"
#include "stream.cuh"

namespace tf::parallel {

namespace {
const char* g_kind = "none";

int ranks_on_this_node() {
  if (!world().mpi) return 1;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}
}  // namespace

std::unique_ptr<Communicator> make_gpu_communicator() {
  const char* env = std::getenv("TRIFORCE_TP_COMM");
  const std::string want = env ? env : "";
  TF_CHECK(want.empty() || want == "nccl" || want == "host",
           "TRIFORCE_TP_COMM=" << want << ": expected nccl or host");
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  const int local = ranks_on_this_node();
  const bool shared = devices > 0 && local > devices;
  TF_CHECK(!(want == "nccl" && shared), "TRIFORCE_TP_COMM=nccl: " << local << " ranks share " << devices
                                                                  << " GPUs on this node, which NCCL refuses");
  if (want == "host" || shared) {
    cudaSetDevice(devices > 0 ? world().local_rank % devices : 0);
    if (world().rank == 0 && world().size > 1)
      std::fprintf(stderr, "triforce: %d ranks share %d GPU(s): tensor-parallel collectives are staged through the host (MPI), not NCCL\n",
                   local, devices);
    g_kind = "host-staged";
    return std::make_unique<HostStagedCommunicator>();
  }
  g_kind = "nccl";
  return make_nccl_communicator(cuda::compute_stream());
}

const char* gpu_communicator_kind() { return g_kind; }

}  // namespace tf::parallel
#endif
