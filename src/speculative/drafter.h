// Drafters: the bottom level of a speculative chain. A drafter sees the
// committed context (prompt + every token emitted so far), proposes k tokens
// with the full-vocab distribution q each was drawn from, and is told the
// committed context again after verification (sync), where it rolls back
// whatever speculative state no longer matches.
//
// ModelRunner is the cache bookkeeping shared by model drafters and by the
// verifying levels of a chain: it remembers which tokens its FullKVCache holds,
// and on every call truncates the cache to the longest common prefix with the
// requested sequence (that truncate IS the rollback) before forwarding the rest.
// The prefix is found at O(new tokens) (TokenMirror): sync() marks the
// committed context, which later sequences extend.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "gen/sampling.h"
#include "kv/full_cache.h"
#include "model/llama.h"
#include "speculative/device_sampler.h"
#include "speculative/token_mirror.h"
#include "speculative/verify.h"

namespace tf::speculative {

// A verifying level of a chain: logits of a model over a context, with its own
// cache state that it rolls back on sync.
class Verifier {
 public:
  virtual ~Verifier() = default;
  virtual int64_t vocab() const = 0;
  // Logits [n_out, vocab] after each of the last n_out tokens of seq.
  virtual Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) = 0;
  // The T = 0 decision for the same call: ids[i] = argmax_lowest of row i of
  // logits(seq, n_out), the same ids and the same state afterwards. Default:
  // logits() and a host scan of each row. The runners on a model that takes
  // the argmax on the device (LlamaModel::greedy_on_device) bring back only
  // the n_out ids.
  virtual void greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids);
  // k greedy draft tokens after seq with one host wait: ids[i] is what
  // greedy_ids(seq + ids[0..i), 1) gives, and the state afterwards is the
  // same. False (nothing done) where this level cannot chain its steps
  // (LlamaModel::greedy_chain_applies); the caller then makes the k calls.
  virtual bool greedy_chain(const std::vector<int32_t>& /*seq*/, int64_t /*k*/, std::vector<int32_t>& /*ids*/) {
    return false;
  }
  // The T > 0 counterpart where the logits are (LlamaModel::sampling_on_device):
  // rows (CUDA f32 [n_out, vocab()], the caller's) <- the sampling
  // distribution of each row of logits(seq, n_out), the same state afterwards,
  // nothing copied back (LlamaModel::forward_distributions). Only where
  // distributions_on_device(); the default has none.
  virtual bool distributions_on_device() const { return false; }
  virtual void device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                                    Tensor& rows);
  // Roll back to the longest common prefix with the committed context.
  virtual void sync(const std::vector<int32_t>& context) = 0;
  virtual void reset() = 0;
  // A new prompt. Default: forget everything. A level that already holds a
  // prefix of this prompt (a reused prefill) may keep it.
  virtual void begin(const std::vector<int32_t>& prompt) { reset(); }
};

class ModelRunner : public Verifier {
 public:
  // model must outlive the runner.
  ModelRunner(LlamaModel& model, int64_t capacity);
  // Adopts `cache` (e.g. an offloaded target's prefill snapshot) holding
  // `tokens` in its first slots; its later slots are dropped.
  ModelRunner(LlamaModel& model, FullKVCache cache, const std::vector<int32_t>& tokens);
  LlamaModel& model() { return *model_; }
  int64_t vocab() const override { return model_->config().vocab_size; }
  const FullKVCache& cache() const { return cache_; }
  const std::vector<int32_t>& cached_tokens() const { return cached_.tokens(); }

