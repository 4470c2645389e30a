// How a tile function (kernels/*_tile.cuh) reads activations. A standalone
// kernel reads data that no other block of the same launch writes, so any load
// is right (LoadPlain: what the kernel always did). The persistent step kernel
// (persistent_step.cu) reads, after a grid barrier, what other blocks wrote
// earlier in the same launch: those loads must bypass the SM's L1 and the
// non-coherent read-only path (LoadCoherent, ld.global.cg). Both return the same
// bits, so a tile's result never depends on the policy.
#pragma once
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace tf::cuda {

struct LoadPlain {
  template <class T> __device__ __forceinline__ static T ld(const T* p) { return *p; }
  // 8 consecutive 16-bit elements (16 bytes).
  __device__ __forceinline__ static uint4 ld16(const void* p) { return *reinterpret_cast<const uint4*>(p); }
};

struct LoadCoherent {
  __device__ __forceinline__ static float ld(const float* p) { return __ldcg(p); }
  __device__ __forceinline__ static int32_t ld(const int32_t* p) { return __ldcg(p); }
  __device__ __forceinline__ static __half ld(const __half* p) {
    const unsigned short b = __ldcg(reinterpret_cast<const unsigned short*>(p));
    return *reinterpret_cast<const __half*>(&b);
  }
  __device__ __forceinline__ static __nv_bfloat16 ld(const __nv_bfloat16* p) {
    const unsigned short b = __ldcg(reinterpret_cast<const unsigned short*>(p));
    return *reinterpret_cast<const __nv_bfloat16*>(&b);
  }
  __device__ __forceinline__ static uint4 ld16(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }
};

}  // namespace tf::cuda
#endif
