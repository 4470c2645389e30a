#include "kv/streaming_cache.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/rope.h"

namespace tf {

StreamingKVCache::StreamingKVCache(const ModelConfig& cfg, int64_t sink, int64_t window, int64_t capacity,
                                   bool reindex, int64_t kv_heads)
    : cache_(cfg.num_layers, kv_heads > 0 ? kv_heads : cfg.num_kv_heads, cfg.head_dim, capacity), sink_(sink), window_(window),
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

void StreamingKVCache::rerotate(float* k, int64_t delta) const {
  // Keys are stored post-RoPE; RoPE is a rotation per pair (i, i + half), so a
  // further rotation by delta moves a key to position old + delta.
  const int64_t half = int64_t(inv_freq_.size());
  for (int64_t i = 0; i < half; ++i) {
    const double a = double(inv_freq_[size_t(i)]) * double(delta);
    const double c = std::cos(a), s = std::sin(a);
    const double x1 = k[i], x2 = k[i + half];
    k[i] = float(x1 * c - x2 * s);
    k[i + half] = float(x2 * c + x1 * s);
  }
}

int64_t StreamingKVCache::evict() {
  const int64_t len = cache_.length();
  if (len <= sink_ + window_) return 0;
  const int64_t from = len - window_, evicted = from - sink_;
  const int64_t L = cache_.num_layers(), H = cache_.num_kv_heads(), D = cache_.head_dim();
  std::vector<int32_t> pos(static_cast<size_t>(window_));
  for (int64_t j = 0; j < window_; ++j)
    pos[size_t(j)] = reindex_ ? int32_t(sink_ + j) : cache_.position(from + j);
  std::vector<int32_t> old_pos(static_cast<size_t>(window_));
  for (int64_t j = 0; j < window_; ++j) old_pos[size_t(j)] = cache_.position(from + j);
  // Slots only move down (sink + j < from + j), so copying in increasing j is safe.
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < window_; ++j) {
        float* kd = cache_.k_at(l, h, sink_ + j);
        std::copy_n(cache_.k_at(l, h, from + j), D, kd);
        std::copy_n(cache_.v_at(l, h, from + j), D, cache_.v_at(l, h, sink_ + j));
        if (reindex_) rerotate(kd, int64_t(pos[size_t(j)]) - int64_t(old_pos[size_t(j)]));
      }
  cache_.truncate(sink_);
  cache_.append_slots(pos.data(), window_);
  return evicted;
}

int64_t StreamingKVCache::load_evicted(const FullKVCache& src_in, int64_t n) {
  TF_CHECK(n >= 0 && n <= src_in.length() && src_in.num_layers() == cache_.num_layers() &&
               src_in.num_kv_heads() == cache_.num_kv_heads() && src_in.head_dim() == cache_.head_dim(),
           "streaming cache: cannot load " << n << " tokens from a cache of " << src_in.length());
  auto& src = const_cast<FullKVCache&>(src_in);  // k_at is non-const; read only
  std::vector<int64_t> from;  // source slots kept, in order
  const int64_t s = std::min(sink_, n);
  for (int64_t j = 0; j < s; ++j) from.push_back(j);
  for (int64_t j = std::max(s, n - window_); j < n; ++j) from.push_back(j);
  const int64_t m = int64_t(from.size());
  std::vector<int32_t> pos(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) pos[size_t(j)] = reindex_ ? int32_t(j) : src.position(from[size_t(j)]);
  cache_.reset();
  cache_.append_slots(pos.data(), m);
  const int64_t L = cache_.num_layers(), H = cache_.num_kv_heads(), D = cache_.head_dim();
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < m; ++j) {
        const int64_t f = from[size_t(j)];
        std::copy_n(src.k_at(l, h, f), D, cache_.k_at(l, h, j));
        std::copy_n(src.v_at(l, h, f), D, cache_.v_at(l, h, j));
        if (reindex_ && pos[size_t(j)] != src.position(f))
          rerotate(cache_.k_at(l, h, j), int64_t(pos[size_t(j)]) - int64_t(src.position(f)));
      }
  return n - m;
}

}  // namespace tf
