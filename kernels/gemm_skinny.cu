#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "attention_mma.cuh"
#include "common.cuh"
#include "gemm_skinny.cuh"

namespace tf::cuda {
namespace {

// Weights are read exactly once per call: keep them out of L1 (where x lives)
// and ask L2 for the whole 256-byte line pair a warp is about to sweep.
// volatile keeps program order against the (volatile) mma asm: without it
// nvcc sinks each load next to its use and only 2-3 stay in flight per lane.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}
__device__ __forceinline__ uint4 ld_x(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

// ---- tensor cores ----
// grid.x = ceil(out / 16); KW warps per block; NT = ceil(n / 8) x tiles.
// Lane (g, t) = (lane / 4, lane % 4) loads columns c .. c+7 (c = k-block base
// + s * 32 + t * 8) of W rows j0+g and j0+g+8 and of x row 8q+g. Elements 0..3
// feed the first m16n8k16 (k slots 2t, 2t+1, 2t+8, 2t+9 of A and B alike),
// 4..7 the second: a fixed permutation of the columns inside each 32-column
// step, the same for every n, so no fragment shuffling is needed.
template <class T, class Y, int KW, int U, int NT>
__global__ void __launch_bounds__(KW * 32) skinny_mma_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                              Y* __restrict__ y, int n, int64_t in, int64_t out) {
  constexpr int kKb = U * 32;  // columns of one warp's k-block
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t j0 = int64_t(blockIdx.x) * 16;
  // Rows past `out` re-read the last row; their results are never stored.
  const T* wa = w + min(j0 + g, out - 1) * in;
  const T* wb = w + min(j0 + g + 8, out - 1) * in;
  // x rows past n re-read row n-1 (branch-free loads); their columns are never stored.
  const T* xr[NT];
#pragma unroll
  for (int q = 0; q < NT; ++q) xr[q] = x + int64_t(min(q * 8 + g, n - 1)) * in;
  float acc[NT][4];
#pragma unroll
  for (int q = 0; q < NT; ++q)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[q][r] = 0.0f;
  const int64_t nkb = (in + kKb - 1) / kKb, nfull = in / kKb;
  // Full k-blocks take unpredicated loads (so ptxas issues all 2U of them
  // before the first mma); the one partial k-block, always the last, masks.
  auto kblock = [&](int64_t kb, auto tail) {
    constexpr bool kTail = decltype(tail)::value;
    const int64_t c0 = kb * kKb + t * 8;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    uint4 a[U], b[U];
#pragma unroll
    for (int s = 0; s < U; ++s) {
      const int64_t c = c0 + s * 32;
      a[s] = !kTail || c < in ? ld_stream(wa + c) : zero;
      b[s] = !kTail || c < in ? ld_stream(wb + c) : zero;
    }
    __syncwarp();  // a scheduling fence: ptxas otherwise sinks the loads back next to their mmas
#pragma unroll
    for (int s = 0; s < U; ++s) {
      const int64_t c = c0 + s * 32;
#pragma unroll
      for (int q = 0; q < NT; ++q) {
        // Past the row end both operands are zero, so a NaN beyond x's row cannot leak in.
        const uint4 xv = !kTail || c < in ? ld_x(xr[q] + c) : zero;
        const uint32_t a0[4] = {a[s].x, b[s].x, a[s].y, b[s].y};
        const uint32_t a1[4] = {a[s].z, b[s].z, a[s].w, b[s].w};
        mma::mma16816<T>(acc[q], a0, xv.x, xv.y);
        mma::mma16816<T>(acc[q], a1, xv.z, xv.w);
      }
    }
  };
  int64_t kb = warp;
  for (; kb < nfull; kb += KW) kblock(kb, std::false_type{});
  if (kb < nkb) kblock(kb, std::true_type{});
  // Partial sums of the KW warps, added in warp order.
  __shared__ float part[KW > 1 ? KW - 1 : 1][NT * 4][32];
  if (KW > 1) {
    if (warp > 0)
#pragma unroll
      for (int q = 0; q < NT; ++q)
#pragma unroll
        for (int r = 0; r < 4; ++r) part[warp - 1][q * 4 + r][lane] = acc[q][r];
    __syncthreads();
    if (warp > 0) return;
#pragma unroll
    for (int q = 0; q < NT; ++q)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        for (int v = 0; v < KW - 1; ++v) acc[q][r] += part[v][q * 4 + r][lane];
  }
#pragma unroll
  for (int q = 0; q < NT; ++q)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = q * 8 + 2 * t + (r & 1);
      const int64_t j = j0 + g + (r >> 1) * 8;
      if (i < n && j < out) y[int64_t(i) * out + j] = from_f32<Y>(acc[q][r]);
    }
}

// ---- CUDA cores ----
constexpr int kSimtWarps = 4;  // split the row length
constexpr int kSimtRows = 2;   // output rows per block (each warp computes both)
constexpr int kSimtU = 4;      // 256-column steps per k-block

// grid.x = ceil(out / kSimtRows). Lane l owns 8-column groups l, l + 32, ...
// of each 256-column step; warp w owns k-blocks w, w + kSimtWarps, ...
template <class T, class Y, int NR>
__global__ void __launch_bounds__(kSimtWarps * 32) skinny_simt_kernel(const T* __restrict__ x,
                                                                       const T* __restrict__ w,
                                                                       Y* __restrict__ y, int n, int64_t in,
                                                                       int64_t out) {
  constexpr int kKb = kSimtU * 256;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j0 = int64_t(blockIdx.x) * kSimtRows;
  const T* wr[kSimtRows];
#pragma unroll
  for (int r = 0; r < kSimtRows; ++r) wr[r] = w + min(j0 + r, out - 1) * in;
  float acc[NR][kSimtRows];
#pragma unroll
  for (int i = 0; i < NR; ++i)
#pragma unroll
    for (int r = 0; r < kSimtRows; ++r) acc[i][r] = 0.0f;
  const int64_t nkb = (in + kKb - 1) / kKb;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t kb = warp; kb < nkb; kb += kSimtWarps) {
    const int64_t c0 = kb * kKb + lane * 8;
    uint4 wv[kSimtU][kSimtRows];
#pragma unroll
    for (int s = 0; s < kSimtU; ++s)
#pragma unroll
      for (int r = 0; r < kSimtRows; ++r) {
        const int64_t c = c0 + s * 256;
        wv[s][r] = c < in ? ld_stream(wr[r] + c) : zero;
      }
    __syncwarp();  // keeps the 8 loads ahead of the FMAs (see skinny_mma_kernel)
#pragma unroll
    for (int s = 0; s < kSimtU; ++s) {
      const int64_t c = c0 + s * 256;
      if (c >= in) break;
      float wf[kSimtRows][8];
#pragma unroll
      for (int r = 0; r < kSimtRows; ++r) {
        const T* h = reinterpret_cast<const T*>(&wv[s][r]);
#pragma unroll
        for (int e = 0; e < 8; ++e) wf[r][e] = to_f32(h[e]);
      }
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        if (i < n) {
          const uint4 xv = ld_x(x + int64_t(i) * in + c);
          const T* h = reinterpret_cast<const T*>(&xv);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const float xf = to_f32(h[e]);
#pragma unroll
            for (int r = 0; r < kSimtRows; ++r) acc[i][r] = fmaf(xf, wf[r][e], acc[i][r]);
          }
        }
      }
    }
  }
  __shared__ float part[kSimtWarps][NR * kSimtRows];
