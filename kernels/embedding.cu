#include "common.cuh"
#include "embedding.cuh"
#include "pdl.cuh"

namespace tf::cuda {
namespace {

template <class T>
__global__ void embedding_kernel(const T* __restrict__ table, const int32_t* __restrict__ tokens, T* __restrict__ out,
                                 int64_t vocab, int64_t d) {
  pdl_wait();  // kernels/pdl.cuh: nothing above reads activations or writes
  pdl_trigger();
  const int64_t i = blockIdx.x;
  const int32_t id = tokens[i];
  T* o = out + i * d;
  if (id < 0 || id >= vocab) {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) store_f32(o + j, NAN);
    return;
  }
  const T* r = table + int64_t(id) * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = r[j];
}

}  // namespace

void embedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.table && p.tokens && p.out && p.d > 0, "cuda::embedding: bad params");
  TF_DISPATCH_HALF(p.dtype, T, {
    launch_step(embedding_kernel<T>, dim3(unsigned(p.n)), dim3(256), 0, stream, static_cast<const T*>(p.table),
                p.tokens, static_cast<T*>(p.out), p.vocab, p.d);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
