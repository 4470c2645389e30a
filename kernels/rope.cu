#include "common.cuh"
#include "rope.cuh"

namespace tf::cuda {
namespace {

// One (token, head) row: dst = rope(src). Explicitly rounded products and sums
// (no contraction into FMAs), so every caller's bits are the same.
template <class T>
__device__ __forceinline__ void rotate_row(const T* src, T* dst, const float* c_row, const float* s_row, bool ok,
                                           int64_t half) {
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    const float c = ok ? c_row[j] : NAN, s = ok ? s_row[j] : NAN;
    const float x1 = load_f32(src + j), x2 = load_f32(src + j + half);
    store_f32(dst + j, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
    store_f32(dst + j + half, __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
  }
}

// grid.x = token, grid.y covers the heads: q heads, then k heads, then v heads
// (when v is given); threadIdx.x runs over half the head, threadIdx.y over heads.
// No __restrict__: q_out, k_out and v_out may be their inputs (in place).
template <class T>
__global__ void rope_qkv_kernel(RopeQkvParams p) {
  const int64_t t = blockIdx.x;
  const int64_t h = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t qh = p.q_heads, kh = p.kv_heads, D = p.head_dim, half = D / 2;
  if (h >= qh + kh + (p.v ? kh : 0)) return;
  const int32_t r = p.rows[t];
  const bool ok = r >= 0 && r < p.table_rows;
  const float* c_row = p.cos + (ok ? int64_t(r) * half : 0);
  const float* s_row = p.sin + (ok ? int64_t(r) * half : 0);
  if (h < qh) {
    const T* src = static_cast<const T*>(p.q) + t * p.q_ld + h * D;
    rotate_row(src, static_cast<T*>(p.q_out) + (t * qh + h) * D, c_row, s_row, ok, half);
    return;
  }
  const int64_t slot = p.slots ? int64_t(p.slots[t]) : t;
  if (slot < 0 || slot >= p.slot_limit) return;  // never write outside the destination
  const int64_t hk = h - qh < kh ? h - qh : h - qh - kh;
  const int64_t dst_at = hk * p.out_head_stride + slot * p.out_slot_stride;
  if (h < qh + kh) {
    const T* src = static_cast<const T*>(p.k) + t * p.k_ld + hk * D;
    rotate_row(src, static_cast<T*>(p.k_out) + dst_at, c_row, s_row, ok, half);
    return;
  }
  const T* src = static_cast<const T*>(p.v) + t * p.v_ld + hk * D;
  T* dst = static_cast<T*>(p.v_out) + dst_at;
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    dst[j] = src[j];
    dst[j + half] = src[j + half];
  }
}

}  // namespace

void rope_qkv(const RopeQkvParams& p, cudaStream_t stream) {
  TF_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0 && p.q && p.q_out && p.cos && p.sin && p.rows,
           "cuda::rope_qkv: bad params head_dim=" << p.head_dim);
  TF_CHECK(p.kv_heads == 0 || (p.k && p.k_out && (!p.v || p.v_out)), "cuda::rope_qkv: k/v without a destination");
  TF_CHECK(is_half_dtype(p.dtype), "cuda::rope_qkv: dtype must be f16/bf16");
  const int64_t heads = p.q_heads + p.kv_heads + (p.v ? p.kv_heads : 0);
  if (p.n == 0 || heads == 0) return;
  const int64_t half = p.head_dim / 2;
  const int tx = half >= 64 ? 64 : 32;
  const int ty = 256 / tx;
  dim3 block(tx, ty);
  dim3 grid(unsigned(p.n), unsigned((heads + ty - 1) / ty));
  TF_DISPATCH_HALF(p.dtype, T, { rope_qkv_kernel<T><<<grid, block, 0, stream>>>(p); });
  CUDA_CHECK_LAUNCH();
}

void rope(const RopeParams& p, cudaStream_t stream) {
  TF_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0 && p.q && p.cos && p.sin && p.positions,
           "cuda::rope: bad params head_dim=" << p.head_dim);
  const int64_t kh = p.k ? p.k_heads : 0;
  RopeQkvParams r;
  r.q = r.q_out = p.q, r.q_ld = p.q_heads * p.head_dim;
  r.k = r.k_out = p.k, r.k_ld = kh * p.head_dim;
  r.out_head_stride = p.head_dim, r.out_slot_stride = kh * p.head_dim, r.slot_limit = p.n;
  r.cos = p.cos, r.sin = p.sin, r.rows = p.positions, r.table_rows = p.table_rows;
  r.n = p.n, r.q_heads = p.q_heads, r.kv_heads = kh, r.head_dim = p.head_dim, r.dtype = p.dtype;
  rope_qkv(r, stream);
}

}  // namespace tf::cuda
