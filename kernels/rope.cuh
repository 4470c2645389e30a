// Rotary embedding, HF rotate_half convention (pairs (i, i + half)), applied
// in place to q and k, from precomputed f32 cos/sin tables indexed by position.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct RopeParams {
  void* q = nullptr;                  // [n, q_heads, head_dim], in place
  void* k = nullptr;                  // [n, k_heads, head_dim], in place; may be nullptr
  const float* cos = nullptr;         // [table_rows, head_dim / 2]
  const float* sin = nullptr;         // [table_rows, head_dim / 2]
  const int32_t* positions = nullptr; // device [n]: row of the tables for each token
  int64_t n = 0, q_heads = 0, k_heads = 0, head_dim = 0;
  int64_t table_rows = 0;             // positions outside [0, table_rows) leave the row NaN
  DType dtype = DType::BF16;
};

// x1' = x1*c - x2*s, x2' = x2*c + x1*s in fp32, rounded once to dtype.
void rope(const RopeParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
