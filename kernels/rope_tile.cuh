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

// Token t's rows of the cos/sin tables; false (the rotation gives NaN, as
// for every caller) when rows[t] is outside [0, table_rows).
__device__ __forceinline__ bool rope_table_row(const RopeQkvParams& p, int64_t t, const float*& c_row,
                                               const float*& s_row) {
  const int64_t half = p.head_dim / 2;
  const int32_t r = p.rows[t];
  const bool ok = r >= 0 && r < p.table_rows;
  c_row = p.cos + (ok ? int64_t(r) * half : 0);
  s_row = p.sin + (ok ? int64_t(r) * half : 0);
  return ok;
}

// Where head h (q heads, then k heads, then v heads) of token t goes: kind 0
// q, 1 k, 2 v; hk the head within its kind; dst null where a k/v slot is
// outside [0, slot_limit) (never written).
template <class T> struct RopeQkvDest {
  int kind;
  int64_t hk;
  T* dst;
};
template <class T>
__device__ __forceinline__ RopeQkvDest<T> rope_qkv_dest(const RopeQkvParams& p, int64_t t, int64_t h) {
  const int64_t qh = p.q_heads, kh = p.kv_heads, D = p.head_dim;
  if (h < qh) return {0, h, static_cast<T*>(p.q_out) + (t * qh + h) * D};
  const int64_t slot = p.slots ? int64_t(p.slots[t]) : t;
  const int kind = h < qh + kh ? 1 : 2;
  const int64_t hk = kind == 1 ? h - qh : h - qh - kh;
  if (slot < 0 || slot >= p.slot_limit) return {kind, hk, nullptr};  // never write outside the destination
  T* out = static_cast<T*>(kind == 1 ? p.k_out : p.v_out);
  return {kind, hk, out + hk * p.out_head_stride + slot * p.out_slot_stride};
}

// Token t, head h of the q heads, then the k heads, then the v heads (when p.v).
template <class T, class LD>
__device__ __forceinline__ void rope_qkv_row(const RopeQkvParams& p, int64_t t, int64_t h, int lane0, int lanes) {
  const int64_t kh = p.kv_heads, D = p.head_dim, half = D / 2;
  if (h >= p.q_heads + kh + (p.v ? kh : 0)) return;
  const float *c_row, *s_row;
  const bool ok = rope_table_row(p, t, c_row, s_row);
  const RopeQkvDest<T> d = rope_qkv_dest<T>(p, t, h);
  if (!d.dst) return;
  if (d.kind == 0) {
    const T* src = static_cast<const T*>(p.q) + t * p.q_ld + d.hk * D;
    rope_rotate_row<T, LD>(src, d.dst, c_row, s_row, ok, half, lane0, lanes);
    return;
  }
  if (d.kind == 1) {
    const T* src = static_cast<const T*>(p.k) + t * p.k_ld + d.hk * D;
    rope_rotate_row<T, LD>(src, d.dst, c_row, s_row, ok, half, lane0, lanes);
    return;
  }
  const T* src = static_cast<const T*>(p.v) + t * p.v_ld + d.hk * D;
  for (int64_t j = lane0; j < half; j += lanes) {
    d.dst[j] = LD::ld(src + j);
    d.dst[j + half] = LD::ld(src + j + half);
  }
}

// Pair j of token t, head h, from values (x1, x2) = (x[j], x[j + half]) as a
// GEMM rounds them to T (the fused q/k/v GEMM's epilogue, gemm_skinny.cu):
// what rope_qkv_row stores for that pair when it reads those values.
template <class T>
__device__ __forceinline__ void rope_qkv_pair(const RopeQkvParams& p, int64_t t, int64_t h, int64_t j, T x1, T x2) {
  const int64_t half = p.head_dim / 2;
  const float *c_row, *s_row;
  const bool ok = rope_table_row(p, t, c_row, s_row);
  const RopeQkvDest<T> d = rope_qkv_dest<T>(p, t, h);
  if (!d.dst) return;
  if (d.kind == 2) {
    d.dst[j] = x1;
    d.dst[j + half] = x2;
    return;
  }
  const float c = ok ? c_row[j] : NAN, s = ok ? s_row[j] : NAN;
  rope_pair(to_f32(x1), to_f32(x2), c, s, d.dst[j], d.dst[j + half]);
}

}  // namespace tf::cuda
#endif
