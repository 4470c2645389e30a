// FullKVCache: the plain, static KV cache. K and V are preallocated once as
// [layers][kv_heads][capacity][head_dim]: f32 host arrays on the CPU, f16/bf16
// device arrays on CUDA (plus a device copy of the length for the kernels);
// appending never allocates, truncate(n) is the rollback (it only resets the
// length). Copies are deep on both devices (a prefill snapshot is a copy). Each
// slot also records the position of the token stored in it, so attention can
// mask causally by position. Attention reads it only through ops::KVView, so a
// streaming or retrieval cache can hand attention views of its own.
//
// Offloaded (CUDA, KVOffloadOptions::enabled; see kv/kv_offload.h): layers
// >= on_chip_layers live in pinned host memory; layer_k/layer_v/view of such
// a layer point at its device staging slot, which holds the layer only
// between the forward hooks (offload_before_layer .. after_layer) or after
// stage_layer. Rollback is still a length reset.
#pragma once
#include <cstdint>
#include <vector>

#include <memory>

#include "kv/kv_offload.h"
#include "ops/ops.h"

namespace tf {

class FullKVCache {
 public:
  FullKVCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity,
              Device device = Device::CPU, DType dtype = DType::F32, KVOffloadOptions offload = {});
  FullKVCache(const FullKVCache& o);
  FullKVCache& operator=(const FullKVCache& o);
  FullKVCache(FullKVCache&&) = default;
  FullKVCache& operator=(FullKVCache&&) = default;

  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  // Bytes of K and V storage (on the cache's device; offloaded layers excluded).
  size_t storage_bytes() const;
  // Pinned host bytes of the offloaded layers (0 when not offloaded).
  size_t host_bytes() const;
  bool offloaded() const { return on_chip_ < layers_; }
  int64_t on_chip_layers() const { return on_chip_; }

  // ---- the offload pipeline of one forward chunk (no-ops when not offloaded) ----
  // After append_slots of the chunk's n slots starting at `slot`:
  void offload_begin(int64_t slot);
  // Before layer l's KV write: l's K/V are in its staging slot once the
  // compute stream gets here; l+1's copy starts.
  void offload_before_layer(int64_t layer, int64_t slot);
  // After layer l's attention: its new rows go back to the host.
  void offload_after_layer(int64_t layer, int64_t slot, int64_t n);
  // Outside a forward: brings rows [0, length()) of an offloaded layer into its
  // staging slot for the compute stream (layer_k/layer_v then point there);
  // call kv_offload::release_staged() after the kernels that read it.
  void stage_layer(int64_t layer) const;
  // Where layer l's K or V lives: device memory or (offloaded) pinned host
  // memory, [kv_heads][capacity][head_dim]. For copies between caches.
  void* home_k(int64_t layer) const;
  void* home_v(int64_t layer) const;

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
  // [slot, slot+n) (already claimed by append_slots). Host f32 caches only.
  void write(int64_t layer, int64_t slot, const float* k, const float* v, int64_t n);
  // The same from tensors on the cache's device and dtype (any device).
  void write(int64_t layer, int64_t slot, const Tensor& k, const Tensor& v);
  // CUDA only: row t of k, v to slot slots[t], slots i32 [n] on the device (the
  // forward's query-slot upload, already claimed), so a write captured in a
  // CUDA graph follows each replay's slots.
  void write_at(int64_t layer, const Tensor& slots, const Tensor& k, const Tensor& v);
  // One layer's K or V storage [kv_heads, capacity, head_dim] as a tensor view.
  Tensor layer_k(int64_t layer) const;
  Tensor layer_v(int64_t layer) const;

  // What attention reads for one layer (all slots [0, length())).
  ops::KVView view(int64_t layer) const;

  // Direct access: K/V of (layer, kv head, slot), head_dim floats each (host f32 caches only).
  float* k_at(int64_t layer, int64_t head, int64_t slot);
  float* v_at(int64_t layer, int64_t head, int64_t slot);
  int32_t position(int64_t slot) const { return positions_.at(size_t(slot)); }

 private:
  void sync_device_length();

  int64_t layers_, kv_heads_, head_dim_, capacity_;
  Device device_ = Device::CPU;
  DType dtype_ = DType::F32;
  int64_t length_ = 0;
  // The first slot j whose position is not j (kNone: none). Slots below it
  // are the identity, so the view can skip the position mask; a truncate
  // below it restores the identity without rescanning.
  static constexpr int64_t kNone = INT64_MAX;
  int64_t first_moved_ = kNone;
  std::vector<float> k_, v_;   // CPU storage
  Tensor dk_, dv_, dlen_;      // CUDA storage of layers [0, on_chip_) and the device length (i32 [1])
  int64_t on_chip_ = 0;        // layers on the cache's device; the rest are offloaded
  std::shared_ptr<void> hk_, hv_;  // pinned host K/V of the offloaded layers
  kv_offload::HostLayout host_;
  std::vector<int32_t> positions_;
};

}  // namespace tf
