// SwiGLU: out = silu(gate) * up, elementwise on f16/bf16, fp32 math.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct SiluMulParams {
  const void* gate = nullptr;  // [count]
  const void* up = nullptr;    // [count]
  void* out = nullptr;         // [count]; may alias gate or up
  int64_t count = 0;
  DType dtype = DType::BF16;
};

void silu_mul(const SiluMulParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
