// Attention for any head_dim up to 256 (the tiny test fixtures use 16 and
// 32): one warp per (query, head), keys in order with an online softmax.
// Simple and slow; the model uses it only for head dims the tensor-core and
// split-KV kernels (64, 128) do not cover. Same masking contract as
// attention_decode: query i (slot q_slots[i]) sees slots j <= q_slots[i],
// j < *kv_length.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct AttentionGenericParams {
  const void* q = nullptr;          // [n, num_heads, head_dim]
  const void* k_cache = nullptr;    // [kv_heads, capacity, head_dim] (strides below)
  const void* v_cache = nullptr;
  void* out = nullptr;              // [n, num_heads, head_dim]
  const int32_t* kv_length = nullptr;  // device scalar
  const int32_t* q_slots = nullptr;    // device [n]
  int64_t n = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t head_stride = 0, token_stride = 0;
  float scale = 0.0f;               // 0 -> 1/sqrt(head_dim)
  DType dtype = DType::BF16;
};

void attention_generic(const AttentionGenericParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
