#include "common.cuh"
#include "gemm_skinny.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;       // output rows per block (one per warp)
constexpr int kChunk = 512;     // x columns staged per pass (a multiple of 256: the order per lane stays the same)

template <class T>
__device__ __forceinline__ void load8(const T* p, float* f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = to_f32(h[e]);
}

// grid.x = ceil(out / kWarps); block = kWarps warps; NR >= n rows held in registers.
template <class T, class Y, int NR>
__global__ void __launch_bounds__(kWarps * 32) skinny_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                              Y* __restrict__ y, int n, int64_t in, int64_t out) {
  __shared__ __align__(16) T xs[NR * kChunk];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j = int64_t(blockIdx.x) * kWarps + warp;
  const T* wr = w + (j < out ? j : 0) * in;
  float acc[NR];
#pragma unroll
  for (int i = 0; i < NR; ++i) acc[i] = 0.0f;
  for (int64_t k0 = 0; k0 < in; k0 += kChunk) {
    const int kc = int(in - k0 < kChunk ? in - k0 : kChunk);
    __syncthreads();
    for (int idx = threadIdx.x; idx < n * (kc / 8); idx += blockDim.x) {
      const int i = idx / (kc / 8), c = (idx % (kc / 8)) * 8;
      *reinterpret_cast<uint4*>(xs + i * kChunk + c) = *reinterpret_cast<const uint4*>(x + i * in + k0 + c);
    }
    __syncthreads();
    if (j < out) {
      for (int c = lane * 8; c < kc; c += 256) {
        float wf[8];
        load8(wr + k0 + c, wf);
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          if (i < n) {
            float xf[8];
            load8(xs + i * kChunk + c, xf);
            float s = acc[i];
#pragma unroll
            for (int e = 0; e < 8; ++e) s = fmaf(xf[e], wf[e], s);
            acc[i] = s;
          }
        }
      }
    }
  }
  if (j >= out) return;
#pragma unroll
  for (int i = 0; i < NR; ++i) {
    if (i < n) {
      float s = acc[i];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) y[int64_t(i) * out + j] = from_f32<Y>(s);
    }
  }
}

template <class T, class Y>
void launch(const SkinnyGemmParams& p, cudaStream_t stream) {
  const unsigned blocks = unsigned((p.out + kWarps - 1) / kWarps);
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  Y* y = static_cast<Y*>(p.y);
  const int n = int(p.n);
  // The register count only bounds the loop; each row's arithmetic is the same in every variant.
  if (n <= 1) skinny_kernel<T, Y, 1><<<blocks, kWarps * 32, 0, stream>>>(x, w, y, n, p.in, p.out);
  else if (n <= 4) skinny_kernel<T, Y, 4><<<blocks, kWarps * 32, 0, stream>>>(x, w, y, n, p.in, p.out);
  else if (n <= 8) skinny_kernel<T, Y, 8><<<blocks, kWarps * 32, 0, stream>>>(x, w, y, n, p.in, p.out);
  else if (n <= 16) skinny_kernel<T, Y, 16><<<blocks, kWarps * 32, 0, stream>>>(x, w, y, n, p.in, p.out);
  else skinny_kernel<T, Y, 32><<<blocks, kWarps * 32, 0, stream>>>(x, w, y, n, p.in, p.out);
}

}  // namespace

void gemm_skinny(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.out == 0) return;
  TF_CHECK(p.x && p.w && p.y && p.n <= kSkinnyGemmMaxRows && p.in > 0 && p.in % 8 == 0,
           "cuda::gemm_skinny: bad params (n " << p.n << " <= 32, in " << p.in << " a multiple of 8)");
  TF_CHECK(((reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.w)) & 15) == 0,
           "cuda::gemm_skinny: x and W must be 16-byte aligned");
  TF_CHECK(p.y_dtype == p.dtype || p.y_dtype == DType::F32, "cuda::gemm_skinny: y must be the input dtype or f32");
  if (p.y_dtype == DType::F32) {
    TF_DISPATCH_HALF(p.dtype, T, { launch<T, float>(p, stream); });
  } else {
    TF_DISPATCH_HALF(p.dtype, T, { launch<T, T>(p, stream); });
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
