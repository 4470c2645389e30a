// NcclCommunicator on the GPU, bootstrapped as the CLI will (local rank ->
// device, rank 0's unique id broadcast by MPI). One process: a 1-rank NCCL
// communicator. Under mpirun -np N (one GPU per rank, NCCL_NVLS_ENABLE=0):
// allreduce sums and uneven allgather_columns in f32, f16 and bf16 (and of host f32 tensors).
#include <gtest/gtest.h>

#include "skip_exit_code.h"

#include "parallel/launch.h"
#include "require_device.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/half.h"
#include "parallel/nccl_bootstrap.h"

using namespace tf;

namespace {
float to_f(DType t, uint16_t h) { return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h); }
uint16_t from_f(DType t, float f) { return t == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f); }

// Host values -> device tensor of dtype t, and back.
Tensor upload(const std::vector<float>& v, DType t, std::vector<int64_t> shape) {
  Tensor d;
  d.dtype = t;
  d.device = Device::CUDA;
  d.shape = std::move(shape);
  cudaMalloc(&d.data, d.bytes());
  d.owner = std::shared_ptr<void>(d.data, [](void* p) { cudaFree(p); });
  std::vector<uint8_t> h(d.bytes());
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32) reinterpret_cast<float*>(h.data())[i] = v[i];
    else reinterpret_cast<uint16_t*>(h.data())[i] = from_f(t, v[i]);
  }
  cudaMemcpy(d.data, h.data(), d.bytes(), cudaMemcpyHostToDevice);
  return d;
}
std::vector<float> download(const Tensor& d) {
  std::vector<uint8_t> h(d.bytes());
  cudaMemcpy(h.data(), d.data, d.bytes(), cudaMemcpyDeviceToHost);
  std::vector<float> v(static_cast<size_t>(d.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = d.dtype == DType::F32 ? reinterpret_cast<float*>(h.data())[i] : to_f(d.dtype, reinterpret_cast<uint16_t*>(h.data())[i]);
  return v;
}
}  // namespace

TEST(NcclCommunicator, AllreduceAndAllgatherEveryDtype) {
  REQUIRE_DEVICE();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto comm = parallel::make_nccl_communicator(s);
  const int n = comm->size(), r = comm->rank();
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<float> v(12);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(r + 1) * float(i % 5);  // small integers: exact in bf16
    Tensor x = upload(v, t, {3, 4});
    comm->allreduce_sum(x);
    cudaStreamSynchronize(s);
    const auto got = download(x);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], float(n * (n + 1) / 2) * float(i % 5)) << dtype_name(t);
    std::vector<int64_t> cols;
    int64_t total = 0, c0 = 0;
    for (int k = 0; k < n; ++k) {
      cols.push_back(k + 1);
      if (k < r) c0 += k + 1;
      total += k + 1;
    }
    std::vector<float> lv;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < cols[size_t(r)]; ++j) lv.push_back(float(10 * i + c0 + j));
    Tensor local = upload(lv, t, {2, cols[size_t(r)]});
    Tensor full = upload(std::vector<float>(size_t(2 * total), -1.0f), t, {2, total});
    comm->allgather_columns(local, full, cols);
    cudaStreamSynchronize(s);
    const auto g = download(full);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < total; ++j) ASSERT_EQ(g[size_t(i * total + j)], float(10 * i + j)) << dtype_name(t);
  }
  // Host f32 tensors (the forward's logits) are staged through the device.
  std::vector<int64_t> cols;
  for (int k = 0; k < n; ++k) cols.push_back(3 + k);
  Tensor hl = Tensor::cpu(DType::F32, {2, cols[size_t(r)]}), hf = Tensor::cpu(DType::F32, {2, 3 * n + n * (n - 1) / 2});
  int64_t c0 = 0;
  for (int k = 0; k < r; ++k) c0 += cols[size_t(k)];
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < cols[size_t(r)]; ++j) hl.ptr<float>()[i * cols[size_t(r)] + j] = float(1000 * i + c0 + j);
  comm->allgather_columns(hl, hf, cols);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < hf.dim(1); ++j) ASSERT_EQ(hf.ptr<float>()[i * hf.dim(1) + j], float(1000 * i + j));
  Tensor host = Tensor::cpu(DType::F32, {4});
  EXPECT_THROW(comm->allreduce_sum(host), tf::Error);  // the host tensor is named in a one-line error
  comm.reset();
  cudaStreamDestroy(s);
}
#else
TEST(NcclCommunicator, AllreduceAndAllgatherEveryDtype) { REQUIRE_DEVICE(); }
#endif

int main(int argc, char** argv) {
  tf::parallel::init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = tf::testing::skip_exit_code(RUN_ALL_TESTS());
  tf::parallel::finalize();
  return rc;
}
