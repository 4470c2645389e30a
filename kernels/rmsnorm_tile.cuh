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

// r_out (if any) = round(x + r_in); out = w * s / sqrt(mean(s^2) + eps) where s
// is x (r_in null), the fp32 sum, or the stored sum (rounded_sum). Every thread
// of the block calls it (block_sum syncs the block); out may be shared memory.
template <class T, class LD>
__device__ __forceinline__ void rmsnorm_vec8_row(const T* r_in, T* r_out, const T* x, const T* w, T* out,
                                                 int64_t d, float eps, bool rounded_sum, int tid, int nthreads) {
  const int64_t nvec = d / 8;
  float v[kRmsMaxVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kRmsMaxVecs; ++k) {
    const int64_t j = tid + int64_t(k) * nthreads;
    if (tid >= nthreads || j >= nvec) continue;
    {
      const uint4 raw = LD::ld16(x + 8 * j);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[k][i] = to_f32(e[i]);
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
        v[k][i] += r8[i];
        pe[i] = from_f32<T>(v[k][i]);
        if (rounded_sum) v[k][i] = to_f32(pe[i]);  // what a later plain rmsnorm would load
      }
      if (r_out) *reinterpret_cast<uint4*>(r_out + 8 * j) = packed;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) ss = __fmaf_rn(v[k][i], v[k][i], ss);
  }
  ss = block_sum(ss);
  const float r = rsqrtf(ss / float(d) + eps);
#pragma unroll
  for (int k = 0; k < kRmsMaxVecs; ++k) {
    const int64_t j = tid + int64_t(k) * nthreads;
    if (tid >= nthreads || j >= nvec) continue;
    float w8[8];
    load8_f32(w + 8 * j, w8);
    uint4 packed;
    T* pe = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int i = 0; i < 8; ++i) pe[i] = from_f32<T>(w8[i] * (v[k][i] * r));
    *reinterpret_cast<uint4*>(out + 8 * j) = packed;
  }
}

}  // namespace tf::cuda
#endif
