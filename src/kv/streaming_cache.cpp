#include "kv/streaming_cache.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kv/slot_gather.h"
#include "model/rope.h"

namespace tf {

StreamingKVCache::StreamingKVCache(const ModelConfig& cfg, int64_t sink, int64_t window, int64_t capacity,
                                   bool reindex, int64_t kv_heads, Device dev, DType dtype)
    : cache_(cfg.num_layers, kv_heads > 0 ? kv_heads : cfg.num_kv_heads, cfg.head_dim, capacity, dev, dtype),
      window_scratch_(cfg.num_layers, kv_heads > 0 ? kv_heads : cfg.num_kv_heads, cfg.head_dim, std::max<int64_t>(1, window),
                      dev, dtype),
      sink_(sink), window_(window),
      reindex_(reindex), inv_freq_(compute_rope(cfg).inv_freq) {
  TF_CHECK(sink >= 0 && window >= 1 && sink + window <= capacity,
           "streaming cache: sink " << sink << " + window " << window << " exceed capacity " << capacity);
}

std::vector<int64_t> StreamingKVCache::next_positions(int64_t n, int64_t true_pos) const {
  std::vector<int64_t> p(static_cast<size_t>(n));
  const int64_t base = reindex_ ? cache_.length() : true_pos;
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = base + i;
  return p;
}

int64_t StreamingKVCache::evict() {
  const int64_t len = cache_.length();
  if (len <= sink_ + window_) return 0;
  const int64_t from = len - window_, evicted = from - sink_;
  std::vector<int32_t> pos(static_cast<size_t>(window_));
  for (int64_t j = 0; j < window_; ++j)
    pos[size_t(j)] = reindex_ ? int32_t(sink_ + j) : cache_.position(from + j);
  std::vector<int32_t> old_pos(static_cast<size_t>(window_));
  for (int64_t j = 0; j < window_; ++j) old_pos[size_t(j)] = cache_.position(from + j);
  // The window goes out to the scratch cache and comes back after the sinks,
  // each key re-rotated by (new position - old position) when re-indexing.
  SlotGather out;
  out.m = window_;
  for (int64_t j = 0; j < window_; ++j) out.src_slots.push_back(int32_t(from + j));
  window_scratch_.reset();
  window_scratch_.append_slots(old_pos.data(), window_);
  gather_slots(cache_, window_scratch_, out);
  SlotGather back;
  back.m = window_;
  back.dst_slot0 = sink_;
  for (int64_t j = 0; j < window_; ++j) back.src_slots.push_back(int32_t(j));
  if (reindex_) {
    for (int64_t j = 0; j < window_; ++j) back.rotate_delta.push_back(pos[size_t(j)] - old_pos[size_t(j)]);
    back.inv_freq = inv_freq_;
  }
  cache_.truncate(sink_);
  cache_.append_slots(pos.data(), window_);
  gather_slots(window_scratch_, cache_, back);
  return evicted;
}

int64_t StreamingKVCache::load_evicted(const FullKVCache& src_in, int64_t n) {
  TF_CHECK(n >= 0 && n <= src_in.length() && src_in.num_layers() == cache_.num_layers() &&
               src_in.num_kv_heads() == cache_.num_kv_heads() && src_in.head_dim() == cache_.head_dim(),
           "streaming cache: cannot load " << n << " tokens from a cache of " << src_in.length());
  const FullKVCache& src = src_in;
  std::vector<int64_t> from;  // source slots kept, in order
  const int64_t s = std::min(sink_, n);
  for (int64_t j = 0; j < s; ++j) from.push_back(j);
  for (int64_t j = std::max(s, n - window_); j < n; ++j) from.push_back(j);
  const int64_t m = int64_t(from.size());
  std::vector<int32_t> pos(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) pos[size_t(j)] = reindex_ ? int32_t(j) : src.position(from[size_t(j)]);
  cache_.reset();
  cache_.append_slots(pos.data(), m);
  SlotGather g;
  g.m = m;
  for (int64_t j = 0; j < m; ++j) g.src_slots.push_back(int32_t(from[size_t(j)]));
  if (reindex_) {
    for (int64_t j = 0; j < m; ++j) g.rotate_delta.push_back(pos[size_t(j)] - src.position(from[size_t(j)]));
    g.inv_freq = inv_freq_;
  }
  gather_slots(src, cache_, g);
  return n - m;
}

}  // namespace tf
