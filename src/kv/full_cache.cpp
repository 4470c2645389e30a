#include "kv/full_cache.h"

#include <algorithm>

#include "core/device.h"
#ifdef TRIFORCE_HAVE_CUDA
#include "elementwise.cuh"
#include "stream.cuh"
#endif

namespace tf {

FullKVCache::FullKVCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity,
                         Device device, DType dtype, KVOffloadOptions offload)
    : layers_(num_layers), kv_heads_(num_kv_heads), head_dim_(head_dim), capacity_(capacity), device_(device),
      dtype_(dtype), on_chip_(num_layers) {
  TF_CHECK(num_layers > 0 && num_kv_heads > 0 && head_dim > 0 && capacity > 0,
           "FullKVCache: bad geometry layers=" << num_layers << " kv_heads=" << num_kv_heads
                                               << " head_dim=" << head_dim << " capacity=" << capacity);
  const int64_t per_layer = num_kv_heads * capacity * head_dim;
  if (device_ == Device::CPU) {
    TF_CHECK(!offload.enabled, "--offload-kv: needs --device cuda (a CPU cache already lives in host memory)");
    TF_CHECK(dtype_ == DType::F32, "FullKVCache: a CPU cache stores f32, got " << dtype_name(dtype_));
    k_.assign(size_t(num_layers * per_layer), 0.0f);
    v_.assign(size_t(num_layers * per_layer), 0.0f);
  } else {
    TF_CHECK(dtype_ == DType::F16 || dtype_ == DType::BF16,
             "FullKVCache: a CUDA cache stores f16 or bf16, got " << dtype_name(dtype_));
    if (offload.enabled) {
      TF_CHECK(offload.on_chip_layers >= 0, "--on-chip-layers: " << offload.on_chip_layers << " is negative");
      on_chip_ = std::min(offload.on_chip_layers, num_layers);
    }
    if (on_chip_ > 0) {
      dk_ = empty_tensor(device_, dtype_, {on_chip_ * per_layer});
      dv_ = empty_tensor(device_, dtype_, {on_chip_ * per_layer});
    }
    dlen_ = empty_tensor(device_, DType::I32, {1});
    sync_device_length();  // 0: truncate uploads only a changed length, so the first one may not
    if (offloaded()) {
      host_.first_layer = on_chip_, host_.layers = layers_, host_.kv_heads = kv_heads_;
      host_.capacity = capacity_, host_.head_dim = head_dim_, host_.elem = dtype_size(dtype_);
      const size_t bytes = size_t(layers_ - on_chip_) * host_.layer_bytes();
      hk_ = kv_offload::alloc_pinned(bytes);
      hv_ = kv_offload::alloc_pinned(bytes);
      host_.host_k = hk_.get(), host_.host_v = hv_.get();
    }
  }
  positions_.assign(size_t(capacity), 0);
}

FullKVCache::FullKVCache(const FullKVCache& o)
    : layers_(o.layers_), kv_heads_(o.kv_heads_), head_dim_(o.head_dim_), capacity_(o.capacity_),
      device_(o.device_), dtype_(o.dtype_), length_(o.length_), first_moved_(o.first_moved_), k_(o.k_), v_(o.v_),
      on_chip_(o.on_chip_), host_(o.host_), positions_(o.positions_) {
  if (device_ == Device::CUDA) {
    if (o.dk_.data) {
      dk_ = empty_tensor(device_, dtype_, o.dk_.shape);
      dv_ = empty_tensor(device_, dtype_, o.dv_.shape);
      copy_tensor(dk_, o.dk_);
      copy_tensor(dv_, o.dv_);
    }
    dlen_ = empty_tensor(device_, DType::I32, {1});
    copy_tensor(dlen_, o.dlen_);
    if (offloaded()) {  // pinned to pinned, only the valid rows of each (layer, head)
      const size_t bytes = host_bytes() / 2;
      hk_ = kv_offload::alloc_pinned(bytes);
      hv_ = kv_offload::alloc_pinned(bytes);
      host_.host_k = hk_.get(), host_.host_v = hv_.get();
      const size_t rows = size_t((layers_ - on_chip_) * kv_heads_), w = size_t(length_) * host_.row_bytes();
      kv_offload::copy_2d(hk_.get(), host_.pitch(), o.hk_.get(), host_.pitch(), w, rows);
      kv_offload::copy_2d(hv_.get(), host_.pitch(), o.hv_.get(), host_.pitch(), w, rows);
    }
  }
}

FullKVCache& FullKVCache::operator=(const FullKVCache& o) {
  if (this != &o) {
    FullKVCache tmp(o);
    *this = std::move(tmp);
  }
  return *this;
}

