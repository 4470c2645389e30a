// The tensor-core skinny GEMM's tile (see gemm_skinny.cuh for the design): 16
// output rows of y = x . W^T for n <= 8 * NT x rows. The standalone kernel
// (gemm_skinny.cu) runs one tile per block; the persistent step kernel
// (persistent_step.cu) loops its blocks over the same tiles. Both call this one
// function, so an output element's reduction order (KW warps over interleaved
// U x 32-column k-blocks, partial sums added in warp order) and its rounding
// are the same in both: the bits cannot differ.
#pragma once
#if defined(__CUDACC__)
#include <type_traits>

#include "activation_tile.cuh"
#include "attention_mma.cuh"
#include "common.cuh"

namespace tf::cuda::skinny {

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

// Where the x rows come from. XReadOnly: global memory nothing in the launch
// writes (the standalone kernel). XCoherent: global memory written earlier in
// the same launch (L2, never a stale L1 line). XShared: shared memory (a row
// the persistent kernel computed in its prologue). Same values, same bits.
struct XReadOnly {
  __device__ __forceinline__ static uint4 ld(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
  }
};
struct XCoherent {
  __device__ __forceinline__ static uint4 ld(const void* p) {
    uint4 r;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
  }
};
struct XShared {
  __device__ __forceinline__ static uint4 ld(const void* p) {
    uint4 r;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "r"(mma::smem_addr(p)));
    return r;
  }
};

// x = silu(gate) * up of a stacked [gate | up] row, made on the fly from 8
// gate and 8 up elements (the up half `up_offset` elements after the gate
// column) with silu_mul_f32 and the rounding to T that the standalone silu_mul
// kernel stores (activation.cu): the GEMM sees the very bits it would read
// from that kernel's output, without the launch and the round trip.
template <class T> struct XSiluMulHalves {
  int64_t up_offset;
  __device__ __forceinline__ uint4 ld(const void* p) const {
    const uint4 g = XReadOnly::ld(p), u = XReadOnly::ld(static_cast<const T*>(p) + up_offset);
    const T* gh = reinterpret_cast<const T*>(&g);
    const T* uh = reinterpret_cast<const T*>(&u);
    uint4 r;
    T* rh = reinterpret_cast<T*>(&r);
#pragma unroll
    for (int e = 0; e < 8; ++e) rh[e] = from_f32<T>(silu_mul_f32(to_f32(gh[e]), to_f32(uh[e])));
    return r;
  }
};

// Where a tile's W rows come from. WStream: the weight matrix in global memory
// (row r at w + r * in), streamed past L1. WStaged: the block's own copy of the
// tile in shared memory (row r at w + (r - row0) * row_ld; the persistent step
// stages a phase's tiles while the grid still runs the phase before,
// persistent_step.cu). Same values in the same fragments, so the same bits.
struct WStream {
  template <class T> __device__ __forceinline__ const T* row(const T* w, int64_t in, int64_t r) const {
    return w + r * in;
  }
  __device__ __forceinline__ static uint4 ld(const void* p) { return ld_stream(p); }
};
struct WStaged {
  int64_t row0, row_ld;
  template <class T> __device__ __forceinline__ const T* row(const T* w, int64_t, int64_t r) const {
    return w + (r - row0) * row_ld;
  }
  __device__ __forceinline__ static uint4 ld(const void* p) { return XShared::ld(p); }
};
// Either, chosen per tile at run time (one instantiation of the tile where a
// loop mixes staged and streamed tiles: two would add to the register spills
// of a kernel that inlines many tiles).
struct WStagedOrStream {
  bool staged;
  int64_t row0, row_ld;
  template <class T> __device__ __forceinline__ const T* row(const T* w, int64_t in, int64_t r) const {
    return staged ? w + (r - row0) * row_ld : w + r * in;
  }
  __device__ __forceinline__ uint4 ld(const void* p) const { return staged ? XShared::ld(p) : ld_stream(p); }
};

// Floats of shared scratch one tile needs for the warps' partial sums.
template <int KW, int NT> struct MmaPart {
  static constexpr int kFloats = (KW > 1 ? KW - 1 : 1) * NT * 4 * 32;
};

// Which two W rows lane group g of a tile reads: a(tile, g) and b(tile, g)
// (the mma's rows g and g + 8), each group of 8 lanes 8 rows in a row
// (a(tile, g) = a(tile, 0) + g). TileRows is the plain GEMM's: rows 16 tile ..
// 16 tile + 15, clamped to the last row (the surplus is never stored). Other
// maps pair rows an epilogue wants in one thread (gemm_skinny.cu's gate/up
// and q/k/v fusions); an output element's reduction is the same whichever
// tile holds it, so the bits are too.
struct TileRows {
  int64_t out;
  __device__ __forceinline__ int64_t a(int64_t tile, int g) const { return min(tile * 16 + g, out - 1); }
  __device__ __forceinline__ int64_t b(int64_t tile, int g) const { return min(tile * 16 + g + 8, out - 1); }
};

