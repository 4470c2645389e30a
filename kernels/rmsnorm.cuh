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
  // With a residual: normalize the sum as stored (rounded to dtype), which is
  // bit for bit add_inplace followed by a plain rmsnorm; false: the fp32 sum.
  bool rounded_sum = false;
};

// residual += x (stored rounded to dtype); out = w * r / sqrt(mean(r^2) + eps),
// where r is the fp32 sum (before rounding), or the stored sum (rounded_sum).
void rmsnorm(const RmsNormParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
