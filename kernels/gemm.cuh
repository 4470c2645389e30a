// Linear layers on cuBLAS: y[n, out] = x[n, in] . W[out, in]^T with the
// weights as they are stored (HF layout, row-major), fp32 accumulation.
// Column-major cuBLAS sees W as [in, out], so y^T = op_T(W) . x^T.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct GemmParams {
  const void* x = nullptr;  // [n, in], dtype
  const void* w = nullptr;  // [out, in], dtype
  void* y = nullptr;        // [n, out], y_dtype (dtype or f32)
  int64_t n = 0, in = 0, out = 0;
  DType dtype = DType::BF16;
  DType y_dtype = DType::BF16;
};

void gemm(const GemmParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