size_t FullKVCache::storage_bytes() const {
  return 2 * size_t(on_chip_ * kv_heads_ * capacity_ * head_dim_) * dtype_size(dtype_);
}

size_t FullKVCache::host_bytes() const {
  return 2 * size_t((layers_ - on_chip_) * kv_heads_ * capacity_ * head_dim_) * dtype_size(dtype_);
}

void FullKVCache::offload_begin(int64_t slot) {
  if (offloaded()) kv_offload::begin_chunk(host_, slot);
}
void FullKVCache::offload_before_layer(int64_t layer, int64_t slot) {
  if (offloaded()) kv_offload::before_layer(host_, layer, slot);
}
void FullKVCache::offload_after_layer(int64_t layer, int64_t slot, int64_t n) {
  if (offloaded()) kv_offload::after_layer(host_, layer, slot, n);
}
void FullKVCache::stage_layer(int64_t layer) const {
  if (offloaded() && layer >= on_chip_) kv_offload::stage(host_, layer, length_);
}

void* FullKVCache::home_k(int64_t layer) const {
  if (layer < on_chip_) return layer_k(layer).data;
  return static_cast<uint8_t*>(hk_.get()) + size_t(layer - on_chip_) * host_.layer_bytes();
}
void* FullKVCache::home_v(int64_t layer) const {
  if (layer < on_chip_) return layer_v(layer).data;
  return static_cast<uint8_t*>(hv_.get()) + size_t(layer - on_chip_) * host_.layer_bytes();
}

void FullKVCache::sync_device_length() {
  if (device_ != Device::CUDA) return;
#ifdef TRIFORCE_HAVE_CUDA
  // A one-thread kernel on the compute stream, ordered like the blocking copy
  // it replaces but without its stream sync: a step's append and a rollback's
  // truncate (and a StreamingLLM eviction's four) no longer wait for the device.
  cuda::set_i32(dlen_.ptr<int32_t>(), int32_t(length_), cuda::compute_stream());
#endif
}

Tensor FullKVCache::layer_k(int64_t layer) const {
  TF_CHECK(layer >= 0 && layer < layers_, "KV cache: layer " << layer << " out of range " << layers_);
  Tensor t;
  t.dtype = dtype_;
  t.device = device_;
  t.shape = {kv_heads_, capacity_, head_dim_};
  const size_t off = size_t(layer * kv_heads_ * capacity_ * head_dim_);
  if (device_ == Device::CPU)
    t.data = const_cast<float*>(k_.data()) + off;
  else if (layer >= on_chip_)
    t.data = kv_offload::staging_k(host_.slot_of(layer));
  else
    t.data = static_cast<uint8_t*>(dk_.data) + off * dtype_size(dtype_);
  return t;
}

Tensor FullKVCache::layer_v(int64_t layer) const {
  Tensor t = layer_k(layer);
  const size_t off = size_t(layer * kv_heads_ * capacity_ * head_dim_);
  if (device_ == Device::CPU)
    t.data = const_cast<float*>(v_.data()) + off;
  else if (layer >= on_chip_)
    t.data = kv_offload::staging_v(host_.slot_of(layer));
  else
    t.data = static_cast<uint8_t*>(dv_.data) + off * dtype_size(dtype_);
  return t;
}

void FullKVCache::write(int64_t layer, int64_t slot, const Tensor& k, const Tensor& v) {
  TF_CHECK(k.device == device_ && v.device == device_ && k.dtype == dtype_ && v.dtype == dtype_,
           "KV cache: write of " << dtype_name(k.dtype) << " rows into a " << dtype_name(dtype_) << " cache");
  const int64_t n = k.shape.empty() ? 0 : k.shape[0];
  TF_CHECK(k.numel() == n * kv_heads_ * head_dim_ && v.numel() == k.numel(),
           "KV cache: write rows of shape " << shape_str(k.shape) << ", expected [n, " << kv_heads_ << ", "
                                            << head_dim_ << "]");
  if (device_ == Device::CPU) return write(layer, slot, k.ptr<float>(), v.ptr<float>(), n);
  TF_CHECK(layer >= 0 && layer < layers_ && slot >= 0 && slot + n <= length_,
           "KV cache: write of layer " << layer << " slots [" << slot << ", " << slot + n
                                       << ") outside claimed length " << length_);
#ifdef TRIFORCE_HAVE_CUDA
  cuda::KvWriteParams p;
  p.k_cache = layer_k(layer).data, p.v_cache = layer_v(layer).data, p.k_new = k.data, p.v_new = v.data;
  p.slot = slot, p.n = n, p.kv_heads = kv_heads_, p.head_dim = head_dim_, p.capacity = capacity_;
  p.dtype = dtype_;
  cuda::kv_write(p, cuda::compute_stream());
#endif
}

