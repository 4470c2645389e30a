#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "attention_mma.cuh"
#include "common.cuh"
#include "gemm_skinny.cuh"
#include "gemm_skinny_epilogue.cuh"
#include "gemm_skinny_tile.cuh"
#include "pdl.cuh"
#include "rope_tile.cuh"

namespace tf::cuda {
namespace {

using skinny::ld_stream;
__device__ __forceinline__ uint4 ld_x(const void* p) { return skinny::XReadOnly::ld(p); }

// ---- tensor cores ----
// grid.x = ceil(out / 16); KW warps per block; NT = ceil(n / 8) x tiles; the
// tile itself is skinny::mma_tile (gemm_skinny_tile.cuh), which the persistent
// step kernel runs too.
template <class T, class Y, int KW, int U, int NT>
__global__ void __launch_bounds__(KW * 32) skinny_mma_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                              Y* __restrict__ y, int n, int64_t in, int64_t out,
                                                              unsigned prefetch_blocks) {
  prefetch_rows_then_wait(w, int64_t(blockIdx.x) * 16, 16, in, out, blockIdx.x < prefetch_blocks);
  __shared__ float part[skinny::MmaPart<KW, NT>::kFloats];
  skinny::mma_tile<T, Y, KW, U, NT, skinny::XReadOnly>(x, in, w, y, out, n, in, out, blockIdx.x, part);
}

// The same tile over a stacked [gate | up] x (rows 2 in apart) whose loads
// compute silu(gate) * up (skinny::XSiluMulHalves).
template <class T, class Y, int KW, int U, int NT>
__global__ void __launch_bounds__(KW * 32) skinny_mma_silu_kernel(const T* __restrict__ gate_up,
                                                                   const T* __restrict__ w, Y* __restrict__ y,
                                                                   int n, int64_t in, int64_t out,
                                                                   unsigned prefetch_blocks) {
  prefetch_rows_then_wait(w, int64_t(blockIdx.x) * 16, 16, in, out, blockIdx.x < prefetch_blocks);
  __shared__ float part[skinny::MmaPart<KW, NT>::kFloats];
  skinny::mma_tile<T, Y, KW, U, NT>(gate_up, 2 * in, w, y, out, n, in, out, blockIdx.x, part,
                                    skinny::XSiluMulHalves<T>{in});
}

// ---- tensor cores, fused epilogues (gemm_skinny.cuh; the row maps and stores: gemm_skinny_epilogue.cuh) ----
using skinny::GateUpRows;
using skinny::GateUpSiluStore;
using skinny::RopePairRows;
using skinny::RopeQkvStore;

// grid.x = the tiles. Each tile's W rows are two runs of 8 (rows.a(tile, 0)
// and rows.b(tile, 0) on): those are prefetched before the PDL wait; x, the
// tables, rows and slots are read only after it.
template <class T, int KW, int U, int NT, class RowMap, class Epilogue>
__global__ void __launch_bounds__(KW * 32) skinny_mma_epilogue_kernel(const T* __restrict__ x,
                                                                       const T* __restrict__ w, int n, int64_t in,
                                                                       RowMap rows, Epilogue epi,
                                                                       unsigned prefetch_blocks) {
  const int64_t tile = blockIdx.x;
  if (blockIdx.x < prefetch_blocks) {
    prefetch_rows(w, rows.a(tile, 0), 8, in);
    prefetch_rows(w, rows.b(tile, 0), 8, in);
  }
  pdl_wait();
  pdl_trigger();
  __shared__ float part[skinny::MmaPart<KW, NT>::kFloats];
  skinny::mma_tile_mapped<T, KW, U, NT>(x, in, w, n, in, tile, part, skinny::XReadOnly{}, rows, epi);
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
                                                                       int64_t out, unsigned prefetch_blocks) {
  prefetch_rows_then_wait(w, int64_t(blockIdx.x) * kSimtRows, kSimtRows, in, out, blockIdx.x < prefetch_blocks);
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
                                                                           int64_t out, unsigned prefetch_blocks) {
  prefetch_rows_then_wait(w, int64_t(blockIdx.x) * kLegacyWarps, kLegacyWarps, in, out,
                          blockIdx.x < prefetch_blocks);
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
  // The prefetch pays only where a launch can overlap; prefetch_blocks says which blocks (pdl.cuh).
  const unsigned pf = pdl_scope_on() ? prefetch_blocks(16, in * int64_t(sizeof(T))) : 0;
  // The tile count only bounds the loop; a row's arithmetic is the same in each.
  if (n <= 8) launch_step(skinny_mma_kernel<T, Y, KW, U, 1>, dim3(b), dim3(KW * 32), 0, st, x, w, y, n, in, out, pf);
  else if (n <= 16) launch_step(skinny_mma_kernel<T, Y, KW, U, 2>, dim3(b), dim3(KW * 32), 0, st, x, w, y, n, in, out, pf);
  else launch_step(skinny_mma_kernel<T, Y, KW, U, 4>, dim3(b), dim3(KW * 32), 0, st, x, w, y, n, in, out, pf);
}

template <class T, class Y, int KW, int U>
void launch_mma_silu(const T* x, const T* w, Y* y, int n, int64_t in, int64_t out, cudaStream_t st) {
  const unsigned b = blocks_for(out, 16);
  const unsigned pf = pdl_scope_on() ? prefetch_blocks(16, in * int64_t(sizeof(T))) : 0;
  if (n <= 8) launch_step(skinny_mma_silu_kernel<T, Y, KW, U, 1>, dim3(b), dim3(KW * 32), 0, st, x, w, y, n, in, out, pf);
  else if (n <= 16) launch_step(skinny_mma_silu_kernel<T, Y, KW, U, 2>, dim3(b), dim3(KW * 32), 0, st, x, w, y, n, in, out, pf);
  else launch_step(skinny_mma_silu_kernel<T, Y, KW, U, 4>, dim3(b), dim3(KW * 32), 0, st, x, w, y, n, in, out, pf);
}

template <class T, int KW, int U, class RowMap, class Epilogue>
void launch_mma_epilogue(const T* x, const T* w, int n, int64_t in, int64_t tiles, const RowMap& rows,
                         const Epilogue& epi, cudaStream_t st) {
  const dim3 b{unsigned(tiles)}, th{unsigned(KW * 32)};
  // Each block prefetches two runs of 8 rows.
  const unsigned pf = pdl_scope_on() ? prefetch_blocks(16, in * int64_t(sizeof(T))) : 0;
  if (n <= 8) launch_step(skinny_mma_epilogue_kernel<T, KW, U, 1, RowMap, Epilogue>, b, th, 0, st, x, w, n, in, rows, epi, pf);
  else if (n <= 16) launch_step(skinny_mma_epilogue_kernel<T, KW, U, 2, RowMap, Epilogue>, b, th, 0, st, x, w, n, in, rows, epi, pf);
  else launch_step(skinny_mma_epilogue_kernel<T, KW, U, 4, RowMap, Epilogue>, b, th, 0, st, x, w, n, in, rows, epi, pf);
}

// The variant's tile shape (KW warps, U steps), as gemm_skinny runs it.
template <class T, class RowMap, class Epilogue>
void launch_epilogue(const SkinnyGemmParams& p, int64_t tiles, const RowMap& rows, const Epilogue& epi,
                     cudaStream_t st) {
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  const SkinnyVariant v = p.variant < 0 ? skinny_default_variant() : SkinnyVariant(p.variant);
  if (v == SkinnyVariant::mma_k4u8) return launch_mma_epilogue<T, 4, 8>(x, w, int(p.n), p.in, tiles, rows, epi, st);
  return launch_mma_epilogue<T, 8, 4>(x, w, int(p.n), p.in, tiles, rows, epi, st);  // checked: mma_k8u4
}

template <class T, class Y>
void launch_simt(const T* x, const T* w, Y* y, int n, int64_t in, int64_t out, cudaStream_t st) {
  const unsigned b = blocks_for(out, kSimtRows);
  const unsigned pf = pdl_scope_on() ? prefetch_blocks(kSimtRows, in * int64_t(sizeof(T))) : 0;
  const int th = kSimtWarps * 32;
  if (n <= 1) launch_step(skinny_simt_kernel<T, Y, 1>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
  else if (n <= 4) launch_step(skinny_simt_kernel<T, Y, 4>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
  else if (n <= 8) launch_step(skinny_simt_kernel<T, Y, 8>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
  else if (n <= 16) launch_step(skinny_simt_kernel<T, Y, 16>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
  else launch_step(skinny_simt_kernel<T, Y, 32>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
}

template <class T, class Y>
void launch_legacy(const T* x, const T* w, Y* y, int n, int64_t in, int64_t out, cudaStream_t st) {
  const unsigned b = blocks_for(out, kLegacyWarps);
  const unsigned pf = pdl_scope_on() ? prefetch_blocks(kLegacyWarps, in * int64_t(sizeof(T))) : 0;
  const int th = kLegacyWarps * 32;
  if (n <= 1) launch_step(skinny_legacy_kernel<T, Y, 1>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
  else if (n <= 4) launch_step(skinny_legacy_kernel<T, Y, 4>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
  else if (n <= 8) launch_step(skinny_legacy_kernel<T, Y, 8>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
  else if (n <= 16) launch_step(skinny_legacy_kernel<T, Y, 16>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
  else launch_step(skinny_legacy_kernel<T, Y, 32>, dim3(b), dim3(th), 0, st, x, w, y, n, in, out, pf);
}

template <class T, class Y>
void launch(const SkinnyGemmParams& p, SkinnyVariant v, cudaStream_t st) {
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  Y* y = static_cast<Y*>(p.y);
  const int n = int(p.n);
  if (p.x_silu_mul_halves) {
    if (v == SkinnyVariant::mma_k4u8) return launch_mma_silu<T, Y, 4, 8>(x, w, y, n, p.in, p.out, st);
    return launch_mma_silu<T, Y, 8, 4>(x, w, y, n, p.in, p.out, st);  // gemm_skinny checked the variant
  }
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

bool gemm_skinny_fuses_silu_mul(int variant) {
  const SkinnyVariant v = variant < 0 ? skinny_default_variant() : SkinnyVariant(variant);
  return v == SkinnyVariant::mma_k8u4 || v == SkinnyVariant::mma_k4u8;
}

namespace {
// The checks every entry shares (y: whether the entry writes p.y).
void check_params(const SkinnyGemmParams& p, const char* op, bool y) {
  TF_CHECK(p.x && p.w && (p.y || !y) && p.n > 0 && p.n <= kSkinnyGemmMaxRows && p.in > 0 && p.in % 8 == 0,
           "cuda::" << op << ": bad params (n " << p.n << " <= 32, in " << p.in << " a multiple of 8)");
  TF_CHECK(((reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.w)) & 15) == 0,
           "cuda::" << op << ": x and W must be 16-byte aligned");
  TF_CHECK(p.y_dtype == p.dtype || p.y_dtype == DType::F32, "cuda::" << op << ": y must be the input dtype or f32");
  TF_CHECK(p.variant >= -1 && p.variant < kSkinnyVariants, "cuda::" << op << ": variant " << p.variant << " out of range");
}

// The epilogue fusions' extra conditions (gemm_skinny.cuh).
void check_epilogue_params(const SkinnyGemmParams& p, const char* op) {
  check_params(p, op, false);
  TF_CHECK(p.y_dtype == p.dtype && !p.x_silu_mul_halves, "cuda::" << op << ": y in the input dtype, x plain");
  TF_CHECK(gemm_skinny_fuses_silu_mul(p.variant), "cuda::" << op << ": needs a tensor-core variant, not "
                                                           << skinny_variant_name(p.variant < 0 ? skinny_default_variant()
                                                                                                : SkinnyVariant(p.variant)));
}
}  // namespace

void gemm_skinny(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.out == 0) return;
  check_params(p, "gemm_skinny", true);
  const SkinnyVariant v = p.variant < 0 ? skinny_default_variant() : SkinnyVariant(p.variant);
  TF_CHECK(!p.x_silu_mul_halves || gemm_skinny_fuses_silu_mul(p.variant),
           "cuda::gemm_skinny: the SiLU-mul input needs a tensor-core variant, not " << skinny_variant_name(v));
  if (p.y_dtype == DType::F32) {
    TF_DISPATCH_HALF(p.dtype, T, { launch<T, float>(p, v, stream); });
  } else {
    TF_DISPATCH_HALF(p.dtype, T, { launch<T, T>(p, v, stream); });
  }
  CUDA_CHECK_LAUNCH();
}

void gemm_skinny_gate_up_silu(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.out == 0) return;
  check_epilogue_params(p, "gemm_skinny_gate_up_silu");
  TF_CHECK(p.y && p.out % 16 == 0, "cuda::gemm_skinny_gate_up_silu: out " << p.out << " = 2 inter, inter a multiple of 8");
  const int64_t inter = p.out / 2;
  TF_DISPATCH_HALF(p.dtype, T, {
    launch_epilogue<T>(p, inter / 8, GateUpRows{inter}, GateUpSiluStore<T>{static_cast<T*>(p.y), inter}, stream);
  });
  CUDA_CHECK_LAUNCH();
}

void check_qkv_rope_params(const char* op, int64_t out, int64_t n, DType dtype, const RopeQkvParams& r) {
  const int64_t half = r.head_dim / 2;
  TF_CHECK(r.head_dim > 0 && half % 8 == 0 && out == (r.q_heads + 2 * r.kv_heads) * r.head_dim && r.n == n &&
               r.dtype == dtype,
           "cuda::" << op << ": out " << out << " is not " << r.q_heads << " + 2 x " << r.kv_heads << " heads of "
                    << r.head_dim << " (head_dim / 2 a multiple of 8)");
  TF_CHECK(r.q_out && r.cos && r.sin && r.rows && (r.kv_heads == 0 || (r.k_out && r.v_out)),
           "cuda::" << op << ": a null destination, table or rows");
}

void gemm_skinny_qkv_rope(const SkinnyGemmParams& p, const RopeQkvParams& r, cudaStream_t stream) {
  if (p.n == 0 || p.out == 0) return;
  check_epilogue_params(p, "gemm_skinny_qkv_rope");
  check_qkv_rope_params("gemm_skinny_qkv_rope", p.out, p.n, p.dtype, r);
  const int64_t half = r.head_dim / 2, per_head = half / 8;
  TF_DISPATCH_HALF(p.dtype, T, {
    launch_epilogue<T>(p, p.out / 16, RopePairRows{half, per_head}, RopeQkvStore<T>{r, per_head}, stream);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
