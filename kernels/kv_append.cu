#include "common.cuh"
#include "kv_append.cuh"

namespace tf::cuda {
namespace {

template <class T>
__global__ void kv_append_kernel(T* __restrict__ kc, T* __restrict__ vc, const T* __restrict__ kn,
                                 const T* __restrict__ vn, const int32_t* __restrict__ length, int64_t kvh,
                                 int64_t hd, int64_t cap) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int64_t slot = int64_t(*length) + t;
  if (slot < 0 || slot >= cap) return;
  const T* ks = kn + (t * kvh + h) * hd;
  const T* vs = vn + (t * kvh + h) * hd;
  T* kd = kc + (h * cap + slot) * hd;
  T* vd = vc + (h * cap + slot) * hd;
  for (int64_t j = threadIdx.x; j < hd; j += blockDim.x) {
    kd[j] = ks[j];
    vd[j] = vs[j];
  }
}

__global__ void advance_kernel(int32_t* length, int32_t n) { *length += n; }

}  // namespace

void kv_append(const KvAppendParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.k_cache && p.v_cache && p.k_new && p.v_new && p.length && p.kv_heads > 0 && p.head_dim > 0,
           "cuda::kv_append: bad params");
  dim3 grid(unsigned(p.n), unsigned(p.kv_heads));
  const int threads = p.head_dim >= 128 ? 128 : 64;
  TF_DISPATCH_HALF(p.dtype, T, {
    kv_append_kernel<T><<<grid, threads, 0, stream>>>(static_cast<T*>(p.k_cache), static_cast<T*>(p.v_cache),
                                                      static_cast<const T*>(p.k_new),
                                                      static_cast<const T*>(p.v_new), p.length, p.kv_heads,
                                                      p.head_dim, p.capacity);
  });
  CUDA_CHECK_LAUNCH();
  if (p.advance) {
    advance_kernel<<<1, 1, 0, stream>>>(p.length, int32_t(p.n));
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tf::cuda
