#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "rmsnorm.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxPerThread = 16;  // d <= 1024 * 16

// Every v[] index below is a compile-time constant after unrolling (a run-time
// index would put the array in local memory: that made the old kernel 5.7 us
// per call on the H200 for 3 rows of 4096).
template <class T>
__global__ void rmsnorm_kernel(T* __restrict__ residual, const T* __restrict__ x, const T* __restrict__ w,
                               T* __restrict__ out, int64_t d, float eps, bool rounded_sum) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * d;
  T* rr = residual ? residual + row * d : nullptr;
  float v[kMaxPerThread];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxPerThread; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    v[k] = 0.0f;
    if (i < d) {
      float a = load_f32(xr + i);
      if (rr) {
        a += load_f32(rr + i);
        store_f32(rr + i, a);
        if (rounded_sum) a = to_f32(from_f32<T>(a));  // what a later plain rmsnorm would load
      }
      v[k] = a;
      ss = __fmaf_rn(a, a, ss);  // explicit, so the fused and plain paths agree whatever the compiler contracts
    }
  }
  ss = block_sum(ss);
  const float r = rsqrtf(ss / float(d) + eps);
  T* orow = out + row * d;
#pragma unroll
  for (int k = 0; k < kMaxPerThread; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    if (i < d) store_f32(orow + i, load_f32(w + i) * (v[k] * r));
  }
}

// Rows of a multiple of 8 elements: thread t owns the 16-byte vectors t, t + blockDim, ... (at most
// kMaxVecs), one load and one store each; the same code for every row count, so a row's bits never
// depend on the other rows (batch invariance).
constexpr int kMaxVecs = 2;
template <class T>
__global__ void rmsnorm_vec8_kernel(T* __restrict__ residual, const T* __restrict__ x, const T* __restrict__ w,
                                    T* __restrict__ out, int64_t d, float eps, bool rounded_sum) {
  const int64_t row = blockIdx.x, nvec = d / 8;
  const T* xr = x + row * d;
  T* rr = residual ? residual + row * d : nullptr;
  float v[kMaxVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxVecs; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    if (j >= nvec) continue;
    load8_f32(xr + 8 * j, v[k]);
    if (rr) {
      float r8[8];
      load8_f32(rr + 8 * j, r8);
      uint4 packed;
      T* pe = reinterpret_cast<T*>(&packed);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[k][e] += r8[e];
        pe[e] = from_f32<T>(v[k][e]);
        if (rounded_sum) v[k][e] = to_f32(pe[e]);  // what a later plain rmsnorm would load
      }
      *reinterpret_cast<uint4*>(rr + 8 * j) = packed;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss = __fmaf_rn(v[k][e], v[k][e], ss);
  }
  ss = block_sum(ss);
  const float r = rsqrtf(ss / float(d) + eps);
  T* orow = out + row * d;
#pragma unroll
  for (int k = 0; k < kMaxVecs; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    if (j >= nvec) continue;
    float w8[8];
    load8_f32(w + 8 * j, w8);
    uint4 packed;
    T* pe = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int e = 0; e < 8; ++e) pe[e] = from_f32<T>(w8[e] * (v[k][e] * r));
    *reinterpret_cast<uint4*>(orow + 8 * j) = packed;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void rmsnorm(const RmsNormParams& p, cudaStream_t stream) {
  TF_CHECK(p.n >= 0 && p.d > 0 && p.d <= 1024 * kMaxPerThread, "cuda::rmsnorm: bad shape n=" << p.n << " d=" << p.d);
  if (p.n == 0) return;
  const bool vec8 = p.d % 8 == 0 && p.d / 8 <= 1024 * kMaxVecs && aligned16(p.x) && aligned16(p.weight) &&
                    aligned16(p.out) && (!p.residual || aligned16(p.residual));
  if (vec8) {
    const int64_t nvec = p.d / 8;
    const int64_t per = (nvec + 1023) / 1024;  // vectors a thread
    const int threads = int(std::max<int64_t>(32, ((nvec + per - 1) / per + 31) / 32 * 32));
    TF_DISPATCH_HALF(p.dtype, T, {
      rmsnorm_vec8_kernel<T><<<unsigned(p.n), threads, 0, stream>>>(
          static_cast<T*>(p.residual), static_cast<const T*>(p.x), static_cast<const T*>(p.weight),
          static_cast<T*>(p.out), p.d, p.eps, p.rounded_sum);
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  int64_t want = ((p.d + 3) / 4 + 31) / 32 * 32;  // ~4 elements a thread
  const int threads = int(want < 128 ? 128 : (want > 1024 ? 1024 : want));
  TF_DISPATCH_HALF(p.dtype, T, {
    rmsnorm_kernel<T><<<unsigned(p.n), threads, 0, stream>>>(static_cast<T*>(p.residual),
                                                              static_cast<const T*>(p.x),
                                                              static_cast<const T*>(p.weight),
                                                              static_cast<T*>(p.out), p.d, p.eps,
                                                              p.rounded_sum);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
