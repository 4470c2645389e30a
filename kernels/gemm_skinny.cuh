// Batch-invariant linear for 1..32 rows: y[i, j] = x[i, :] . W[j, :] with a
// reduction order that depends only on the row length, never on how many
// rows (n) or which output rows a call computes. A speculative verification
// of 7 tokens therefore produces, row for row, the same bits as 7 one-token
// decode steps, so greedy speculative output equals autoregressive output on
// the GPU too (cuBLAS picks different algorithms for different n).
//
// One warp per output row j: lane l owns the 8-element groups l, l + 32, ...
// of every 256-element step, accumulating x[i] . W[j] in fp32 in that fixed
// order, then a fixed xor-tree warp sum. x is staged in shared memory per
// 512-column chunk and shared by the block's output rows.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct SkinnyGemmParams {
  const void* x = nullptr;  // [n, in], dtype
  const void* w = nullptr;  // [out, in], dtype
  void* y = nullptr;        // [n, out], y_dtype (dtype or f32)
  int64_t n = 0, in = 0, out = 0;  // n <= 32; in a multiple of 8
  DType dtype = DType::BF16;
  DType y_dtype = DType::BF16;
};

constexpr int64_t kSkinnyGemmMaxRows = 32;
void gemm_skinny(const SkinnyGemmParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