#pragma unroll
  for (int i = 0; i < NR; ++i)
#pragma unroll
    for (int r = 0; r < kSimtRows; ++r) {
      const float s = warp_sum(acc[i][r]);  // a fixed xor tree
      if (lane == 0) part[warp][i * kSimtRows + r] = s;
    }
  __syncthreads();
  if (warp > 0) return;
  for (int idx = lane; idx < n * kSimtRows; idx += 32) {
    float s = part[0][idx];
#pragma unroll
    for (int v = 1; v < kSimtWarps; ++v) s += part[v][idx];
    const int i = idx / kSimtRows;
    const int64_t j = j0 + idx % kSimtRows;
    if (j < out) y[int64_t(i) * out + j] = from_f32<Y>(s);
  }
}

// ---- legacy: one warp per output row, x staged in shared memory ----
constexpr int kLegacyWarps = 8;
constexpr int kLegacyChunk = 512;

template <class T, class Y, int NR>
__global__ void __launch_bounds__(kLegacyWarps * 32) skinny_legacy_kernel(const T* __restrict__ x,
                                                                           const T* __restrict__ w,
                                                                           Y* __restrict__ y, int n, int64_t in,
                                                                           int64_t out) {
  __shared__ __align__(16) T xs[NR * kLegacyChunk];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j = int64_t(blockIdx.x) * kLegacyWarps + warp;
  const T* wr = w + (j < out ? j : 0) * in;
  float acc[NR];
#pragma unroll
  for (int i = 0; i < NR; ++i) acc[i] = 0.0f;
  for (int64_t k0 = 0; k0 < in; k0 += kLegacyChunk) {
    const int kc = int(in - k0 < kLegacyChunk ? in - k0 : kLegacyChunk);
    __syncthreads();
    for (int idx = threadIdx.x; idx < n * (kc / 8); idx += blockDim.x) {
      const int i = idx / (kc / 8), c = (idx % (kc / 8)) * 8;
      *reinterpret_cast<uint4*>(xs + i * kLegacyChunk + c) = *reinterpret_cast<const uint4*>(x + i * in + k0 + c);
    }
    __syncthreads();
    if (j < out) {
      for (int c = lane * 8; c < kc; c += 256) {
        float wf[8];
        load8_f32(wr + k0 + c, wf);
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          if (i < n) {
            float xf[8];
            load8_f32(xs + i * kLegacyChunk + c, xf);
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
      const float s = warp_sum(acc[i]);
      if (lane == 0) y[int64_t(i) * out + j] = from_f32<Y>(s);
    }
  }
}

unsigned blocks_for(int64_t out, int64_t rows_per_block) { return unsigned((out + rows_per_block - 1) / rows_per_block); }

template <class T, class Y, int KW, int U>
void launch_mma(const T* x, const T* w, Y* y, int n, int64_t in, int64_t out, cudaStream_t st) {
  const unsigned b = blocks_for(out, 16);
  // The tile count only bounds the loop; a row's arithmetic is the same in each.
  if (n <= 8) skinny_mma_kernel<T, Y, KW, U, 1><<<b, KW * 32, 0, st>>>(x, w, y, n, in, out);
  else if (n <= 16) skinny_mma_kernel<T, Y, KW, U, 2><<<b, KW * 32, 0, st>>>(x, w, y, n, in, out);
  else skinny_mma_kernel<T, Y, KW, U, 4><<<b, KW * 32, 0, st>>>(x, w, y, n, in, out);
}

template <class T, class Y>
void launch_simt(const T* x, const T* w, Y* y, int n, int64_t in, int64_t out, cudaStream_t st) {
  const unsigned b = blocks_for(out, kSimtRows);
  const int th = kSimtWarps * 32;
  if (n <= 1) skinny_simt_kernel<T, Y, 1><<<b, th, 0, st>>>(x, w, y, n, in, out);
  else if (n <= 4) skinny_simt_kernel<T, Y, 4><<<b, th, 0, st>>>(x, w, y, n, in, out);
  else if (n <= 8) skinny_simt_kernel<T, Y, 8><<<b, th, 0, st>>>(x, w, y, n, in, out);
  else if (n <= 16) skinny_simt_kernel<T, Y, 16><<<b, th, 0, st>>>(x, w, y, n, in, out);
  else skinny_simt_kernel<T, Y, 32><<<b, th, 0, st>>>(x, w, y, n, in, out);
}

template <class T, class Y>
void launch_legacy(const T* x, const T* w, Y* y, int n, int64_t in, int64_t out, cudaStream_t st) {
  const unsigned b = blocks_for(out, kLegacyWarps);
  const int th = kLegacyWarps * 32;
  if (n <= 1) skinny_legacy_kernel<T, Y, 1><<<b, th, 0, st>>>(x, w, y, n, in, out);
  else if (n <= 4) skinny_legacy_kernel<T, Y, 4><<<b, th, 0, st>>>(x, w, y, n, in, out);
  else if (n <= 8) skinny_legacy_kernel<T, Y, 8><<<b, th, 0, st>>>(x, w, y, n, in, out);
  else if (n <= 16) skinny_legacy_kernel<T, Y, 16><<<b, th, 0, st>>>(x, w, y, n, in, out);
  else skinny_legacy_kernel<T, Y, 32><<<b, th, 0, st>>>(x, w, y, n, in, out);
}

template <class T, class Y>
void launch(const SkinnyGemmParams& p, SkinnyVariant v, cudaStream_t st) {
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  Y* y = static_cast<Y*>(p.y);
  const int n = int(p.n);
  switch (v) {
    case SkinnyVariant::mma_k8u4: return launch_mma<T, Y, 8, 4>(x, w, y, n, p.in, p.out, st);
    case SkinnyVariant::mma_k4u8: return launch_mma<T, Y, 4, 8>(x, w, y, n, p.in, p.out, st);
    case SkinnyVariant::simt: return launch_simt<T, Y>(x, w, y, n, p.in, p.out, st);
    case SkinnyVariant::legacy: return launch_legacy<T, Y>(x, w, y, n, p.in, p.out, st);
  }
}

SkinnyVariant parse_variant(const char* s) {
  for (int v = 0; v < kSkinnyVariants; ++v)
    if (std::strcmp(s, skinny_variant_name(SkinnyVariant(v))) == 0 || s == std::to_string(v))
      return SkinnyVariant(v);
  TF_FAIL("TRIFORCE_SKINNY_VARIANT=" << s << ": expected one of mma_k8u4, mma_k4u8, simt, legacy (or 0-3)");
}

}  // namespace

const char* skinny_variant_name(SkinnyVariant v) {
  switch (v) {
    case SkinnyVariant::mma_k8u4: return "mma_k8u4";
    case SkinnyVariant::mma_k4u8: return "mma_k4u8";
    case SkinnyVariant::simt: return "simt";
    case SkinnyVariant::legacy: return "legacy";
  }
  return "?";
}

SkinnyVariant skinny_default_variant() {
  static const SkinnyVariant v = [] {
    const char* s = std::getenv("TRIFORCE_SKINNY_VARIANT");
    return s && *s ? parse_variant(s) : SkinnyVariant::mma_k8u4;
  }();
  return v;
}

void gemm_skinny(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.out == 0) return;
  TF_CHECK(p.x && p.w && p.y && p.n > 0 && p.n <= kSkinnyGemmMaxRows && p.in > 0 && p.in % 8 == 0,
           "cuda::gemm_skinny: bad params (n " << p.n << " <= 32, in " << p.in << " a multiple of 8)");
  TF_CHECK(((reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.w)) & 15) == 0,
           "cuda::gemm_skinny: x and W must be 16-byte aligned");
  TF_CHECK(p.y_dtype == p.dtype || p.y_dtype == DType::F32, "cuda::gemm_skinny: y must be the input dtype or f32");
  TF_CHECK(p.variant >= -1 && p.variant < kSkinnyVariants, "cuda::gemm_skinny: variant " << p.variant << " out of range");
  const SkinnyVariant v = p.variant < 0 ? skinny_default_variant() : SkinnyVariant(p.variant);
  if (p.y_dtype == DType::F32) {
    TF_DISPATCH_HALF(p.dtype, T, { launch<T, float>(p, v, stream); });
  } else {
    TF_DISPATCH_HALF(p.dtype, T, { launch<T, T>(p, v, stream); });
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
