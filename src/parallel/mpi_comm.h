// MpiCommunicator: the CPU Communicator, f32 host tensors over MPI. It works on
// its own duplicate of the given communicator so the model's collectives never
// interleave with the step protocol's broadcasts.
#pragma once
#include <mpi.h>

#include "parallel/comm.h"

namespace tf::parallel {

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(Tensor& t) override;
  void allgather_columns(const Tensor& local, Tensor& full, const std::vector<int64_t>& cols) override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<float> staging_;  // the gathered blocks, rank-major, before they are interleaved
};

}  // namespace tf::parallel
