// Slot gathers between two KV caches of one geometry ([layers][kv_heads]
// [capacity][head_dim], f16/bf16): what the retrieval cache (selected chunks,
// a different slot list per layer and KV head) and the StreamingLLM cache
// (sinks + recent window, one list for all, keys re-rotated to their new
// positions) do on the device. Source and destination must not overlap.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct KvGatherParams {
  const void* src_k = nullptr;
  const void* src_v = nullptr;
  void* dst_k = nullptr;
  void* dst_v = nullptr;
  int64_t layers = 0, kv_heads = 0, head_dim = 0;
  int64_t src_capacity = 0, dst_capacity = 0;
  int64_t m = 0;                       // slots per (layer, head)
  const int32_t* src_slots = nullptr;  // device: [m] (shared) or [layers * kv_heads][m] (per_head)
  bool per_head = false;
  int64_t dst_slot0 = 0;               // entry j goes to slot dst_slot0 + j
  const int32_t* rotate_delta = nullptr;  // device [m] or nullptr: key j rotated by delta[j] positions
  const float* inv_freq = nullptr;        // device [head_dim / 2] (with rotate_delta)
  DType dtype = DType::BF16;
};

void kv_gather(const KvGatherParams& p, cudaStream_t stream = nullptr);

struct ChunkScoreParams {
  const void* k = nullptr;      // one layer: [kv_heads, capacity, head_dim]
  const float* q_sum = nullptr; // device [kv_heads, head_dim]: the group's query summed over its heads
  float* scores = nullptr;      // device [kv_heads, num_chunks]
  int64_t kv_heads = 0, head_dim = 0, capacity = 0;
  int64_t chunk = 8, num_chunks = 0;
  DType dtype = DType::BF16;
};
// scores[g, c] = q_sum[g] . mean(k[g, c*chunk : (c+1)*chunk]) in fp32.
void chunk_scores(const ChunkScoreParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
