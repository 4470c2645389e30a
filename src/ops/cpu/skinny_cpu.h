// The CPU's decode and verification kernels: a linear and an attention for a
// few rows (n <= kSkinnyMaxRows), which ops::linear and ops::attention take
// for every such call, n == 1 included.
//
// Why: a step on the CPU is bound by reading the weights (and at long contexts
// the KV cache). OpenBLAS sgemm on a skinny input costs several sgemv, and the
// BLAS attention re-read a KV head once per query head and per small GEMM. These
// kernels read each weight row, and each KV head's keys and values, once per
// call for all rows (and all query heads of a GQA group).
//
// Batch invariance: every output element is computed by a fixed sequence of
// operations that does not depend on n, on the other rows, on how the work is
// split over threads, or (attention) on slots a row does not see. A row of an
// n-row verification is then bit-identical to its own one-row decode step, as
// the CUDA backend's skinny GEMM and split-KV attention guarantee. The
// instruction set is chosen once per process (AVX2 + FMA when the CPU has
// them, else portable C++), so the bits may differ between machines, never
// between calls.
#pragma once

#include <cstdint>

#include "ops/ops.h"

namespace tf::ops::cpu {

// Calls of at most this many rows take the kernels below; longer ones (prefill
// chunks) go to BLAS.
constexpr int64_t kSkinnyMaxRows = 16;
// The linear's tile of weight rows (a thread's share is whole tiles).
constexpr int64_t kMR = 6;
// Attention splits the KV at fixed multiples of this many slots; each split's
// softmax is merged in split order, so a row's result depends only on the
// slots it sees.
constexpr int64_t kAttentionSplitSlots = 128;

// y[n, outd] = x[n, in] . w[outd, in]^T, rows contiguous.
void linear_skinny(const float* x, int64_t n, int64_t in, const float* w, int64_t outd, float* y);
// The same with f16 weights (IEEE half bits), widened exactly as they are read:
// the bits of the f32 call on the widened weights, at half the bytes read.
void linear_skinny(const float* x, int64_t n, int64_t in, const uint16_t* w_f16, int64_t outd, float* y);

// ops::attention for n <= kSkinnyMaxRows queries (q, out [n, heads, head_dim];
// masking as ops::attention documents). Its scratch is bounded by the rows
// times kAttentionSplitSlots, so p.row_block plays no part.
void attention_skinny(const float* q, const int32_t* q_positions, int64_t n, const KVView& kv, float* out,
                      const AttentionParams& p);

// s[j] = exp(s[j] - m) for j < cnt (-inf gives 0), returning their sum: the
// prefill attention's softmax rows, vectorised where the kernels are (the
// order of the sum is the lanes', which prefill is free to use).
float exp_sum_row(float* s, int64_t cnt, float m);

// False when TRIFORCE_CPU_KERNELS=blas: every linear and attention then goes
// to BLAS as before these kernels (sgemv for one row, sgemm for more): a
// measurement knob for A/B runs in one binary, not batch-invariant.
bool skinny_enabled();
// The instruction set these kernels use: "avx2+fma" or "generic".
const char* skinny_isa();
// Tests: run the portable kernels even where AVX2 is present (false restores
// the choice made for this CPU). TRIFORCE_CPU_KERNELS=generic does the same
// for a whole process.
void force_generic_kernels(bool on);
// Benchmarks: the BLAS path (as TRIFORCE_CPU_KERNELS=blas) while on, so one
// binary can interleave before and after.
void force_blas_kernels(bool on);

}  // namespace tf::ops::cpu
