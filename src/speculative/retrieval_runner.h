// The middle level of TriForce: the target's weights over a RetrievalKVCache.
// begin(prompt) builds the cache; the last prompt token, the generated tokens
// and the speculative ones go to the tail at their true positions, and the
// tail rolls back by truncate like ModelRunner.
#pragma once
#include "kv/retrieval_cache.h"
#include "speculative/drafter.h"

namespace tf::speculative {

class RetrievalRunner : public Verifier {
 public:
  // tail_capacity: generated + speculative tokens the tail must hold.
  RetrievalRunner(LlamaModel& model, RetrievalOptions opt, int64_t tail_capacity);
  int64_t vocab() const override { return model_->config().vocab_size; }
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override;
  void greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) override;
  bool distributions_on_device() const override { return model_->sampling_on_device(); }
  void device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                            Tensor& rows) override;
  void sync(const std::vector<int32_t>& context) override;
  void reset() override;
  // Builds the cache from its own prefill, unless it already holds this prompt's
  // (from begin_from or a previous run), which it then keeps.
  void begin(const std::vector<int32_t>& prompt) override;
  // Build from a prefill someone already ran: `full` holds the prompt's K/V
  // (at least P - 1 tokens), q the last prompt token's query per layer.
  void begin_from(const std::vector<int32_t>& prompt, const FullKVCache& full,
                  const std::vector<std::vector<float>>& q);
  // Re-retrieval: choose the chunks again from the whole committed context.
  void rebuild(const std::vector<int32_t>& context);
  const RetrievalKVCache& retrieval() const { return rc_; }
  int64_t tail_length() const { return int64_t(tail_.size()); }

 private:
  size_t common(const std::vector<int32_t>& seq);  // lcp of tail_ with seq[P-1:]
  // Rolls the tail back for a call with n_out rows out; the tokens to forward and their positions.
  std::vector<int32_t> prepare(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int64_t>& pos);
  // One call of logits / greedy_ids / device_distributions: prepare, then
  // forward(fresh tokens, their positions, the cache), then the tokens join the tail.
  template <class Forward>
  void step(const std::vector<int32_t>& seq, int64_t n_out, Forward&& forward);

  LlamaModel* model_;
  RetrievalKVCache rc_;
  std::vector<int32_t> prompt_;  // what the retrieved region was built from (empty: nothing built)
  // A sequence was checked to start with prompt_ in full since it was built;
  // later ones extend the committed context (the chain's contract, see
  // TokenMirror), so only their last prompt token is checked.
  bool prompt_checked_ = false;
  std::vector<int32_t> tail_;  // tokens in tail slots: context[P-1 ...]
};

}  // namespace tf::speculative
