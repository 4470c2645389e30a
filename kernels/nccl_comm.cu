#include "nccl_comm.cuh"

#include <string>

#include "common.cuh"
#include "stream.cuh"

namespace tf::cuda {

namespace {

void nccl_check_at(ncclResult_t r, const char* file, int line, const char* expr) {
  if (r != ncclSuccess) ::tf::fail_at(file, line, std::string("NCCL error ") + ncclGetErrorString(r) + " in " + expr);
}
#define NCCL_CHECK(expr) nccl_check_at((expr), __FILE__, __LINE__, #expr)

ncclDataType_t nccl_type(DType t, const char* what) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    default: break;
  }
  TF_FAIL("NcclCommunicator::" << what << ": expected an f32, f16 or bf16 tensor, got " << dtype_name(t));
}

// Not core's shape_str: this library links after triforce_core, so it uses only header code from there.
std::string dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void check_device(const Tensor& t, const char* what) {
  TF_CHECK(t.device == Device::CUDA, "NcclCommunicator::" << what << ": the tensor is on the host, expected the GPU");
}

}  // namespace

int select_device(int local_rank) {
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  TF_CHECK(n > 0, "no CUDA device visible to local rank " << local_rank);
  const int dev = local_rank % n;
  CUDA_CHECK(cudaSetDevice(dev));
  return dev;
}

NcclId nccl_unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  NcclId out;
  static_assert(sizeof(id.internal) == std::tuple_size<NcclId>::value, "ncclUniqueId size");
  std::copy(id.internal, id.internal + NCCL_UNIQUE_ID_BYTES, out.begin());
  return out;
}

NcclCommunicator::NcclCommunicator(int rank, int size, const NcclId& id, cudaStream_t stream)
    : stream_(stream ? stream : compute_stream()), rank_(rank), size_(size) {
  ncclUniqueId uid;
  std::copy(id.begin(), id.end(), uid.internal);
  NCCL_CHECK(ncclCommInitRank(&comm_, size, uid, rank));
}

NcclCommunicator::~NcclCommunicator() {
  if (staging_) cudaFree(staging_);
  if (comm_) ncclCommDestroy(comm_);
}

void NcclCommunicator::allreduce_sum(Tensor& t) {
  check_device(t, "allreduce_sum");
  const ncclDataType_t type = nccl_type(t.dtype, "allreduce_sum");
  if (size_ == 1) return;
  NCCL_CHECK(ncclAllReduce(t.data, t.data, size_t(t.numel()), type, ncclSum, comm_, stream_));
}

void NcclCommunicator::allgather_columns(const Tensor& local, Tensor& full, const std::vector<int64_t>& cols) {
  // Host tensors are staged through the device (the CPU-side logits of the model's forward).
  const ncclDataType_t type = nccl_type(local.dtype, "allgather_columns");
  TF_CHECK(full.dtype == local.dtype, "allgather_columns: local is " << dtype_name(local.dtype) << ", full is "
                                                                      << dtype_name(full.dtype));
  TF_CHECK(int(cols.size()) == size_ && local.shape.size() == 2 && local.shape[1] == cols[size_t(rank_)],
           "allgather_columns: rank " << rank_ << " holds " << dims(local.shape) << ", expected "
                                      << (cols.size() == size_t(size_) ? cols[size_t(rank_)] : -1) << " columns");
  const int64_t rows = local.shape[0];
  int64_t total = 0;
  for (int64_t c : cols) total += c;
  TF_CHECK(full.shape == (std::vector<int64_t>{rows, total}),
           "allgather_columns: output is " << dims(full.shape) << ", expected [" << rows << ", " << total << "]");
  const size_t elt = dtype_size(local.dtype);
  const bool local_dev = local.device == Device::CUDA, full_dev = full.device == Device::CUDA;
  std::vector<size_t> displ(static_cast<size_t>(size_));  // element offset of rank r's block in staging
  size_t n = 0;
  for (int r = 0; r < size_; ++r) {
    displ[size_t(r)] = n;
    n += size_t(rows * cols[size_t(r)]);
  }
  if (staging_bytes_ < n * elt) {
    if (staging_) CUDA_CHECK(cudaFree(staging_));
    staging_ = nullptr;
    staging_bytes_ = 0;
    CUDA_CHECK(cudaMalloc(&staging_, n * elt));
    staging_bytes_ = n * elt;
  }
  char* st = static_cast<char*>(staging_);
  char* mine = st + displ[size_t(rank_)] * elt;
  CUDA_CHECK(cudaMemcpyAsync(mine, local.data, local.bytes(),
                             local_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, stream_));
  if (size_ > 1) {
    NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      NCCL_CHECK(ncclSend(mine, size_t(local.numel()), type, p, comm_, stream_));
      NCCL_CHECK(ncclRecv(st + displ[size_t(p)] * elt, size_t(rows * cols[size_t(p)]), type, p, comm_, stream_));
    }
    NCCL_CHECK(ncclGroupEnd());
  }
  // Blocks are rank-major [r][rows][cols[r]]; the result is row-major [rows][total].
  int64_t c0 = 0;
  for (int r = 0; r < size_; ++r) {
    const size_t w = size_t(cols[size_t(r)]) * elt;
    if (w > 0 && rows > 0)
      CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(full.data) + size_t(c0) * elt, size_t(total) * elt,
                                   st + displ[size_t(r)] * elt, w, w, size_t(rows),
                                   full_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost, stream_));
    c0 += cols[size_t(r)];
  }
  if (!full_dev) CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller reads the host result next
}

}  // namespace tf::cuda
