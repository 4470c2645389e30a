// Slot gathers and chunk scores on either device: the data movement the
// retrieval and StreamingLLM caches need, so those caches keep one policy
// and run wherever their FullKVCache lives. Destination slots must already be
// claimed (append_slots); source and destination must be different caches.
// The source may have more layers than the destination (a layer-skip draft
// starts from the first layers of the target's prefill): the first
// dst.num_layers() are gathered.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/full_cache.h"

namespace tf {

struct SlotGather {
  int64_t m = 0;                   // slots per (layer, kv head)
  std::vector<int32_t> src_slots;  // [m] shared by every (layer, head), or [layers * kv_heads * m] when per_head
  bool per_head = false;
  int64_t dst_slot0 = 0;
  std::vector<int32_t> rotate_delta;  // empty, or [m]: key j is re-rotated by delta[j] positions
  std::vector<float> inv_freq;        // RoPE inverse frequencies [head_dim / 2] (with rotate_delta)
};

void gather_slots(const FullKVCache& src, FullKVCache& dst, const SlotGather& g);

// scores[g * num_chunks + c] = q_sum[g] . mean of layer `layer`'s keys of head g in
// chunk c (slots [c * chunk, (c + 1) * chunk)). q_sum: [kv_heads * head_dim].
std::vector<double> chunk_scores(const FullKVCache& cache, int64_t layer, const std::vector<double>& q_sum,
                                 int64_t chunk, int64_t num_chunks);

}  // namespace tf
