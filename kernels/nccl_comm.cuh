// NcclCommunicator: the CUDA Communicator. One per rank, on the rank's GPU,
// bootstrapped from a unique id that rank 0 makes and MPI broadcasts
// (dist/nccl_bootstrap.h). Collectives are enqueued on the given stream and
// take f32, f16 or bf16 device tensors. H200 nodes need NCCL_NVLS_ENABLE=0
// (NVLink SHARP multicast is not available to these jobs).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <vector>

#include "parallel/comm.h"

namespace tf::cuda {

// This rank's GPU: local_rank % (visible devices), made current; returns it.
int select_device(int local_rank);

using NcclId = std::array<char, NCCL_UNIQUE_ID_BYTES>;
NcclId nccl_unique_id();  // rank 0 only

class NcclCommunicator : public parallel::Communicator {
 public:
  // Collective over `size` ranks: every rank calls it with the same id. A null
  // stream means compute_stream(), so the model's collectives are ordered with
  // its kernels and can be captured in its CUDA graphs.
  NcclCommunicator(int rank, int size, const NcclId& id, cudaStream_t stream);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  cudaStream_t stream() const { return stream_; }
  void allreduce_sum(Tensor& t) override;
  // Exact-size blocks by grouped send/recv into a device staging buffer, then
  // one strided copy per block (cudaMemcpy2DAsync) into the row-major result.
  // local and full may also be host tensors (the forward's f32 logits): they
  // are staged through the device, and a host result is complete on return.
  void allgather_columns(const Tensor& local, Tensor& full, const std::vector<int64_t>& cols) override;

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
};

}  // namespace tf::cuda
