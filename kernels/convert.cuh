// f32 -> f16/bf16 conversion: the one rounding of a tensor-parallel
// row-parallel output, whose ranks' partial sums are reduced in f32 first.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct CastParams {
  const float* in = nullptr;  // [count]
  void* out = nullptr;        // [count] of dtype
  int64_t count = 0;
  DType dtype = DType::BF16;  // f16 or bf16
};
// out[i] = round-to-nearest-even(in[i]), as every kernel rounds its f32 results.
void cast_from_f32(const CastParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
