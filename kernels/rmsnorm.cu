#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "pdl.cuh"
#include "rmsnorm.cuh"
#include "rmsnorm_tile.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxPerThread = 16;  // d <= 1024 * 16

// Every v[] index below is a compile-time constant after unrolling (a run-time
// index would put the array in local memory: that made the old kernel 5.7 us
// per call on the H200 for 3 rows of 4096).
template <class T>
__global__ void rmsnorm_kernel(T* __restrict__ residual, const T* __restrict__ x, const T* __restrict__ w,
                               T* __restrict__ out, int64_t d, float eps, bool rounded_sum) {
  pdl_wait();  // kernels/pdl.cuh: nothing above reads activations or writes
  pdl_trigger();
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

// Rows of a multiple of 8 elements: the row tile of rmsnorm_tile.cuh (shared
// with the persistent step kernel), one block per row, blockDim.x =
// rmsnorm_vec8_threads(d); the same code for every row count, so a row's bits
// never depend on the other rows (batch invariance).
template <class T>
__global__ void rmsnorm_vec8_kernel(T* __restrict__ residual, const T* __restrict__ x, const T* __restrict__ w,
                                    T* __restrict__ out, int64_t d, float eps, bool rounded_sum) {
  uint4 wraw[kRmsMaxVecs];
  rms_load_row_weights(w, d, int(threadIdx.x), int(blockDim.x), wraw);  // a weight: no kernel of a step writes it
  pdl_wait();  // kernels/pdl.cuh: nothing above reads activations or writes
  pdl_trigger();
  const int64_t row = blockIdx.x;
  T* rr = residual ? residual + row * d : nullptr;
  rmsnorm_vec8_row<T, LoadPlain>(rr, rr, x + row * d, wraw, out + row * d, d, eps, rounded_sum, int(threadIdx.x),
                                 int(blockDim.x));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void rmsnorm(const RmsNormParams& p, cudaStream_t stream) {
  TF_CHECK(p.n >= 0 && p.d > 0 && p.d <= 1024 * kMaxPerThread, "cuda::rmsnorm: bad shape n=" << p.n << " d=" << p.d);
  if (p.n == 0) return;
  const bool vec8 = p.d % 8 == 0 && p.d / 8 <= 1024 * kRmsMaxVecs && aligned16(p.x) && aligned16(p.weight) &&
                    aligned16(p.out) && (!p.residual || aligned16(p.residual));
  if (vec8) {
    const int threads = rmsnorm_vec8_threads(p.d);
    TF_DISPATCH_HALF(p.dtype, T, {
      launch_step(rmsnorm_vec8_kernel<T>, dim3(unsigned(p.n)), dim3(threads), 0, stream,
                  static_cast<T*>(p.residual), static_cast<const T*>(p.x), static_cast<const T*>(p.weight),
                  static_cast<T*>(p.out), p.d, p.eps, p.rounded_sum);
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  int64_t want = ((p.d + 3) / 4 + 31) / 32 * 32;  // ~4 elements a thread
  const int threads = int(want < 128 ? 128 : (want > 1024 ? 1024 : want));
  TF_DISPATCH_HALF(p.dtype, T, {
    launch_step(rmsnorm_kernel<T>, dim3(unsigned(p.n)), dim3(threads), 0, stream, static_cast<T*>(p.residual),
                static_cast<const T*>(p.x), static_cast<const T*>(p.weight), static_cast<T*>(p.out), p.d, p.eps,
                p.rounded_sum);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