  // Logits [n_out, vocab] after each of the last n_out tokens of seq
  // (1 <= n_out <= seq.size()); the cache then holds all of seq.
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override;
  void greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) override;
  bool greedy_chain(const std::vector<int32_t>& seq, int64_t k, std::vector<int32_t>& ids) override;
  bool distributions_on_device() const override { return model_->sampling_on_device(); }
  void device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                            Tensor& rows) override;
  // Roll the cache back to its longest common prefix with the committed `context`.
  void sync(const std::vector<int32_t>& context) override;
  void reset() override;
  // Keeps the cached prefix the prompt shares (rollback == truncate).
  void begin(const std::vector<int32_t>& prompt) override { sync(prompt); }
  // Start from an existing cache holding `tokens` (its first tokens.size()
  // slots; e.g. the target's prefill, or its first layers for a layer-skip model).
  void load_prefix(const FullKVCache& src, const std::vector<int32_t>& tokens);
  // Forwards the tokens of seq its cache lacks, without logits (a draft model's own prefill of the prompt).
  void absorb(const std::vector<int32_t>& seq);
  // The post-RoPE query of context's last token per layer (for re-retrieval);
  // the cache then holds all of context.
  void last_query(const std::vector<int32_t>& context, std::vector<std::vector<float>>& q);

 private:
  void rollback_to(const std::vector<int32_t>& seq);  // truncate to the common prefix (not a commit)
  // Rolls back for a call with n_out rows out; the tokens of seq to forward.
  std::vector<int32_t> prepare(const std::vector<int32_t>& seq, int64_t n_out);

  LlamaModel* model_;
  FullKVCache cache_;
  TokenMirror cached_;  // token of each cache slot
};

struct Proposal {
  std::vector<int32_t> tokens;
  // [tokens.size(), vocab]; model drafters and middle levels leave it empty at
  // T = 0, where verification compares ids only (verify_greedy).
  std::vector<float> q;
  // T > 0 with device sampling (Drafter::set_device_sampling): the same rows
  // on CUDA, [tokens.size(), vocab], in the proposer's buffer (valid until its
  // next call); q stays empty.
  Tensor q_device;
};

// The softmax of a level's sampling (temperature and top-p) as the ops take it.
inline ops::SoftmaxParams softmax_params(const SamplingParams& sp) {
  ops::SoftmaxParams p;
  p.temperature = sp.temperature, p.top_p = sp.top_p;
  return p;
}

// A drafter's pick of one token from its logits row [vocab]: the argmax at
// T = 0 (q_row not read or written, may be null); otherwise q_row <- the
// row's distribution (sampling_distribution) and a draw from it with the next
// number of rng. Every model drafter picks through it, at T = 0 where its
// logits are on the host (a CPU model, a vocab-parallel shard); elsewhere the
// greedy pick is the device's (Verifier::greedy_ids, LlamaModel::forward_greedy).
int32_t draft_token(const float* logits, int64_t vocab, const SamplingParams& sp, RngStream& rng, float* q_row);
// ids[i] <- argmax_lowest of row i of host logits [n, vocab].
void host_greedy_ids(const Tensor& logits, std::vector<int32_t>& ids);

// k tokens drawn one at a time from v's logits after context (+ the tokens so
// far). seq: the caller's copy of its last sequence, brought to context at
// O(new tokens) rather than copied. With `device` (T > 0): the rows and
// draws stay on the device (Proposal::q_device, in device's buffer).
Proposal propose_autoregressive(Verifier& v, const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                                RngStream& rng, TokenMirror& seq, DeviceSampler* device = nullptr);
// The committed context for such a copy.
void sync_mirror(TokenMirror& seq, const std::vector<int32_t>& context);

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual int64_t vocab() const = 0;
  // Up to k tokens following `context` (k exactly for model drafters; an
  // n-gram drafter may propose fewer, even none).
  virtual Proposal propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                           RngStream& rng) = 0;
  // The committed context after verification: roll back speculative state.
  virtual void sync(const std::vector<int32_t>& context) = 0;
  // Forget everything.
  virtual void reset() = 0;
  // A new prompt; a drafter prepared for it (a reused prefill) may keep its state.
  virtual void begin(const std::vector<int32_t>& prompt) { reset(); }
  // Tokens of model state currently held (cache length), -1 if stateless.
  virtual int64_t cache_length() const { return -1; }
  // Whether this drafter can keep its T > 0 rows and draws on the device, and
  // the chain's choice for the next proposals (on only where it can): with it,
  // T > 0 proposals carry q_device instead of q.
  virtual bool samples_on_device() const { return false; }
  virtual void set_device_sampling(bool on) { device_sampling_ = on && samples_on_device(); }
  bool device_sampling() const { return device_sampling_; }

 protected:
  bool device_sampling_ = false;
  DeviceSampler q_rows_;  // the device rows of the proposals (device_sampling_)
};

