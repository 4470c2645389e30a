// One row of the vectorised RMSNorm (optionally after a residual add), shared
// by the standalone kernel (rmsnorm.cu, one block per row) and the persistent
// step kernel (persistent_step.cu, a block per row or every block recomputing
// a row in a GEMV prologue). The reduction order is fixed by nthreads, the
// thread count the standalone launcher picks for the row length
// (rmsnorm_vec8_threads): thread t < nthreads owns the 16-byte vectors t,
// t + nthreads, ...; threads at or past nthreads (a persistent block is wider)
// hold a zero partial sum, and block_sum's warp partials of such threads are
// exact zeros in the lanes the narrower block filled with zeros too, so the
// sum of squares, and with it every output bit, is the standalone kernel's.
#pragma once
#include <algorithm>
#include <cstdint>

namespace tf::cuda {

constexpr int kRmsMaxVecs = 2;  // 16-byte vectors a thread holds

// The block size of the vectorised kernel for rows of d elements (d % 8 == 0).
inline int rmsnorm_vec8_threads(int64_t d) {
  const int64_t nvec = d / 8;
  const int64_t per = (nvec + 1023) / 1024;  // vectors a thread
  return int(std::max<int64_t>(32, ((nvec + per - 1) / per + 31) / 32 * 32));
}

}  // namespace tf::cuda

#if defined(__CUDACC__)
#include "common.cuh"
#include "tile_load.cuh"

namespace tf::cuda {

// The per-vector pieces, shared by the one-row and the many-row forms below.
// Vector j of a row: s = x (+ r_in, stored rounded to r_out; the stored sum
// when rounded_sum), returned in v.
template <class T, class LD>
__device__ __forceinline__ void rms_load_vec(const T* r_in, T* r_out, const T* x, int64_t j, bool rounded_sum,
                                             float (&v)[8]) {
  {
    const uint4 raw = LD::ld16(x + 8 * j);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = to_f32(e[i]);
  }
  if (r_in) {
    float r8[8];
    const uint4 raw = LD::ld16(r_in + 8 * j);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) r8[i] = to_f32(e[i]);
    uint4 packed;
    T* pe = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[i] += r8[i];
      pe[i] = from_f32<T>(v[i]);
      if (rounded_sum) v[i] = to_f32(pe[i]);  // what a later plain rmsnorm would load
    }
    if (r_out) *reinterpret_cast<uint4*>(r_out + 8 * j) = packed;
  }
}
// ss += v . v, explicitly fused, so the fused and plain paths agree whatever the compiler contracts.
__device__ __forceinline__ float rms_ss8(const float (&v)[8], float ss) {
#pragma unroll
  for (int i = 0; i < 8; ++i) ss = __fmaf_rn(v[i], v[i], ss);
  return ss;
}
__device__ __forceinline__ float rms_scale(float ss, int64_t d, float eps) { return rsqrtf(ss / float(d) + eps); }
template <class T>
__device__ __forceinline__ void rms_store_vec_raw(const uint4& wraw, T* out, int64_t j, const float (&v)[8],
                                                  float r) {
  const T* we = reinterpret_cast<const T*>(&wraw);
  uint4 packed;
  T* pe = reinterpret_cast<T*>(&packed);
#pragma unroll
  for (int i = 0; i < 8; ++i) pe[i] = from_f32<T>(to_f32(we[i]) * (v[i] * r));
  *reinterpret_cast<uint4*>(out + 8 * j) = packed;
}
template <class T>
__device__ __forceinline__ void rms_store_vec(const T* w, T* out, int64_t j, const float (&v)[8], float r) {
  float w8[8];
  load8_f32(w + 8 * j, w8);
  uint4 packed;
  T* pe = reinterpret_cast<T*>(&packed);
#pragma unroll
  for (int i = 0; i < 8; ++i) pe[i] = from_f32<T>(w8[i] * (v[i] * r));
  *reinterpret_cast<uint4*>(out + 8 * j) = packed;
}

// Thread tid's weight vectors of a row (those rmsnorm_vec8_row multiplies by),
// loaded on their own so that the standalone kernel can issue them before its
// PDL wait: no kernel of a step writes a weight, and the load's latency then
// overlaps the previous kernel's tail instead of following the block reduction.
template <class T>
__device__ __forceinline__ void rms_load_row_weights(const T* w, int64_t d, int tid, int nthreads,
                                                     uint4 (&wraw)[kRmsMaxVecs]) {
  const int64_t nvec = d / 8;
#pragma unroll
  for (int k = 0; k < kRmsMaxVecs; ++k) {
    const int64_t j = tid + int64_t(k) * nthreads;
    wraw[k] = tid < nthreads && j < nvec ? *reinterpret_cast<const uint4*>(w + 8 * j) : make_uint4(0, 0, 0, 0);
  }
}

