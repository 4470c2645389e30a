#include "speculative/streaming_drafter.h"

#include <algorithm>

#include "core/check.h"

namespace tf::speculative {

StreamingDrafter::StreamingDrafter(LlamaModel& model, int64_t sink, int64_t window, int64_t max_spec, bool reindex)
    : model_(&model), max_spec_(max_spec),
      cache_(model.config(), sink, window, sink + 2 * window + max_spec + 2, reindex,
             model.weights().local_kv_heads, model.device(), model.dtype()) {}

void StreamingDrafter::reset() {
  cache_.cache().reset();
  absorbed_.clear();
  base_len_ = 0;
  evicted_ = 0;
}

void StreamingDrafter::sync(const std::vector<int32_t>& context) {
  // Drop the speculative tail; absorbed tokens must still be a prefix of the context.
  cache_.cache().truncate(base_len_);
  if (context.size() < absorbed_.size() || !std::equal(absorbed_.begin(), absorbed_.end(), context.begin()))
    reset();
}

Proposal StreamingDrafter::propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                                   RngStream& rng) {
  TF_CHECK(k <= max_spec_, "streaming drafter: " << k << " proposals > max_spec " << max_spec_);
  TF_CHECK(!context.empty(), "streaming drafter: empty context");
  sync(context);
  FullKVCache& c = cache_.cache();
  // Absorb everything but the last context token, window-sized chunks, evicting after each.
  const size_t target = context.size() - 1;
  while (absorbed_.size() < target) {
    const size_t n = std::min(target - absorbed_.size(), size_t(cache_.window()));
    std::vector<int32_t> chunk(context.begin() + int64_t(absorbed_.size()),
                               context.begin() + int64_t(absorbed_.size() + n));
    model_->forward(chunk, cache_.next_positions(int64_t(n), int64_t(absorbed_.size())), c, 1);
    absorbed_.insert(absorbed_.end(), chunk.begin(), chunk.end());
    evicted_ += cache_.evict();
  }
  base_len_ = c.length();
  Proposal pr;
  const int64_t V = vocab();
  pr.q.resize(size_t(k * V));
  int32_t last = context.back();
  for (int64_t i = 0; i < k; ++i) {
    Tensor lg = model_->forward(std::vector<int32_t>{last},
                                cache_.next_positions(1, int64_t(context.size()) - 1 + i), c, 1);
    float* qi = pr.q.data() + i * V;
    sampling_distribution(lg.ptr<float>(), V, sp, qi);
    last = sp.greedy() ? argmax_row(qi, V) : draw_from(qi, V, rng.seed, rng.next());
    pr.tokens.push_back(last);
  }
  return pr;
}

}  // namespace tf::speculative
