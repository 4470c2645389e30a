#include "parallel/mpi_comm.h"

#include <algorithm>
#include <climits>

namespace tf::parallel {

namespace {
void check_host_f32(const char* what, const Tensor& t) {
  TF_CHECK(t.device == Device::CPU && t.dtype == DType::F32,
           "MpiCommunicator::" << what << ": expected an f32 host tensor, got " << dtype_name(t.dtype)
                               << (t.device == Device::CPU ? " on the host" : " on a GPU"));
  TF_CHECK(t.numel() <= INT_MAX, "MpiCommunicator::" << what << ": " << t.numel() << " elements exceed an MPI count");
}
}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm parent) {
  MPI_Comm_dup(parent, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::allreduce_sum(Tensor& t) {
  check_host_f32("allreduce_sum", t);
  if (size_ == 1) return;
  MPI_Allreduce(MPI_IN_PLACE, t.data, int(t.numel()), MPI_FLOAT, MPI_SUM, comm_);
}

void MpiCommunicator::allgather_columns(const Tensor& local, Tensor& full, const std::vector<int64_t>& cols) {
  check_host_f32("allgather_columns", local);
  check_host_f32("allgather_columns", full);
  TF_CHECK(int(cols.size()) == size_ && local.shape.size() == 2 && local.shape[1] == cols[size_t(rank_)],
           "allgather_columns: rank " << rank_ << " holds " << shape_str(local.shape) << ", expected "
                                      << (cols.size() == size_t(size_) ? cols[size_t(rank_)] : -1) << " columns");
  const int64_t rows = local.shape[0];
  int64_t total = 0;
  for (int64_t c : cols) total += c;
  TF_CHECK(full.shape == (std::vector<int64_t>{rows, total}),
           "allgather_columns: output is " << shape_str(full.shape) << ", expected [" << rows << ", " << total << "]");
  if (size_ == 1) {
    std::copy_n(local.ptr<float>(), local.numel(), full.ptr<float>());
    return;
  }
  std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
  int64_t off = 0;
  for (int r = 0; r < size_; ++r) {
    counts[size_t(r)] = int(rows * cols[size_t(r)]);
    displs[size_t(r)] = int(off);
    off += rows * cols[size_t(r)];
  }
  staging_.resize(size_t(rows * total));
  MPI_Allgatherv(local.data, int(local.numel()), MPI_FLOAT, staging_.data(), counts.data(), displs.data(), MPI_FLOAT,
                 comm_);
  // Blocks arrive rank-major [r][rows][cols[r]]; the result is row-major [rows][total].
  int64_t c0 = 0;
  for (int r = 0; r < size_; ++r) {
    const float* blk = staging_.data() + displs[size_t(r)];
    const int64_t w = cols[size_t(r)];
    for (int64_t i = 0; i < rows; ++i) std::copy_n(blk + i * w, w, full.ptr<float>() + i * total + c0);
    c0 += w;
  }
}

}  // namespace tf::parallel
