#include <algorithm>

#include "common.cuh"
#include "pdl.cuh"
#include "rmsnorm.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxPerThread = 16;  // scalar kernel: d <= 1024 * 16
constexpr int kMaxVecs = 2;        // vector kernel: d <= 1024 * 8 * 2

// One block per row; every choice (threads, vectors a thread) depends on d
// alone, so a row's bits never depend on how many rows the call has.
// The weight row is read before pdl_wait (no kernel writes it), so its load
// overlaps the previous kernel's tail.
template <class T, int VPT>
__global__ void rmsnorm_vec_kernel(T* __restrict__ residual, const T* __restrict__ x, const T* __restrict__ w,
                                   T* __restrict__ out, int64_t d, float eps, bool round_residual) {
  const int64_t row = blockIdx.x;
  const int nv = int(d / 8);
  uint4 wv[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int idx = threadIdx.x + k * blockDim.x;
    if (idx < nv) wv[k] = __ldg(reinterpret_cast<const uint4*>(w) + idx);
  }
  pdl_wait();
  pdl_launch_dependents();
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * d);
  uint4* rr = residual ? reinterpret_cast<uint4*>(residual + row * d) : nullptr;
  float v[VPT][8];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int idx = threadIdx.x + k * blockDim.x;
    if (idx >= nv) continue;
    uint4 raw = xr[idx];
    const T* xe = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[k][e] = to_f32(xe[e]);
    if (rr) {
      uint4 rraw = rr[idx];
      T* re = reinterpret_cast<T*>(&rraw);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float a = v[k][e] + to_f32(re[e]);
        re[e] = from_f32<T>(a);
        v[k][e] = round_residual ? to_f32(re[e]) : a;
      }
      rr[idx] = rraw;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[k][e] * v[k][e];
  }
  ss = block_sum(ss);
  const float r = rsqrtf(ss / float(d) + eps);
  uint4* orow = reinterpret_cast<uint4*>(out + row * d);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int idx = threadIdx.x + k * blockDim.x;
    if (idx >= nv) continue;
    const T* we = reinterpret_cast<const T*>(&wv[k]);
    uint4 o;
    T* oe = reinterpret_cast<T*>(&o);
#pragma unroll
    for (int e = 0; e < 8; ++e) oe[e] = from_f32<T>(to_f32(we[e]) * (v[k][e] * r));
    orow[idx] = o;
  }
}

// Any d up to 16384 and unaligned rows: element by element.
template <class T>
__global__ void rmsnorm_kernel(T* __restrict__ residual, const T* __restrict__ x, const T* __restrict__ w,
                               T* __restrict__ out, int64_t d, float eps, bool round_residual) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  const T* xr = x + row * d;
  T* rr = residual ? residual + row * d : nullptr;
  float v[kMaxPerThread];
  float ss = 0.0f;
  int k = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x, ++k) {
    float a = load_f32(xr + i);
    if (rr) {
      a += load_f32(rr + i);
      const T s = from_f32<T>(a);
      rr[i] = s;
      if (round_residual) a = to_f32(s);
    }
    v[k] = a;
    ss += a * a;
  }
  ss = block_sum(ss);
  const float r = rsqrtf(ss / float(d) + eps);
  T* orow = out + row * d;
  k = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x, ++k) store_f32(orow + i, load_f32(w + i) * (v[k] * r));
}

}  // namespace

void rmsnorm(const RmsNormParams& p, cudaStream_t stream) {
  TF_CHECK(p.n >= 0 && p.d > 0 && p.d <= 1024 * kMaxPerThread, "cuda::rmsnorm: bad shape n=" << p.n << " d=" << p.d);
  if (p.n == 0) return;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.weight) |
                         reinterpret_cast<uintptr_t>(p.out) | reinterpret_cast<uintptr_t>(p.residual);
  const bool vec = p.d % 8 == 0 && p.d <= 1024 * 8 * kMaxVecs && (addr & 15) == 0;
  TF_DISPATCH_HALF(p.dtype, T, {
    T* res = static_cast<T*>(p.residual);
    const T* x = static_cast<const T*>(p.x);
    const T* w = static_cast<const T*>(p.weight);
    T* out = static_cast<T*>(p.out);
    if (vec) {
      const int64_t nv = p.d / 8;
      const int vpt = nv <= 1024 ? 1 : 2;
      const int threads = int(std::max<int64_t>(32, ((nv + vpt - 1) / vpt + 31) / 32 * 32));
      if (vpt == 1)
        launch_pdl(rmsnorm_vec_kernel<T, 1>, dim3(unsigned(p.n)), dim3(threads), 0, stream, res, x, w, out, p.d,
                   p.eps, p.round_residual);
      else
        launch_pdl(rmsnorm_vec_kernel<T, 2>, dim3(unsigned(p.n)), dim3(threads), 0, stream, res, x, w, out, p.d,
                   p.eps, p.round_residual);
    } else {
      int64_t want = ((p.d + 3) / 4 + 31) / 32 * 32;  // ~4 elements a thread
      const int threads = int(want < 128 ? 128 : (want > 1024 ? 1024 : want));
      launch_pdl(rmsnorm_kernel<T>, dim3(unsigned(p.n)), dim3(threads), 0, stream, res, x, w, out, p.d, p.eps,
                 p.round_residual);
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
