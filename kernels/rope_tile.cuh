// One (token, head) row of rope_qkv (rope.cuh), shared by the standalone
// kernel (rope.cu) and the persistent step kernel (persistent_step.cu): q
// rotated into q_out, k rotated and v copied to their destination slot. Every
// element is computed on its own (explicitly rounded products and sums, no FMA
// contraction), so which thread computes it changes nothing.
#pragma once
#if defined(__CUDACC__)
#include "common.cuh"
#include "rope.cuh"
#include "tile_load.cuh"

namespace tf::cuda {

// The rotation of one pair (x1, x2) = (x[j], x[j + half]) by (c, s): every
// caller's arithmetic, rounded to T once.
template <class T>
__device__ __forceinline__ void rope_pair(float x1, float x2, float c, float s, T& y1, T& y2) {
  y1 = from_f32<T>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
  y2 = from_f32<T>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
}

// dst = rope(src) over the row's half-pairs j = lane0, lane0 + lanes, ...
template <class T, class LD>
__device__ __forceinline__ void rope_rotate_row(const T* src, T* dst, const float* c_row, const float* s_row, bool ok,
                                                int64_t half, int lane0, int lanes) {
  for (int64_t j = lane0; j < half; j += lanes) {
    const float c = ok ? c_row[j] : NAN, s = ok ? s_row[j] : NAN;
    rope_pair(to_f32(LD::ld(src + j)), to_f32(LD::ld(src + j + half)), c, s, dst[j], dst[j + half]);
  }
}

// Token t, head h of the q heads, then the k heads, then the v heads (when p.v).
template <class T, class LD>
__device__ __forceinline__ void rope_qkv_row(const RopeQkvParams& p, int64_t t, int64_t h, int lane0, int lanes) {
  const int64_t qh = p.q_heads, kh = p.kv_heads, D = p.head_dim, half = D / 2;
  if (h >= qh + kh + (p.v ? kh : 0)) return;
  const int32_t r = p.rows[t];
  const bool ok = r >= 0 && r < p.table_rows;
  const float* c_row = p.cos + (ok ? int64_t(r) * half : 0);
  const float* s_row = p.sin + (ok ? int64_t(r) * half : 0);
  if (h < qh) {
    const T* src = static_cast<const T*>(p.q) + t * p.q_ld + h * D;
    rope_rotate_row<T, LD>(src, static_cast<T*>(p.q_out) + (t * qh + h) * D, c_row, s_row, ok, half, lane0, lanes);
    return;
  }
  const int64_t slot = p.slots ? int64_t(p.slots[t]) : t;
  if (slot < 0 || slot >= p.slot_limit) return;  // never write outside the destination
  const int64_t hk = h - qh < kh ? h - qh : h - qh - kh;
  const int64_t dst_at = hk * p.out_head_stride + slot * p.out_slot_stride;
  if (h < qh + kh) {
    const T* src = static_cast<const T*>(p.k) + t * p.k_ld + hk * D;
    rope_rotate_row<T, LD>(src, static_cast<T*>(p.k_out) + dst_at, c_row, s_row, ok, half, lane0, lanes);
    return;
  }
  const T* src = static_cast<const T*>(p.v) + t * p.v_ld + hk * D;
  T* dst = static_cast<T*>(p.v_out) + dst_at;
  for (int64_t j = lane0; j < half; j += lanes) {
    dst[j] = LD::ld(src + j);
    dst[j + half] = LD::ld(src + j + half);
  }
}

}  // namespace tf::cuda
#endif
