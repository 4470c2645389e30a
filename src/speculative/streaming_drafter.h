// A model drafter over a StreamingKVCache (TriForce's level 1).
//
// The committed context (what the chain last passed to begin() or sync()) but
// its last token is absorbed into the evicting part of the cache in chunks of
// at most `window` tokens, evicting to sinks + window after each. Everything
// after it is speculative and sits in a tail at the following slots, never
// evicted: the tokens the levels above have drafted but not committed, the
// last committed token, and this call's proposals. The tail's longest common
// prefix with the next call's context is kept (the reference's scratch slots),
// and its tokens that become committed are absorbed where they sit, not
// forwarded again (promote_tail). So a rejection at any level costs no
// re-absorption, and an acceptance costs no second forward of what it accepted.
//
// Contract (SpecChain keeps it): between begin() and the next begin()/reset(),
// every context given to propose() or sync() extends the last committed one.
// Only the tokens past the absorbed part are compared; a context shorter than
// the absorbed part, or one whose token before the tail is not the last one
// absorbed, is a rollback into evicted state and starts over.
#pragma once
#include <memory>

#include "kv/streaming_cache.h"
#include "speculative/drafter.h"

namespace tf::speculative {

class StreamingDrafter : public Drafter {
 public:
  // max_tail: the most tokens a call may put after the committed part (the
  // speculative context tokens, the last committed token and k - 1 proposals);
  // run_method passes the chain's speculation room.
  StreamingDrafter(LlamaModel& model, int64_t sink, int64_t window, int64_t max_tail, bool reindex = true);
  int64_t vocab() const override { return model_->config().vocab_size; }
  Proposal propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                   RngStream& rng) override;
  void sync(const std::vector<int32_t>& context) override;
  void reset() override;
  // Absorbs the prompt but its last token (the fast exact shortcut, see
  // absorb_from_empty), unless it already holds exactly that.
  void begin(const std::vector<int32_t>& prompt) override;
  int64_t cache_length() const override { return cache_.length(); }
  bool samples_on_device() const override { return model_->sampling_on_device(); }
  const StreamingKVCache& streaming() const { return cache_; }
  int64_t evicted() const { return evicted_; }
  int64_t absorbed_tokens() const { return int64_t(absorbed_.size()); }
  int64_t tail_length() const { return int64_t(tail_.size()); }
  // false: absorb a prompt chunk by chunk (the definition; tests compare the two).
  void set_fast_absorb(bool on) { fast_absorb_ = on; }
  // false: forward the committed tokens again after each sync instead of
  // keeping their tail K/V (the definition; tests compare the two).
  void set_reuse_tail(bool on) { reuse_tail_ = on; }
  // Forwards run since construction (tests: a rejection must not re-absorb).
  int64_t forwards() const { return forwards_; }

 private:
  void absorb(const std::vector<int32_t>& context, size_t upto);  // fold context[absorbed, upto) in
  void absorb_chunks(const std::vector<int32_t>& context, size_t upto);
  void absorb_from_empty(const std::vector<int32_t>& context, size_t upto);
  void promote_tail(const std::vector<int32_t>& context, size_t upto);
  void drop_tail();
  bool extends_absorbed(const std::vector<int32_t>& context) const;
  Tensor forward(const std::vector<int32_t>& tokens, int64_t true_pos, int64_t n_out = 1);
  // The same forward's greedy id of its last token (on the device where the model can).
  int32_t forward_greedy(const std::vector<int32_t>& tokens, int64_t true_pos);
  // The same forward's T > 0 row of its last token, left on the device (device_sampling_).
  void forward_distribution(const std::vector<int32_t>& tokens, int64_t true_pos, const SamplingParams& sp,
                            Tensor& row);

  LlamaModel* model_;
  int64_t max_tail_;
  StreamingKVCache cache_;
  std::vector<int32_t> absorbed_;  // context tokens folded into the committed part of the cache
  int64_t base_len_ = 0;           // cache length of the committed part
  std::vector<int32_t> tail_;      // tokens at slots base_len_ ..: context[absorbed_.size() ..] + proposals
  size_t committed_ = 0;           // length of the last committed context (0: none yet)
  std::vector<int32_t> begun_;     // the prompt of the last begin()
  int64_t evicted_ = 0;
  int64_t forwards_ = 0;
  bool fast_absorb_ = true;
  bool reuse_tail_ = true;
  std::vector<int32_t> ids_;  // forward_greedy's id
};

}  // namespace tf::speculative
