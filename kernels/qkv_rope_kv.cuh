// The decode step's q/k/v epilogue in one kernel: the row of the stacked
// q/k/v GEMM is split, q and k are rotated (RoPE, rotate_half pairs), q goes
// to its own contiguous buffer for attention and k, v straight into one
// layer of the KV cache at slots read from device memory (so a graph replay
// writes where that step's upload says). Bit-identical to rope on q and k
// followed by kv_write: the same rope_rotate, the same single rounding.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct QkvRopeKvParams {
  const void* qkv = nullptr;         // [n, (q_heads + 2 * kv_heads) * head_dim]: q heads, k heads, v heads
  void* q_out = nullptr;             // [n, q_heads, head_dim]
  void* k_cache = nullptr;           // one layer: [kv_heads, capacity, head_dim]
  void* v_cache = nullptr;
  const float* cos = nullptr;        // [table_rows, head_dim / 2]
  const float* sin = nullptr;
  const int32_t* rows = nullptr;     // device [n]: table row per token; outside [0, table_rows) gives NaN
  const int32_t* slots = nullptr;    // device [n]: cache slot per token; outside [0, capacity) is dropped
  int64_t n = 0, q_heads = 0, kv_heads = 0, head_dim = 0, capacity = 0, table_rows = 0;
  DType dtype = DType::BF16;
};

void qkv_rope_kv(const QkvRopeKvParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
