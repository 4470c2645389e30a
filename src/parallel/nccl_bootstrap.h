// The NCCL communicator of this rank (CUDA builds only): picks the GPU from
// the local rank (local_rank % devices), then rank 0's ncclUniqueId goes to
// every rank by MPI_Bcast and each rank joins with ncclCommInitRank. The
// model's collectives then run on `stream`. World size 1 works too.
#pragma once
#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include <memory>

#include "parallel/comm.h"

namespace tf::parallel {

std::unique_ptr<Communicator> make_nccl_communicator(cudaStream_t stream);

}  // namespace tf::parallel
#endif
