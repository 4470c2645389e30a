// A model drafter over a StreamingKVCache (TriForce's level 1): the committed
// context is absorbed in chunks of at most `window` tokens, evicting to sinks +
// window after each; proposals are written into a speculative tail that is
// dropped (truncate) before the next call.
#pragma once
#include <memory>

#include "kv/streaming_cache.h"
#include "speculative/drafter.h"

namespace tf::speculative {

class StreamingDrafter : public Drafter {
 public:
  // max_spec: the most tokens proposed per call.
  StreamingDrafter(LlamaModel& model, int64_t sink, int64_t window, int64_t max_spec, bool reindex = true);
  int64_t vocab() const override { return model_->config().vocab_size; }
  Proposal propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                   RngStream& rng) override;
  void sync(const std::vector<int32_t>& context) override;
  void reset() override;
  int64_t cache_length() const override { return cache_.length(); }
  const StreamingKVCache& streaming() const { return cache_; }
  int64_t evicted() const { return evicted_; }

 private:
  LlamaModel* model_;
  int64_t max_spec_;
  StreamingKVCache cache_;
  std::vector<int32_t> absorbed_;  // context tokens folded into the committed part of the cache
  int64_t base_len_ = 0;           // cache length of the committed part
  int64_t evicted_ = 0;
};

}  // namespace tf::speculative