// A (small) LlamaModel with its own FullKVCache; rollback by truncate.
class ModelDrafter : public Drafter {
 public:
  ModelDrafter(LlamaModel& model, int64_t capacity) : runner_(model, capacity) {}
  int64_t vocab() const override { return runner_.vocab(); }
  Proposal propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                   RngStream& rng) override;
  bool samples_on_device() const override { return runner_.distributions_on_device(); }
  void sync(const std::vector<int32_t>& context) override {
    runner_.sync(context);
    sync_mirror(seq_, context);
  }
  void reset() override {
    runner_.reset();
    seq_.clear();
  }
  void begin(const std::vector<int32_t>& prompt) override {
    runner_.begin(prompt);
    sync_mirror(seq_, prompt);
  }
  int64_t cache_length() const override { return runner_.cache().length(); }
  const ModelRunner& runner() const { return runner_; }
  ModelRunner& runner() { return runner_; }

 private:
  ModelRunner runner_;
  TokenMirror seq_;
};

// Prompt lookup: the longest suffix of the context of length max_n..1 that
// also occurs earlier (most recent occurrence) proposes the tokens that
// followed it; q is one-hot. No match: no proposal.
class NgramDrafter : public Drafter {
 public:
  NgramDrafter(int64_t vocab, int64_t max_n = 3) : vocab_(vocab), max_n_(max_n) {}
  int64_t vocab() const override { return vocab_; }
  Proposal propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                   RngStream& rng) override;
  void sync(const std::vector<int32_t>&) override {}
  void reset() override {}

 private:
  int64_t vocab_, max_n_;
};

// Any verifying level used as the bottom of a chain: proposes k tokens one at
// a time from its own logits (e.g. the target on a retrieval cache drafting
// for the full target, the `retrieval` method).
class VerifierDrafter : public Drafter {
 public:
  explicit VerifierDrafter(std::unique_ptr<Verifier> v) : v_(std::move(v)) {}
  int64_t vocab() const override { return v_->vocab(); }
  Proposal propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                   RngStream& rng) override;
  bool samples_on_device() const override { return v_->distributions_on_device(); }
  void sync(const std::vector<int32_t>& context) override {
    v_->sync(context);
    sync_mirror(seq_, context);
  }
  void reset() override {
    v_->reset();
    seq_.clear();
  }
  void begin(const std::vector<int32_t>& prompt) override {
    v_->begin(prompt);
    sync_mirror(seq_, prompt);
  }
  Verifier& verifier() { return *v_; }
  const Verifier& verifier() const { return *v_; }

 private:
  std::unique_ptr<Verifier> v_;
  TokenMirror seq_;
};

// The target's first K layers + its final norm and head (weights shared, not copied).
LlamaModel make_layer_skip_model(const LlamaModel& target, int64_t K);

class LayerSkipDrafter : public Drafter {
 public:
  LayerSkipDrafter(const LlamaModel& target, int64_t K, int64_t capacity);
  int64_t vocab() const override { return inner_->vocab(); }
  Proposal propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                   RngStream& rng) override {
    return inner_->propose(context, k, sp, rng);
  }
  void sync(const std::vector<int32_t>& context) override { inner_->sync(context); }
  void reset() override { inner_->reset(); }
  void begin(const std::vector<int32_t>& prompt) override { inner_->begin(prompt); }
  int64_t cache_length() const override { return inner_->cache_length(); }
  bool samples_on_device() const override { return inner_->samples_on_device(); }
  void set_device_sampling(bool on) override {
    inner_->set_device_sampling(on);
    device_sampling_ = inner_->device_sampling();
  }
  ModelRunner& runner() { return inner_->runner(); }

 private:
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<ModelDrafter> inner_;
};

}  // namespace tf::speculative
