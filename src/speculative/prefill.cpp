#include "speculative/prefill.h"

#include <algorithm>

#include "core/check.h"
#include "kv/slot_gather.h"

namespace tf::speculative {

PrefillSnapshot::PrefillSnapshot(LlamaModel& target, const std::vector<int32_t>& prompt, const PhaseClock& clock,
                                 int64_t capacity)
    : prompt_(prompt),
      cache_(target.make_cache(std::max<int64_t>({1, int64_t(prompt.size()), capacity}))) {
  TF_CHECK(!prompt.empty(), "prefill: the prompt has no tokens");
  const int64_t t0 = clock.now_ns();
  target.forward_capturing_last_query(prompt, cache_, 1, query_);
  prefill_ns_ = clock.now_ns() - t0;
  vocab_ = target.config().vocab_size;
  layers_ = target.config().num_layers;
}

bool PrefillSnapshot::fits(const LlamaModel& m) const {
  return m.config().vocab_size == vocab_ && m.config().num_layers == layers_ &&
         m.weights().local_kv_heads == cache_.num_kv_heads() && m.config().head_dim == cache_.head_dim();
}

FullKVCache PrefillSnapshot::take_cache() {
  TF_CHECK(!taken_, "prefill snapshot: its cache was already taken over");
  taken_ = true;
  return std::move(cache_);
}

void copy_prefix(const FullKVCache& src, int64_t n, FullKVCache& dst) {
  TF_CHECK(n >= 0 && n <= src.length() && n <= dst.capacity() && src.num_layers() >= dst.num_layers() &&
               src.num_kv_heads() == dst.num_kv_heads() && src.head_dim() == dst.head_dim(),
           "KV copy: " << n << " tokens of a cache of " << src.num_layers() << " layers x " << src.num_kv_heads()
                       << " KV heads (length " << src.length() << ") do not fit one of " << dst.num_layers()
                       << " x " << dst.num_kv_heads() << " (capacity " << dst.capacity() << ")");
  dst.reset();
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = src.position(i);
  dst.append_slots(pos.data(), n);
  if (src.offloaded() || dst.offloaded()) {
    // Layer by layer between device and pinned host memory (whichever each
    // side's layer lives in), only the n valid rows of each head.
    const size_t row = size_t(src.head_dim()) * dtype_size(src.dtype());
    const size_t sp = size_t(src.capacity()) * row, dp = size_t(dst.capacity()) * row;
    for (int64_t l = 0; l < dst.num_layers(); ++l) {
      kv_offload::copy_2d(dst.home_k(l), dp, src.home_k(l), sp, size_t(n) * row, size_t(src.num_kv_heads()));
      kv_offload::copy_2d(dst.home_v(l), dp, src.home_v(l), sp, size_t(n) * row, size_t(src.num_kv_heads()));
    }
    return;
  }
  SlotGather g;
  g.m = n;
  g.src_slots.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g.src_slots[size_t(i)] = int32_t(i);
  gather_slots(src, dst, g);
}

}  // namespace tf::speculative
