// StreamingKVCache: the StreamingLLM policy (attention sinks + a recent window)
// over a FullKVCache, as TriForce's draft level uses it. evict() keeps the
// first `sink` slots and the most recent `window` slots, moving the latter down
// to follow the sinks. With reindex (the reference's behaviour) every slot's
// position is its slot index: moved keys are re-rotated by (new slot - old
// position), so new tokens are written at position = slot. Without reindex the
// original text positions are kept per slot (KVView positions carry them).
// Attention reads it through FullKVCache::view, so the model needs no change.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/full_cache.h"
#include "model/config.h"

namespace tf {

class StreamingKVCache {
 public:
  // capacity: physical slots (>= sink + window + the largest append between evictions).
  // kv_heads: the KV heads this rank holds (model.weights().local_kv_heads); 0 = cfg.num_kv_heads.
  // dev/dtype: where the cache lives (the model's device and dtype).
  StreamingKVCache(const ModelConfig& cfg, int64_t sink, int64_t window, int64_t capacity, bool reindex = true,
                   int64_t kv_heads = 0, Device dev = Device::CPU, DType dtype = DType::F32);

  FullKVCache& cache() { return cache_; }
  const FullKVCache& cache() const { return cache_; }
  int64_t sink() const { return sink_; }
  int64_t window() const { return window_; }
  bool reindex() const { return reindex_; }
  int64_t length() const { return cache_.length(); }

  // Positions for the next n tokens: slot indices when reindexing, else true_pos .. true_pos+n-1.
  std::vector<int64_t> next_positions(int64_t n, int64_t true_pos) const;
  // Keep sinks + the last `window` slots; returns the number of slots evicted.
  int64_t evict();
  // Start from the first n tokens of a full cache (a prefill run elsewhere),
  // already evicted: its sinks and its last `window` tokens, re-indexed as
  // evict() would. Returns the number of tokens left out.
  int64_t load_evicted(const FullKVCache& src, int64_t n);

 private:
  FullKVCache cache_;
  FullKVCache window_scratch_;  // evict() moves the window through it (gathers never overlap)
  int64_t sink_, window_;
  bool reindex_;
  std::vector<float> inv_freq_;
};

}  // namespace tf
