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
  // cols > 0: gate and up are rows of `cols` elements spaced `ld` apart (the
  // halves of a stacked gate/up GEMM output), out is contiguous [count / cols, cols].
  int64_t cols = 0, ld = 0;
  // Prefill shapes: 16-byte vectors (the same bits) where the row length, the
  // spacing and the pointers allow; the scalar kernel otherwise. Decode and
  // verification steps leave it off, so their launches stay as they were.
  bool vec8 = false;
};

void silu_mul(const SiluMulParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
