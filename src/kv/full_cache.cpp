#include "kv/full_cache.h"

#include <algorithm>

namespace tf {

FullKVCache::FullKVCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity)
    : layers_(num_layers), kv_heads_(num_kv_heads), head_dim_(head_dim), capacity_(capacity) {
  TF_CHECK(num_layers > 0 && num_kv_heads > 0 && head_dim > 0 && capacity > 0,
           "FullKVCache: bad geometry layers=" << num_layers << " kv_heads=" << num_kv_heads
                                               << " head_dim=" << head_dim << " capacity=" << capacity);
  const size_t total = size_t(num_layers) * size_t(num_kv_heads) * size_t(capacity) * size_t(head_dim);
  k_.assign(total, 0.0f);
  v_.assign(total, 0.0f);
  positions_.assign(size_t(capacity), 0);
}

void FullKVCache::truncate(int64_t n) {
  TF_CHECK(n >= 0 && n <= length_, "KV cache: cannot truncate to " << n << " (length " << length_ << ")");
  length_ = n;
  if (!identity_) {
    identity_ = true;
    for (int64_t j = 0; j < n && identity_; ++j) identity_ = positions_[size_t(j)] == j;
  }
}

int64_t FullKVCache::append_slots(const int32_t* positions, int64_t n) {
  TF_CHECK(n >= 0 && length_ + n <= capacity_,
           "KV cache full: " << length_ << " + " << n << " tokens exceed capacity " << capacity_);
  const int64_t slot = length_;
  for (int64_t i = 0; i < n; ++i) {
    positions_[size_t(slot + i)] = positions[i];
    if (positions[i] != slot + i) identity_ = false;
  }
  length_ += n;
  return slot;
}

void FullKVCache::write(int64_t layer, int64_t slot, const float* k, const float* v, int64_t n) {
  TF_CHECK(layer >= 0 && layer < layers_ && slot >= 0 && slot + n <= length_,
           "KV cache: write of layer " << layer << " slots [" << slot << ", " << slot + n
                                       << ") outside claimed length " << length_);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < kv_heads_; ++h) {
      std::copy_n(k + (i * kv_heads_ + h) * head_dim_, head_dim_, k_at(layer, h, slot + i));
      std::copy_n(v + (i * kv_heads_ + h) * head_dim_, head_dim_, v_at(layer, h, slot + i));
    }
}

float* FullKVCache::k_at(int64_t layer, int64_t head, int64_t slot) {
  return k_.data() + ((layer * kv_heads_ + head) * capacity_ + slot) * head_dim_;
}
float* FullKVCache::v_at(int64_t layer, int64_t head, int64_t slot) {
  return v_.data() + ((layer * kv_heads_ + head) * capacity_ + slot) * head_dim_;
}

ops::KVView FullKVCache::view(int64_t layer) const {
  TF_CHECK(layer >= 0 && layer < layers_, "KV cache: layer " << layer << " out of range " << layers_);
  ops::KVView v;
  const size_t off = size_t(layer * kv_heads_) * size_t(capacity_) * size_t(head_dim_);
  v.k = k_.data() + off;
  v.v = v_.data() + off;
  v.length = length_;
  v.head_stride = capacity_ * head_dim_;
  v.token_stride = head_dim_;
  v.positions = identity_ ? nullptr : positions_.data();
  v.num_kv_heads = kv_heads_;
  v.head_dim = head_dim_;
  v.device = Device::CPU;
  return v;
}

}  // namespace tf
