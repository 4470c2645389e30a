// The communicator a CUDA rank's model uses (CUDA builds only): NCCL when
// every rank on the node has a GPU of its own; when ranks outnumber the node's
// GPUs (mpirun -np 2 on one GPU, which NCCL refuses) or TRIFORCE_TP_COMM=host
// asks for it, the host-staged MPI communicator. Picks this rank's GPU first.
#pragma once
#ifdef TRIFORCE_HAVE_CUDA
#include <memory>

#include "parallel/comm.h"

namespace tf::parallel {

std::unique_ptr<Communicator> make_gpu_communicator();
// "nccl" or "host-staged": what make_gpu_communicator chose (for --json and logs).
const char* gpu_communicator_kind();

}  // namespace tf::parallel
#endif
