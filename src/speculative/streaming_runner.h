// The target (or any model) over a StreamingKVCache as a verifying level of a
// chain: the middle level of `streaming-hier`, the eviction baseline TriForce
// compares its retrieval cache against. The committed context (all but its
// last token) is folded into sinks + window; everything after it (the tokens
// the level above has not committed yet, and the proposals being verified)
// sits in a tail at the following slots and rolls back by truncate. On sync,
// tail tokens that were committed are kept (no re-forward) and the cache is
// evicted back to sinks + window.
#pragma once
#include "kv/streaming_cache.h"
#include "speculative/drafter.h"

namespace tf::speculative {

class StreamingRunner : public Verifier {
 public:
  // max_tail: the most uncommitted tokens a call may hold (proposals included).
  StreamingRunner(LlamaModel& model, int64_t sink, int64_t window, int64_t max_tail, bool reindex = true);
  int64_t vocab() const override { return model_->config().vocab_size; }
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override;
  void greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) override;
  bool distributions_on_device() const override { return model_->sampling_on_device(); }
  void device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                            Tensor& rows) override;
  void sync(const std::vector<int32_t>& context) override;
  void reset() override;
  // Absorbs the prompt (but its last token) with its own forwards, unless it
  // already holds this prompt (begin_from or a previous run).
  void begin(const std::vector<int32_t>& prompt) override;
  // Start from a prefill someone already ran: `full` holds at least P - 1
  // prompt tokens; their sinks and last window are kept.
  void begin_from(const std::vector<int32_t>& prompt, const FullKVCache& full);

  const StreamingKVCache& streaming() const { return cache_; }
  int64_t committed_tokens() const { return int64_t(committed_.size()); }
  int64_t tail_length() const { return int64_t(tail_.size()); }
  int64_t evicted() const { return evicted_; }

 private:
  void absorb(const std::vector<int32_t>& context);  // fold context[0, size-1) into the committed part
  size_t tail_common(const std::vector<int32_t>& seq) const;
  // Rolls the tail back for a call with n_out rows out; the tokens to forward and their positions.
  std::vector<int32_t> prepare(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int64_t>& pos);
  // One call of logits / greedy_ids / device_distributions: prepare, then
  // forward(fresh tokens, their positions, the cache), then the tokens join the tail.
  template <class Forward>
  void step(const std::vector<int32_t>& seq, int64_t n_out, Forward&& forward);
  bool extends_committed(const std::vector<int32_t>& seq) const;

  LlamaModel* model_;
  StreamingKVCache cache_;
  std::vector<int32_t> committed_;  // context tokens folded in (their K/V possibly evicted)
  int64_t base_len_ = 0;            // cache slots of the committed part
  std::vector<int32_t> tail_;       // tokens at slots base_len_ ..: seq[committed_.size() ..]
  std::vector<int32_t> begun_;      // the prompt of the last begin
  int64_t evicted_ = 0;
};

}  // namespace tf::speculative
