#include "parallel/nccl_bootstrap.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <mpi.h>

#include "parallel/launch.h"
#include "nccl_comm.cuh"

namespace tf::parallel {

std::unique_ptr<Communicator> make_nccl_communicator(cudaStream_t stream) {
  const World& w = world();
  cuda::select_device(w.local_rank);
  cuda::NcclId id{};
  if (w.rank == 0) id = cuda::nccl_unique_id();
  if (w.mpi && w.size > 1) MPI_Bcast(id.data(), int(id.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  return std::make_unique<cuda::NcclCommunicator>(w.rank, w.size, id, stream);
}

}  // namespace tf::parallel
#endif
