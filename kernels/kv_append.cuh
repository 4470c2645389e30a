// Append n new K/V rows to a contiguous per-layer cache [kv_heads, capacity,
// head_dim] at slots [len, len + n), where len is read from device memory.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct KvAppendParams {
  void* k_cache = nullptr;           // [kv_heads, capacity, head_dim]
  void* v_cache = nullptr;
  const void* k_new = nullptr;       // [n, kv_heads, head_dim]
  const void* v_new = nullptr;
  int32_t* length = nullptr;         // device scalar: current length
  int64_t n = 0, kv_heads = 0, head_dim = 0, capacity = 0;
  bool advance = true;               // length += n afterwards (same stream, second launch)
  DType dtype = DType::BF16;
};

// Rows whose slot would be >= capacity are dropped (the host checks capacity).
void kv_append(const KvAppendParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
