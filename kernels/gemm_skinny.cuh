// Batch-invariant linear for 1..32 rows: y[i, j] = x[i, :] . W[j, :] with a
// reduction order that depends only on the row length and the variant, never
// on how many rows (n) or which output rows a call computes. A speculative
// verification of 7 tokens therefore produces, row for row, the same bits as
// 7 one-token decode steps, so greedy speculative output equals autoregressive
// output on the GPU too (cuBLAS picks different algorithms for different n).
//
// Variants (one per process: the bits of a row differ between variants, so
// the choice must never depend on n):
//   mma_k8u4 / mma_k4u8: tensor cores (mma m16n8k16, fp32 accumulators). A
//     block owns 16 output rows; its KW warps split the row length into
//     interleaved U x 32-column blocks, each warp keeping 2U 16-byte weight
//     loads in flight, then the warps' partial sums are added in warp order.
//     x is read straight from global memory (L1-resident), no __syncthreads
//     in the loop. The x rows are the mma's N columns, and a column's result
//     depends only on its own inputs, so n changes nothing but the padding.
//   simt: CUDA-core FMAs, 2 output rows per warp, 4 warps splitting the row
//     length, 8 16-byte weight loads per lane in flight.
//   legacy: the first kernel (one warp per output row, x staged in shared
//     memory per 512-column chunk), kept for comparison.
// Step launches (kernels/pdl.cuh): inside a step's PDL scope every variant
// prefetches its block's weight rows into L2, then waits for the previous
// kernel before it reads x or writes y; outside it the wait is a no-op.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "rope.cuh"

namespace tf::cuda {

enum class SkinnyVariant : int { mma_k8u4 = 0, mma_k4u8 = 1, simt = 2, legacy = 3 };
constexpr int kSkinnyVariants = 4;
const char* skinny_variant_name(SkinnyVariant v);
// The process-wide default: TRIFORCE_SKINNY_VARIANT (a name above or its
// number) if set, else mma_k8u4. Read once; a bad value fails naming the variable.
SkinnyVariant skinny_default_variant();

struct SkinnyGemmParams {
  const void* x = nullptr;  // [n, in], dtype, 16-byte aligned
  const void* w = nullptr;  // [out, in], dtype, 16-byte aligned
  void* y = nullptr;        // [n, out], y_dtype (dtype or f32)
  int64_t n = 0, in = 0, out = 0;  // n <= 32; in a multiple of 8
  DType dtype = DType::BF16;
  DType y_dtype = DType::BF16;
  int variant = -1;  // a SkinnyVariant, or -1 for skinny_default_variant()
  // x is [n, 2 * in] = [gate | up] (the stacked gate/up GEMM's output) and the
  // GEMM reads silu(gate) * up, rounded to dtype exactly as the silu_mul
  // kernel stores it: the down projection without that kernel, same bits.
  // The tensor-core variants only (gemm_skinny_fuses_silu_mul()).
  bool x_silu_mul_halves = false;
};

constexpr int64_t kSkinnyGemmMaxRows = 32;
void gemm_skinny(const SkinnyGemmParams& p, cudaStream_t stream = nullptr);
// Whether variant (-1: the default) can take x_silu_mul_halves, and the
// epilogue fusions below (the tensor-core variants).
bool gemm_skinny_fuses_silu_mul(int variant = -1);

// Epilogue fusions of the tensor-core tile (skinny::mma_tile_mapped): the
// tiles pair the W rows an epilogue needs in one thread, and each output
// element's reduction is the plain GEMM's, so these give the bits of the GEMM
// (stored in dtype) followed by the kernel they replace, in one launch.
// p.y_dtype must be p.dtype; p.x_silu_mul_halves false; p.variant a
// tensor-core one (or -1 with such a default).
//
// W = [gate (inter rows) | up (inter rows)], p.out = 2 inter, inter a
// multiple of 8; p.y is [n, inter] = silu(gate) * up, as silu_mul stores it
// from the GEMM's stored output (StepFusions::fused_gate_up_silu).
void gemm_skinny_gate_up_silu(const SkinnyGemmParams& p, cudaStream_t stream = nullptr);
// W = the stacked q | k | v rows (q_heads, kv_heads, kv_heads heads of
// head_dim rows), p.out = (q_heads + 2 kv_heads) head_dim, head_dim / 2 a
// multiple of 8; p.y unused. The output goes where rope_qkv(r) would write it
// reading the GEMM's stored output: q rotated to r.q_out, k rotated and v
// copied to r.k_out / r.v_out at the slots (StepFusions::fused_qkv_rope).
// r.q, r.k and r.v are unused (there is no stored output); r.n, r.dtype and
// the heads must match p.
void gemm_skinny_qkv_rope(const SkinnyGemmParams& p, const RopeQkvParams& r, cudaStream_t stream = nullptr);
// The q/k/v RoPE epilogue's conditions on r against a GEMM of `out` rows, n
// tokens, dtype (this one's and gemm_skinny_norm_qkv_rope's); fails naming op.
void check_qkv_rope_params(const char* op, int64_t out, int64_t n, DType dtype, const RopeQkvParams& r);

}  // namespace tf::cuda
