#include "common.cuh"
#include "rope.cuh"

namespace tf::cuda {
namespace {

template <class T>
__global__ void rope_kernel(T* __restrict__ q, T* __restrict__ k, const float* __restrict__ cos,
                            const float* __restrict__ sin, const int32_t* __restrict__ pos, int64_t qh,
                            int64_t kh, int64_t half, int64_t rows) {
  // grid.x = token, grid.y covers heads (q heads first, then k heads); threads over half.
  const int64_t t = blockIdx.x;
  const int64_t h = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  if (h >= qh + kh) return;
  T* v = h < qh ? q + (t * qh + h) * 2 * half : k + (t * kh + (h - qh)) * 2 * half;
  const int32_t p = pos[t];
  const bool ok = p >= 0 && p < rows;
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    float c = NAN, s = NAN;
    if (ok) {
      c = cos[int64_t(p) * half + j];
      s = sin[int64_t(p) * half + j];
    }
    const float x1 = load_f32(v + j), x2 = load_f32(v + j + half);
    store_f32(v + j, x1 * c - x2 * s);
    store_f32(v + j + half, x2 * c + x1 * s);
  }
}

}  // namespace

void rope(const RopeParams& p, cudaStream_t stream) {
  TF_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0 && p.q && p.cos && p.sin && p.positions,
           "cuda::rope: bad params head_dim=" << p.head_dim);
  const int64_t kh = p.k ? p.k_heads : 0;
  if (p.n == 0 || p.q_heads + kh == 0) return;
  const int64_t half = p.head_dim / 2;
  const int tx = half >= 64 ? 64 : 32;
  const int ty = 256 / tx;
  dim3 block(tx, ty);
  dim3 grid(unsigned(p.n), unsigned((p.q_heads + kh + ty - 1) / ty));
  TF_DISPATCH_HALF(p.dtype, T, {
    rope_kernel<T><<<grid, block, 0, stream>>>(static_cast<T*>(p.q), static_cast<T*>(p.k), p.cos, p.sin,
                                               p.positions, p.q_heads, kh, half, p.table_rows);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