// The plain GEMM's epilogue: y rows i, columns a(tile, g) and b(tile, g) of TileRows.
template <class Y> struct StoreRows {
  Y* y;
  int64_t y_ld, out;
  __device__ __forceinline__ void operator()(int i, int64_t tile, int g, float a, float b) const {
    const int64_t j = tile * 16 + g;
    if (j < out) y[int64_t(i) * y_ld + j] = from_f32<Y>(a);
    if (j + 8 < out) y[int64_t(i) * y_ld + j + 8] = from_f32<Y>(b);
  }
};

// One tile: the dot products of W rows rows.a(tile, g), rows.b(tile, g) (g =
// 0..7) with x rows 0..n-1 at stride x_ld elements, handed to
// epi(i, tile, g, a, b) for each x row i < n (a, b: the fp32 sums). Runs on KW
// warps (threads 0 .. 32 KW - 1); `part` is MmaPart<KW, NT>::kFloats floats
// of shared memory. Contains one __syncthreads (KW > 1); a caller looping over
// tiles syncs again before the next tile reuses `part`. Only warp 0 calls epi.
// Lane (g, t) = (lane / 4, lane % 4) loads columns c .. c+7 (c = k-block base
// + s * 32 + t * 8) of W rows a and b and of x row 8q+g. Elements 0..3
// feed the first m16n8k16 (k slots 2t, 2t+1, 2t+8, 2t+9 of A and B alike),
// 4..7 the second: a fixed permutation of the columns inside each 32-column
// step, the same for every n, so no fragment shuffling is needed.
// wl: where W's rows are (WStream: w is the global matrix; WStaged: w is the
// tile's shared-memory copy).
template <class T, int KW, int U, int NT, class XL, class RowMap, class Epilogue, class WL = WStream>
__device__ __forceinline__ void mma_tile_mapped(const T* __restrict__ x, int64_t x_ld, const T* __restrict__ w,
                                                int n, int64_t in, int64_t tile, float* part, const XL& xl,
                                                const RowMap& rows, const Epilogue& epi, const WL& wl = WL{}) {
  constexpr int kKb = U * 32;  // columns of one warp's k-block
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const T* wa = wl.row(w, in, rows.a(tile, g));
  const T* wb = wl.row(w, in, rows.b(tile, g));
  // x rows past n re-read row n-1 (branch-free loads); their columns are never stored.
  const T* xr[NT];
#pragma unroll
  for (int q = 0; q < NT; ++q) xr[q] = x + int64_t(min(q * 8 + g, n - 1)) * x_ld;
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
      a[s] = !kTail || c < in ? wl.ld(wa + c) : zero;
      b[s] = !kTail || c < in ? wl.ld(wb + c) : zero;
    }
    __syncwarp();  // a scheduling fence: ptxas otherwise sinks the loads back next to their mmas
#pragma unroll
    for (int s = 0; s < U; ++s) {
      const int64_t c = c0 + s * 32;
#pragma unroll
      for (int q = 0; q < NT; ++q) {
        // Past the row end both operands are zero, so a NaN beyond x's row cannot leak in.
        const uint4 xv = !kTail || c < in ? xl.ld(xr[q] + c) : zero;
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
  if (KW > 1) {
    if (warp > 0)
#pragma unroll
      for (int q = 0; q < NT; ++q)
#pragma unroll
        for (int r = 0; r < 4; ++r) part[((warp - 1) * NT * 4 + q * 4 + r) * 32 + lane] = acc[q][r];
    __syncthreads();
    if (warp > 0) return;
#pragma unroll
    for (int q = 0; q < NT; ++q)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        for (int v = 0; v < KW - 1; ++v) acc[q][r] += part[(v * NT * 4 + q * 4 + r) * 32 + lane];
  }
  // acc[q][r]: x row q * 8 + 2t + (r & 1) of W row a (r < 2) or b (r >= 2).
#pragma unroll
  for (int q = 0; q < NT; ++q)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = q * 8 + 2 * t + r;
      if (i < n) epi(i, tile, g, acc[q][r], acc[q][r + 2]);
    }
}

// The plain GEMM's tile: output rows [16 tile, 16 tile + 16) of y = x . W^T
// (row stride y_ld) for x rows 0..n-1.
template <class T, class Y, int KW, int U, int NT, class XL, class WL = WStream>
__device__ __forceinline__ void mma_tile(const T* __restrict__ x, int64_t x_ld, const T* __restrict__ w,
                                         Y* __restrict__ y, int64_t y_ld, int n, int64_t in, int64_t out,
                                         int64_t tile, float* part, const XL& xl = XL{}, const WL& wl = WL{}) {
  mma_tile_mapped<T, KW, U, NT>(x, x_ld, w, n, in, tile, part, xl, TileRows{out}, StoreRows<Y>{y, y_ld, out}, wl);
}

}  // namespace tf::cuda::skinny
#endif
