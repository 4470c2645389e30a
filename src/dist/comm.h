// Communicator: the one collective a tensor-parallel forward needs. The model
// calls allreduce_sum after each row-parallel linear (o and down); a CPU build
// implements it with MPI_Allreduce, a CUDA build with NCCL. nullptr (or size
// 1) means an unsharded model.
#pragma once
#include "core/tensor.h"

namespace tf::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: every rank's t becomes the elementwise sum over ranks. t lives
  // on the communicator's device (f32 on CPU; f16/bf16/f32 on CUDA).
  virtual void allreduce_sum(Tensor& t) = 0;
};

}  // namespace tf::dist
