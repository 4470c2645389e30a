// KV offloading (--offload-kv): a FullKVCache whose layers >= on_chip_layers
// live in pinned host memory, streamed to the device one layer at a time by a
// double-buffered pipeline on its own copy stream:
//
//   begin_chunk      H2D of the first offloaded layer's valid slots into its staging slot
//   before_layer(l)  the compute stream waits for layer l's arrival; the copy stream
//                    starts layer l+1's H2D into the other staging slot, behind the
//                    D2H of the layer that used that slot last (so after its attention)
//   after_layer(l)   after layer l's attention: D2H of just the chunk's new rows
//
// The new K/V rows are written into the staging slot (attention reads them
// there) and go back to the host asynchronously. Only the `length` valid slots
// of each head move (2D copies with the cache's pitch). The staging slots and
// the copy stream are process-wide, shared by every offloaded cache: forwards
// run one at a time, and every use of a slot ends with a D2H on the copy
// stream behind that use's attention, so the next H2D into it is ordered
// after it by the stream alone. The copy stream is non-blocking and ordered
// against tf::cuda::compute_stream() with events only, so it is correct both
// when that is the legacy stream 0 and when it is a created stream.
// Host code reading the pinned copy calls synchronize() first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tf {

struct KVOffloadOptions {
  bool enabled = false;
  int64_t on_chip_layers = 0;  // layers [0, K) stay on the device
};

namespace kv_offload {

// One cache's offloaded storage: layers [first_layer, layers) as
// [layer - first_layer][kv_heads][capacity][head_dim] in pinned host memory.
struct HostLayout {
  void* host_k = nullptr;
  void* host_v = nullptr;
  int64_t first_layer = 0, layers = 0, kv_heads = 0, capacity = 0, head_dim = 0;
  size_t elem = 2;
  size_t layer_bytes() const { return size_t(kv_heads * capacity * head_dim) * elem; }
  size_t row_bytes() const { return size_t(head_dim) * elem; }
  size_t pitch() const { return size_t(capacity * head_dim) * elem; }
  int slot_of(int64_t layer) const { return int((layer - first_layer) & 1); }
};

// Pinned host bytes (cudaHostAlloc, not zero-filled); a one-line error naming the size when refused.
std::shared_ptr<void> alloc_pinned(size_t bytes);

// Device pointer of staging slot s's K or V; valid for layers of `lay` (the
// slots grow to lay.layer_bytes() in begin_chunk / stage_sync).
void* staging_k(int slot);
void* staging_v(int slot);
// Makes both slots hold at least `bytes` per K and V (synchronizes the device when it grows).
void reserve(size_t bytes);

// The forward pipeline (see above). old_len: valid slots before this chunk's
// new ones; slot0, n: the chunk's new slots.
void begin_chunk(const HostLayout& lay, int64_t old_len);
void before_layer(const HostLayout& lay, int64_t layer, int64_t old_len);
void after_layer(const HostLayout& lay, int64_t layer, int64_t slot0, int64_t n);

// Out-of-forward reads (retrieval scores and gathers, streaming seeds): rows
// [0, len) of `layer` in its staging slot (slot_of(layer)) for the compute stream (which
// waits for them); call release_staged() after the kernels reading them are queued.
void stage(const HostLayout& lay, int64_t layer, int64_t len);
void release_staged();

// Waits for every queued copy of the pipeline (before the host reads pinned K/V).
void synchronize();

// dst <- src, height rows of width bytes with the given pitches; any pair of
// device / pinned host pointers. Ordered after the compute stream's queued
// work and complete on return.
void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height);

// Pinned host bytes free for a plan (MemAvailable of /proc/meminfo; 0 if unknown).
double host_available_bytes();

}  // namespace kv_offload
}  // namespace tf
