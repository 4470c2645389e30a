// Tensor-core building blocks shared by the attention kernels (sm_80+ PTX,
// also the fast path on sm_90): cp.async 16-byte global -> shared copies with
// zero fill, ldmatrix fragment loads from XOR-swizzled tiles, and the
// m16n8k16 mma with fp32 accumulation for f16 and bf16.
//
// Tile layout: a tile of `rows` x D 16-bit elements is stored row-major with
// each 16-byte chunk c of row r placed at chunk c ^ (r & 7). Eight rows read
// at the same logical chunk (what one ldmatrix 8x8 does) then hit eight
// different bank groups, so ldmatrix and the cp.async stores are conflict-free.
//
// Fragment layouts follow the PTX ISA for mma.m16n8k16 (g = lane / 4,
// t = lane % 4): A rows g and g+8, columns 2t, 2t+1 (+8); B column g, rows 2t,
// 2t+1 (+8); C rows g and g+8, columns 2t, 2t+1.
#pragma once
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace tf::cuda::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; when !valid the destination is zero-filled and
// nothing is read (src must still be a mapped address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Element offset of (row, col) in a swizzled tile with D columns (col a multiple of 8).
template <int D> __device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

template <class T> struct MmaOp;
template <> struct MmaOp<__half> {
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct MmaOp<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
// d += a * b with a 16x16 (row), b 16x8 (col), fp32 accumulators.
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  MmaOp<T>::run(d, a, b0, b1);
}

// 2^x on the special-function unit (2 ulp; exact 0 for -inf), for the softmax.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two fp32 -> one packed pair of T (lo in the low half), as the A operand wants.
template <class T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// A fragments of a 16 x D tile (rows row0..row0+15 of a swizzled smem tile) for
// the D/16 k-steps: a[k] is the A operand of k-step k.
template <int D>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[D / 16][4], const void* tile, int row0, int lane) {
  const auto* base = static_cast<const uint16_t*>(tile);
  const int r = row0 + (lane & 15);
#pragma unroll
  for (int k = 0; k < D / 16; ++k) ldmatrix_x4(a[k], base + swz<D>(r, k * 16 + (lane >> 4) * 8));
}

// S[16 x 8*NT] += A(16 x D) * K^T, K rows n0..n0+8*NT-1 of a swizzled [slots][D] tile.
template <class T, int D, int NT>
__device__ __forceinline__ void qk_tile(float (&s)[NT][4], const uint32_t (&a)[D / 16][4], const void* k_tile,
                                        int n0, int lane) {
  static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4 each)");
  const auto* base = static_cast<const uint16_t*>(k_tile);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      uint32_t b[4];
      const int slot = n0 + nt * 8 + (lane & 7) + ((lane >> 4) << 3);
      const int col = kk * 16 + ((lane >> 3) & 1) * 8;
      ldmatrix_x4(b, base + swz<D>(slot, col));
      mma16816<T>(s[nt], a[kk], b[0], b[1]);
      mma16816<T>(s[nt + 1], a[kk], b[2], b[3]);
    }
  }
}

// O[16 x D] += P(16 x 16, A fragment) * V rows k0..k0+15 of a swizzled [slots][D] tile.
template <class T, int D>
__device__ __forceinline__ void pv_step(float (&o)[D / 8][4], const uint32_t (&p)[4], const void* v_tile, int k0,
                                        int lane) {
  const auto* base = static_cast<const uint16_t*>(v_tile);
  const int slot = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int dt = 0; dt < D / 8; dt += 2) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, base + swz<D>(slot, dt * 8 + (lane >> 4) * 8));
    mma16816<T>(o[dt], p, b[0], b[1]);
    mma16816<T>(o[dt + 1], p, b[2], b[3]);
  }
}

// Copies `rows` x D elements (row r at src + r * stride elements) into a
// swizzled smem tile with cp.async; rows at or past `valid_rows` are zero-filled.
template <int D, int ROWS, int THREADS, class T>
__device__ __forceinline__ void load_tile_async(T* dst, const T* src, int64_t stride, int valid_rows, int tid) {
  constexpr int CHUNKS = D / 8;
  static_assert(ROWS * CHUNKS % THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int it = 0; it < ROWS * CHUNKS / THREADS; ++it) {
    const int i = tid + it * THREADS;
    const int r = i / CHUNKS, c = (i % CHUNKS) * 8;
    const bool ok = r < valid_rows;
    cp_async16(dst + swz<D>(r, c), ok ? src + int64_t(r) * stride + c : src, ok);
  }
}

}  // namespace tf::cuda::mma
#endif
