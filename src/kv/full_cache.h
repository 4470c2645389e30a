// FullKVCache: the plain, static KV cache. K and V are preallocated once as
// f32 host arrays [layers][kv_heads][capacity][head_dim]; appending never
// allocates, truncate(n) is the rollback (it only resets the length). Each
// slot also records the position of the token stored in it, so attention can
// mask causally by position. Attention reads it only through ops::KVView, so a
// streaming or retrieval cache can hand attention views of its own.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/ops.h"

namespace tf {

class FullKVCache {
 public:
  FullKVCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t num_layers() const { return layers_; }
  int64_t num_kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }

  // Drop every slot from n on (n <= length()).
  void truncate(int64_t n);
  void reset() { truncate(0); }

  // Claim slots [length(), length()+n) for n tokens at the given positions and
  // advance length(); returns the first slot. Throws if capacity is exceeded.
  int64_t append_slots(const int32_t* positions, int64_t n);

  // Write K/V rows of one layer: k, v are [n, kv_heads, head_dim] for slots
  // [slot, slot+n) (already claimed by append_slots).
  void write(int64_t layer, int64_t slot, const float* k, const float* v, int64_t n);

  // What attention reads for one layer (all slots [0, length())).
  ops::KVView view(int64_t layer) const;

  // Direct access: K/V of (layer, kv head, slot), head_dim floats each.
  float* k_at(int64_t layer, int64_t head, int64_t slot);
  float* v_at(int64_t layer, int64_t head, int64_t slot);
  int32_t position(int64_t slot) const { return positions_.at(size_t(slot)); }

 private:
  int64_t layers_, kv_heads_, head_dim_, capacity_;
  int64_t length_ = 0;
  bool identity_ = true;  // positions_[j] == j for every j < length_
  std::vector<float> k_, v_;
  std::vector<int32_t> positions_;
};

}  // namespace tf
