// The row maps and epilogues of the skinny GEMM's fused tiles
// (skinny::mma_tile_mapped): the plain kernel's (gemm_skinny.cu) and the
// norm-prologue kernel's (gemm_skinny_norm.cu) run the same structs, so the
// bits of a fused output are the same whichever prologue fed the tile.
#pragma once
#if defined(__CUDACC__)
#include "activation_tile.cuh"
#include "common.cuh"
#include "rope_tile.cuh"

namespace tf::cuda::skinny {

// Tile t of the stacked [gate | up] W pairs gate row 8t + g with up row
// inter + 8t + g, so one thread holds both sums of an output column.
struct GateUpRows {
  int64_t inter;
  __device__ __forceinline__ int64_t a(int64_t tile, int g) const { return tile * 8 + g; }
  __device__ __forceinline__ int64_t b(int64_t tile, int g) const { return inter + tile * 8 + g; }
};
// h[i, 8 tile + g] = silu(gate) * up from the sums rounded to T as the GEMM
// stores them, then silu_mul's expression and rounding (activation.cu).
template <class T> struct GateUpSiluStore {
  T* h;
  int64_t h_ld;
  __device__ __forceinline__ void operator()(int i, int64_t tile, int g, float gate, float up) const {
    const float gs = to_f32(from_f32<T>(gate)), us = to_f32(from_f32<T>(up));
    h[int64_t(i) * h_ld + tile * 8 + g] = from_f32<T>(silu_mul_f32(gs, us));
  }
};

// Tile t of the stacked q | k | v W covers pairs 8 sub .. 8 sub + 7 of head
// t / per_head (sub = t % per_head, per_head = half / 8): rows j and j + half
// of the head, a RoPE pair, in one thread.
struct RopePairRows {
  int64_t half, per_head;
  __device__ __forceinline__ int64_t a(int64_t tile, int g) const {
    return (tile / per_head) * 2 * half + (tile % per_head) * 8 + g;
  }
  __device__ __forceinline__ int64_t b(int64_t tile, int g) const { return a(tile, g) + half; }
};
// The pair of token i as rope_qkv_row would write it from the stored GEMM output.
template <class T> struct RopeQkvStore {
  RopeQkvParams p;
  int64_t per_head;
  __device__ __forceinline__ void operator()(int i, int64_t tile, int g, float x1, float x2) const {
    rope_qkv_pair<T>(p, i, tile / per_head, (tile % per_head) * 8 + g, from_f32<T>(x1), from_f32<T>(x2));
  }
};

}  // namespace tf::cuda::skinny
#endif
