// Fused residual add + RMSNorm (HF LlamaRMSNorm) on f16/bf16 rows, fp32 math.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct RmsNormParams {
  void* residual = nullptr;      // [n, d] in/out; nullptr: plain rmsnorm of x
  const void* x = nullptr;       // [n, d]
  const void* weight = nullptr;  // [d]
  void* out = nullptr;           // [n, d]; may alias x (not residual)
  int64_t n = 0, d = 0;
  float eps = 1e-6f;
  DType dtype = DType::BF16;     // of residual, x, weight, out
  // Normalize the stored (rounded) residual instead of the fp32 sum: then
  // the fused call gives the same bits as add_inplace followed by rmsnorm.
  bool round_residual = false;
};

// residual += x (stored rounded to dtype); out = w * r / sqrt(mean(r^2) + eps),
// where r is the fp32 sum (before rounding; after it with round_residual).
// Rows of d % 8 == 0 (16-byte aligned) take 16-byte vector loads, one block
// of d / 8 threads (d / 16 past 8192) per row; others go element by element.
void rmsnorm(const RmsNormParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
