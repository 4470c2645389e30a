// Token embedding gather: out[i, :] = table[tokens[i], :] (f16/bf16 rows).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct EmbeddingParams {
  const void* table = nullptr;      // [vocab, d]
  const int32_t* tokens = nullptr;  // device [n]
  void* out = nullptr;              // [n, d]
  int64_t n = 0, vocab = 0, d = 0;
  DType dtype = DType::BF16;
};

// A token id outside [0, vocab) gives a NaN row (the host validates ids first).
void embedding(const EmbeddingParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
