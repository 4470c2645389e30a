#include <algorithm>

#include "common.cuh"
#include "embedding.cuh"
#include "pdl.cuh"

namespace tf::cuda {
namespace {

// V = uint4 (8 halves a load) when d % 8 == 0 and the rows are 16-byte
// aligned, else T; d counts V elements.
template <class T, class V>
__global__ void embedding_kernel(const V* __restrict__ table, const int32_t* __restrict__ tokens, V* __restrict__ out,
                                 int64_t vocab, int64_t d) {
  pdl_wait();  // the token ids come from the step's upload (or an earlier kernel)
  pdl_launch_dependents();
  const int64_t i = blockIdx.x;
  const int32_t id = tokens[i];
  V* o = out + i * d;
  if (id < 0 || id >= vocab) {
    T* oe = reinterpret_cast<T*>(o);
    const int64_t per = int64_t(sizeof(V) / sizeof(T));
    for (int64_t j = threadIdx.x; j < d * per; j += blockDim.x) store_f32(oe + j, NAN);
    return;
  }
  const V* r = table + int64_t(id) * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = r[j];
}

}  // namespace

void embedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.table && p.tokens && p.out && p.d > 0, "cuda::embedding: bad params");
  const bool vec = p.d % 8 == 0 && ((reinterpret_cast<uintptr_t>(p.table) | reinterpret_cast<uintptr_t>(p.out)) & 15) == 0;
  TF_DISPATCH_HALF(p.dtype, T, {
    if (vec) {
      const int64_t nv = p.d / 8;
      const int threads = int(std::min<int64_t>(256, (nv + 31) / 32 * 32));
      launch_pdl(embedding_kernel<T, uint4>, dim3(unsigned(p.n)), dim3(threads), 0, stream,
                 static_cast<const uint4*>(p.table), p.tokens, static_cast<uint4*>(p.out), p.vocab, nv);
    } else {
      launch_pdl(embedding_kernel<T, T>, dim3(unsigned(p.n)), dim3(256), 0, stream, static_cast<const T*>(p.table),
                 p.tokens, static_cast<T*>(p.out), p.vocab, p.d);
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
