// The skinny GEMM with its input's RMSNorm in the prologue, for the steps of
// small models: y = rmsnorm(s) . W^T with s = residual (+ add), one launch
// where the step ran add_rmsnorm (or rmsnorm) and then the linear. Every block
// recomputes the n normalized rows into shared memory with the norm kernels'
// own row tile (rmsnorm_vec8_rows: the same sums in the same order) and runs
// the tensor-core skinny tile (skinny::mma_tile) on them, so y, and the sum
// block 0 stores, are bit for bit those of the two launches, and a row's bits
// never depend on the other rows (batch invariance). Redundant work per block:
// n rows of `in` elements read from L2, against a launch saved.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "rope.cuh"

namespace tf::cuda {

struct SkinnyNormGemmParams {
  const void* residual = nullptr;     // [n, in] the residual stream
  const void* add = nullptr;          // [n, in] or nullptr: s = residual + add (the closing add of a block)
  void* sum_out = nullptr;            // [n, in] round(residual + add), or nullptr: not stored; must alias
                                      // neither input (other blocks still read them)
  const void* norm_weight = nullptr;  // [in]
  float eps = 1e-6f;
  bool rounded_sum = false;           // normalize the stored (rounded) sum, as RmsNormParams::rounded_sum
  const void* w = nullptr;            // [out, in]
  void* y = nullptr;                  // [n, out]
  int64_t n = 0, in = 0, out = 0;
  DType dtype = DType::BF16;
  int variant = -1;  // a SkinnyVariant, or -1 for skinny_default_variant()
};

// Why gemm_skinny_norm cannot take these (nullptr: it can): a tensor-core
// variant, f16/bf16, 1 <= n <= 32, in a multiple of 8 whose norm block fits
// the GEMM's (in <= 2048).
const char* gemm_skinny_norm_unsupported(int64_t n, int64_t in, DType dtype, int variant = -1);
void gemm_skinny_norm(const SkinnyNormGemmParams& p, cudaStream_t stream = nullptr);

// The same prologue with the fused epilogues of gemm_skinny.cuh (their row
// maps and stores, gemm_skinny_epilogue.cuh), so one launch replaces three
// (the norm, the GEMM, the SwiGLU or the RoPE) with the bits of the three.
// Conditions as gemm_skinny_norm, plus those of the epilogue:
// gate/up: p.w = [gate (inter rows) | up (inter rows)], p.out = 2 inter, inter
// a multiple of 8; p.y is [n, inter] = silu(gate) * up, as silu_mul stores it.
void gemm_skinny_norm_gate_up_silu(const SkinnyNormGemmParams& p, cudaStream_t stream = nullptr);
// q/k/v: p.w = the stacked q | k | v rows, p.out = (q_heads + 2 kv_heads)
// head_dim, head_dim / 2 a multiple of 8; p.y unused; the output goes where
// gemm_skinny_qkv_rope writes it (q rotated to r.q_out, k rotated and v to
// the cache slots).
void gemm_skinny_norm_qkv_rope(const SkinnyNormGemmParams& p, const RopeQkvParams& r, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
