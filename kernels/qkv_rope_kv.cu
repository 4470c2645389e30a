#include "common.cuh"
#include "pdl.cuh"
#include "qkv_rope_kv.cuh"
#include "rope.cuh"

namespace tf::cuda {
namespace {

// grid (n, ceil(heads / blockDim.y)) over heads = q heads, k heads, v heads;
// threads over half a head (each owns the pair (j, j + half)).
template <class T>
__global__ void qkv_rope_kv_kernel(const T* __restrict__ qkv, T* __restrict__ q_out, T* __restrict__ kc,
                                   T* __restrict__ vc, const float* __restrict__ cos, const float* __restrict__ sin,
                                   const int32_t* __restrict__ rows, const int32_t* __restrict__ slots, int64_t qh,
                                   int64_t kvh, int64_t half, int64_t cap, int64_t table_rows) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t t = blockIdx.x;
  const int64_t h = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t hd = 2 * half;
  if (h >= qh + 2 * kvh) return;
  const T* src = qkv + (t * (qh + 2 * kvh) + h) * hd;
  T* dst;
  if (h < qh) {
    dst = q_out + (t * qh + h) * hd;
  } else {
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= cap) return;  // the host checked the claim; never write outside the layer
    dst = h < qh + kvh ? kc + ((h - qh) * cap + slot) * hd : vc + ((h - qh - kvh) * cap + slot) * hd;
  }
  if (h >= qh + kvh) {  // v: a copy
    for (int64_t j = threadIdx.x; j < hd; j += blockDim.x) dst[j] = src[j];
    return;
  }
  const int32_t p = rows[t];
  const bool ok = p >= 0 && p < table_rows;
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    float c = NAN, s = NAN;
    if (ok) {
      c = cos[int64_t(p) * half + j];
      s = sin[int64_t(p) * half + j];
    }
    float o1, o2;
    rope_rotate(load_f32(src + j), load_f32(src + j + half), c, s, o1, o2);
    store_f32(dst + j, o1);
    store_f32(dst + j + half, o2);
  }
}

}  // namespace

void qkv_rope_kv(const QkvRopeKvParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.qkv && p.q_out && p.k_cache && p.v_cache && p.cos && p.sin && p.rows && p.slots && p.q_heads > 0 &&
               p.kv_heads > 0 && p.head_dim > 0 && p.head_dim % 2 == 0 && p.capacity > 0,
           "cuda::qkv_rope_kv: bad params (head_dim " << p.head_dim << " even, heads " << p.q_heads << "/"
                                                      << p.kv_heads << ")");
  const int64_t half = p.head_dim / 2;
  const int tx = half >= 64 ? 64 : 32;
  const int ty = 256 / tx;
  const int64_t heads = p.q_heads + 2 * p.kv_heads;
  const dim3 grid(unsigned(p.n), unsigned((heads + ty - 1) / ty)), block(tx, ty);
  TF_DISPATCH_HALF(p.dtype, T, {
    launch_pdl(qkv_rope_kv_kernel<T>, grid, block, 0, stream, static_cast<const T*>(p.qkv), static_cast<T*>(p.q_out),
               static_cast<T*>(p.k_cache), static_cast<T*>(p.v_cache), p.cos, p.sin, p.rows, p.slots, p.q_heads,
               p.kv_heads, half, p.capacity, p.table_rows);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
