// HostStagedCommunicator: the model's collectives for CUDA ranks that share
// one GPU. NCCL refuses two ranks on one device ("Duplicate GPU detected"), so
// this stages each allreduce through the host: device tensor -> host f32 ->
// MPI_Allreduce -> back in the tensor's dtype. It is a correctness path for
// testing tensor parallelism on a single GPU, not a fast one; ranks with a GPU
// each use NCCL.
#pragma once
#include <mpi.h>

#include "parallel/mpi_comm.h"

namespace tf::parallel {

class HostStagedCommunicator : public Communicator {
 public:
  explicit HostStagedCommunicator(MPI_Comm parent = MPI_COMM_WORLD) : mpi_(parent) {}
  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  void allreduce_sum(Tensor& t) override;
  void allgather_columns(const Tensor& local, Tensor& full, const std::vector<int64_t>& cols) override;
  // Host copies and MPI calls between kernels: a graph replay would skip the MPI.
  bool graph_capturable() const override { return false; }

 private:
  MpiCommunicator mpi_;
};

}  // namespace tf::parallel
