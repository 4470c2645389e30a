#include "kv/retrieval_cache.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "kv/slot_gather.h"
#include "model/rope.h"
#include "ops/ops.h"

namespace tf {


RetrievalSelection select_chunks(const FullKVCache& cache, int64_t n_tokens, const std::vector<std::vector<float>>& q,
                                 int64_t num_heads, const RetrievalOptions& opt) {
  TF_CHECK(opt.chunk >= 1 && opt.budget >= opt.chunk && opt.budget % opt.chunk == 0,
           "retrieval: budget " << opt.budget << " must be a positive multiple of chunk " << opt.chunk);
  const int64_t L = cache.num_layers(), KH = cache.num_kv_heads(), D = cache.head_dim();
  const int64_t group = num_heads / KH;
  RetrievalSelection s;
  s.num_chunks = n_tokens / opt.chunk;
  s.remainder = n_tokens % opt.chunk;
  const int64_t keep = std::min(s.num_chunks, opt.budget / opt.chunk);
  s.chunks.resize(size_t(L * KH));
  s.scores.resize(size_t(L * KH));
  for (int64_t l = 0; l < L; ++l) {
    // The group's query summed over its heads: sum_h q_h . mean_k == (sum_h q_h) . mean_k.
    std::vector<double> qs(size_t(KH * D), 0.0);
    for (int64_t g = 0; g < KH; ++g)
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t d = 0; d < D; ++d) qs[size_t(g * D + d)] += q[size_t(l)][size_t(h * D + d)];
    const std::vector<double> all = chunk_scores(cache, l, qs, opt.chunk, s.num_chunks);
    for (int64_t g = 0; g < KH; ++g) {
      auto& sc = s.scores[size_t(l * KH + g)];
      sc.assign(all.begin() + g * s.num_chunks, all.begin() + (g + 1) * s.num_chunks);
      std::vector<int64_t> order;
      for (int64_t c = 1; c < s.num_chunks; ++c) order.push_back(c);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return sc[size_t(a)] > sc[size_t(b)]; });
      auto& ch = s.chunks[size_t(l * KH + g)];
      if (keep > 0) ch.push_back(0);
      for (int64_t i = 0; i + 1 < keep; ++i) ch.push_back(order[size_t(i)]);
      std::sort(ch.begin(), ch.end());
    }
  }
  return s;
}

RetrievalKVCache::RetrievalKVCache(const ModelConfig& cfg, const RetrievalOptions& opt, int64_t tail_capacity,
                                   int64_t kv_heads, Device dev, DType dtype)
    : opt_(opt), cache_(cfg.num_layers, kv_heads > 0 ? kv_heads : cfg.num_kv_heads, cfg.head_dim,
                        opt.budget + opt.chunk + tail_capacity, dev, dtype) {}

void RetrievalKVCache::build(LlamaModel& model, const std::vector<int32_t>& prompt) {
  const int64_t P = int64_t(prompt.size());
  TF_CHECK(P >= 1, "retrieval cache: empty prompt");
  FullKVCache full = model.make_cache(P);
  std::vector<std::vector<float>> q;
  model.forward_capturing_last_query(prompt, full, 1, q);
  build_from(full, P, q, model.weights().local_heads);
}

void RetrievalKVCache::build_from(const FullKVCache& full_in, int64_t n_prompt,
                                  const std::vector<std::vector<float>>& q, int64_t num_heads) {
  const int64_t P = n_prompt;
  TF_CHECK(P >= 1 && full_in.length() >= P - 1 && full_in.num_kv_heads() == cache_.num_kv_heads() &&
               full_in.num_layers() == cache_.num_layers() && int64_t(q.size()) == cache_.num_layers(),
           "retrieval cache: the prefill holds " << full_in.length() << " tokens of " << full_in.num_kv_heads()
                                                 << " KV heads; needed " << P - 1 << " of "
                                                 << cache_.num_kv_heads());
  const FullKVCache& full = full_in;
  const int64_t L = full.num_layers(), KH = full.num_kv_heads();
  chunks_on_device_ = false;
  if (retrieval_on_device(full)) {
    // Slots are claimed before the launches: the length upload would otherwise wait for them.
    const RetrievalShape shape = retrieval_shape(P - 1, opt_);
    region_ = shape.region();
    cache_.reset();
    std::vector<int32_t> pos(static_cast<size_t>(region_));
    std::iota(pos.begin(), pos.end(), 0);
    cache_.append_slots(pos.data(), region_);
    select_and_gather_on_device(full, cache_, shape, q, num_heads, scratch_);
    sel_ = RetrievalSelection{};
    sel_.num_chunks = shape.num_chunks;
    sel_.remainder = shape.remainder;
    sel_.chunks.assign(size_t(L * KH), {});
    chunks_on_device_ = shape.keep > 0;
    return;
  }
  sel_ = select_chunks(full, P - 1, q, num_heads, opt_);
  const int64_t per = int64_t(sel_.chunks.empty() ? 0 : sel_.chunks[0].size()) * opt_.chunk;
  region_ = per + sel_.remainder;
  cache_.reset();
  std::vector<int32_t> pos(static_cast<size_t>(region_));
  std::iota(pos.begin(), pos.end(), 0);
  cache_.append_slots(pos.data(), region_);
  const int64_t rem_from = sel_.num_chunks * opt_.chunk;
  SlotGather gather;
  gather.m = region_;
  gather.per_head = true;
  gather.src_slots.reserve(size_t(L * KH * region_));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t g = 0; g < KH; ++g) {
      for (int64_t c : sel_.chunks[size_t(l * KH + g)])
        for (int64_t t = c * opt_.chunk; t < (c + 1) * opt_.chunk; ++t) gather.src_slots.push_back(int32_t(t));
      for (int64_t t = rem_from; t < P - 1; ++t) gather.src_slots.push_back(int32_t(t));
    }
  gather_slots(full, cache_, gather);
}

const RetrievalSelection& RetrievalKVCache::selection() const {
  if (chunks_on_device_) {
    const int64_t rows = cache_.num_layers() * cache_.num_kv_heads();
    sel_.chunks = download_chunks(scratch_, rows, std::min(sel_.num_chunks, opt_.budget / opt_.chunk));
    chunks_on_device_ = false;
  }
  return sel_;
}

}  // namespace tf