// One row on one block. r_out (if any) = round(x + r_in); out = w * s /
// sqrt(mean(s^2) + eps) where s is x (r_in null), the fp32 sum, or the stored
// sum (rounded_sum); w's vectors as rms_load_row_weights loaded them. Every
// thread of the block calls it (block_sum syncs the block); out may be shared
// memory.
template <class T, class LD>
__device__ __forceinline__ void rmsnorm_vec8_row(const T* r_in, T* r_out, const T* x,
                                                 const uint4 (&wraw)[kRmsMaxVecs], T* out, int64_t d, float eps,
                                                 bool rounded_sum, int tid, int nthreads) {
  const int64_t nvec = d / 8;
  float v[kRmsMaxVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kRmsMaxVecs; ++k) {
    const int64_t j = tid + int64_t(k) * nthreads;
    if (tid >= nthreads || j >= nvec) continue;
    rms_load_vec<T, LD>(r_in, r_out, x, j, rounded_sum, v[k]);
    ss = rms_ss8(v[k], ss);
  }
  ss = block_sum(ss);
  const float r = rms_scale(ss, d, eps);
#pragma unroll
  for (int k = 0; k < kRmsMaxVecs; ++k) {
    const int64_t j = tid + int64_t(k) * nthreads;
    if (tid >= nthreads || j >= nvec) continue;
    rms_store_vec_raw(wraw[k], out, j, v[k], r);
  }
}

// Rows 0..m-1 at once on a block of nwarps warps, each row as the one-row form
// on an nthreads-thread block computes it. block_sum is a warp_sum inside
// each warp of the row's block, then, in one warp, lanes < nthreads / 32
// holding those sums (the rest zero) and a warp_sum: here the row's "warps"
// are spread over the real ones, their sums meet in `red` ([m][nthreads / 32]
// floats of shared memory) and one warp per row adds them the same way, so
// every sum, and every output bit, is the one-row form's, whatever the real
// block's width (a 4096-wide row's 512-thread norm on a 256-thread GEMM block). The vectors are loaded twice
// (for the sums, then for the output), so r_out must not alias r_in or x.
// Rows: x_of(i), r_in_of(i) (nullptr: no residual), r_out_of(i) (nullptr: not
// stored), out_of(i). Syncs the block (all threads call it); nthreads <= 1024.
template <class T, class LD, class XOf, class RInOf, class ROutOf, class OutOf>
__device__ __forceinline__ void rmsnorm_vec8_rows(int m, XOf x_of, RInOf r_in_of, ROutOf r_out_of, OutOf out_of,
                                                  const T* w, int64_t d, float eps, bool rounded_sum, int nthreads,
                                                  float* red, float* scale) {
  const int64_t nvec = d / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int nw = nthreads / 32;  // the one-row block's warps
  for (int vw = warp; vw < m * nw; vw += nwarps) {
    const int i = vw / nw, t = (vw % nw) * 32 + lane;
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kRmsMaxVecs; ++k) {
      const int64_t j = t + int64_t(k) * nthreads;
      if (j >= nvec) continue;
      float v[8];
      rms_load_vec<T, LD>(r_in_of(i), r_out_of(i), x_of(i), j, rounded_sum, v);
      ss = rms_ss8(v, ss);
    }
    ss = warp_sum(ss);
    if (lane == 0) red[i * nw + vw % nw] = ss;
  }
  __syncthreads();
  for (int i = warp; i < m; i += nwarps) {
    const float ss = warp_sum(lane < nw ? red[i * nw + lane] : 0.0f);
    if (lane == 0) scale[i] = rms_scale(ss, d, eps);
  }
  __syncthreads();
  for (int vw = warp; vw < m * nw; vw += nwarps) {
    const int i = vw / nw, t = (vw % nw) * 32 + lane;
#pragma unroll
    for (int k = 0; k < kRmsMaxVecs; ++k) {
      const int64_t j = t + int64_t(k) * nthreads;
      if (j >= nvec) continue;
      float v[8];
      rms_load_vec<T, LD>(r_in_of(i), nullptr, x_of(i), j, rounded_sum, v);
      rms_store_vec(w, out_of(i), j, v, scale[i]);
    }
  }
  __syncthreads();
}

}  // namespace tf::cuda
#endif
