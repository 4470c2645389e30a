// Communicator: the collectives a tensor-parallel forward needs. The model
// calls allreduce_sum after each row-parallel linear (o and down) and, with a
// vocab-parallel lm_head, allgather_columns on the logit slices. A CPU build
// implements it with MPI (MpiCommunicator), a CUDA build with NCCL
// (NcclCommunicator). nullptr (or size 1) means an unsharded model.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tf::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: every rank's t becomes the elementwise sum over ranks. t lives
  // on the communicator's device (f32 on CPU; f16/bf16/f32 on CUDA).
  virtual void allreduce_sum(Tensor& t) = 0;
  // Rank r contributes local [rows, cols[r]] (row-major); every rank receives
  // full [rows, sum(cols)] with rank r's block at columns sum(cols[0..r)).
  // Every rank gets the same bits, so decisions taken from `full` agree.
  virtual void allgather_columns(const Tensor& local, Tensor& full, const std::vector<int64_t>& cols) = 0;
  // Whether allreduce_sum only queues device work on the compute stream, so a
  // CUDA graph can capture it. Ranks decide alike, so no rank captures alone.
  virtual bool graph_capturable() const { return true; }
};

}  // namespace tf::parallel
