#include "parallel/host_staged_comm.h"

#include "core/device.h"

namespace tf::parallel {

void HostStagedCommunicator::allreduce_sum(Tensor& t) {
  if (t.device == Device::CPU) return mpi_.allreduce_sum(t);
  Tensor h = to_host_f32(t);
  mpi_.allreduce_sum(h);
  Tensor back = to_device_as(h, t.device, t.dtype);
  copy_tensor(t, back);
}

void HostStagedCommunicator::allgather_columns(const Tensor& local, Tensor& full, const std::vector<int64_t>& cols) {
  TF_CHECK(local.device == Device::CPU && full.device == Device::CPU,
           "HostStagedCommunicator::allgather_columns: expected host f32 logits");
  mpi_.allgather_columns(local, full, cols);
}

}  // namespace tf::parallel