void FullKVCache::write_at(int64_t layer, const Tensor& slots, const Tensor& k, const Tensor& v) {
  TF_CHECK(device_ == Device::CUDA && slots.device == Device::CUDA && slots.dtype == DType::I32,
           "KV cache: write_at needs a CUDA cache and i32 device slots");
  TF_CHECK(k.device == device_ && v.device == device_ && k.dtype == dtype_ && v.dtype == dtype_,
           "KV cache: write of " << dtype_name(k.dtype) << " rows into a " << dtype_name(dtype_) << " cache");
  const int64_t n = k.shape.empty() ? 0 : k.shape[0];
  TF_CHECK(k.numel() == n * kv_heads_ * head_dim_ && v.numel() == k.numel() && slots.numel() == n,
           "KV cache: write rows of shape " << shape_str(k.shape) << " at " << slots.numel() << " slots");
  TF_CHECK(layer >= 0 && layer < layers_, "KV cache: layer " << layer << " out of range " << layers_);
#ifdef TRIFORCE_HAVE_CUDA
  cuda::KvWriteParams p;
  p.k_cache = layer_k(layer).data, p.v_cache = layer_v(layer).data, p.k_new = k.data, p.v_new = v.data;
  p.slots = slots.ptr<int32_t>(), p.n = n, p.kv_heads = kv_heads_, p.head_dim = head_dim_, p.capacity = capacity_;
  p.dtype = dtype_;
  cuda::kv_write(p, cuda::compute_stream());
#endif
}

void FullKVCache::truncate(int64_t n) {
  TF_CHECK(n >= 0 && n <= length_, "KV cache: cannot truncate to " << n << " (length " << length_ << ")");
  // The runners truncate to the common prefix before every forward, and most
  // of those calls keep the length: on CUDA each upload is a launch, so an
  // unchanged length is not uploaded again.
  if (n == length_) return;
  length_ = n;
  sync_device_length();
  if (first_moved_ >= n) first_moved_ = kNone;  // O(1), not a rescan of the kept positions
}

int64_t FullKVCache::append_slots(const int32_t* positions, int64_t n) {
  TF_CHECK(n >= 0 && length_ + n <= capacity_,
           "KV cache full: " << length_ << " + " << n << " tokens exceed capacity " << capacity_);
  const int64_t slot = length_;
  for (int64_t i = 0; i < n; ++i) {
    positions_[size_t(slot + i)] = positions[i];
    if (positions[i] != slot + i && first_moved_ == kNone) first_moved_ = slot + i;
  }
  if (n == 0) return slot;
  length_ += n;
  sync_device_length();
  return slot;
}

void FullKVCache::write(int64_t layer, int64_t slot, const float* k, const float* v, int64_t n) {
  TF_CHECK(device_ == Device::CPU, "KV cache: host-pointer write into a CUDA cache");
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
  TF_CHECK(device_ == Device::CPU, "KV cache: k_at on a CUDA cache (use layer_k)");
  return k_.data() + ((layer * kv_heads_ + head) * capacity_ + slot) * head_dim_;
}
float* FullKVCache::v_at(int64_t layer, int64_t head, int64_t slot) {
  TF_CHECK(device_ == Device::CPU, "KV cache: v_at on a CUDA cache (use layer_v)");
  return v_.data() + ((layer * kv_heads_ + head) * capacity_ + slot) * head_dim_;
}

ops::KVView FullKVCache::view(int64_t layer) const {
  TF_CHECK(layer >= 0 && layer < layers_, "KV cache: layer " << layer << " out of range " << layers_);
  ops::KVView v;
  const size_t off = size_t(layer * kv_heads_) * size_t(capacity_) * size_t(head_dim_);
  if (device_ == Device::CUDA) {
    v.dev_k = layer_k(layer).data;
    v.dev_v = layer_v(layer).data;
    v.dtype = dtype_;
    v.dev_length = dlen_.ptr<int32_t>();
    v.capacity = capacity_;
  } else {
    v.k = k_.data() + off;
    v.v = v_.data() + off;
  }
  v.length = length_;
  v.head_stride = capacity_ * head_dim_;
  v.token_stride = head_dim_;
  v.positions = first_moved_ >= length_ ? nullptr : positions_.data();
  v.num_kv_heads = kv_heads_;
  v.head_dim = head_dim_;
  v.device = device_;
  return v;
}

}  // namespace tf
