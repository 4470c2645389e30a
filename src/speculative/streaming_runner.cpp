#include "speculative/streaming_runner.h"

#include <algorithm>

#include "core/check.h"

namespace tf::speculative {

StreamingRunner::StreamingRunner(LlamaModel& model, int64_t sink, int64_t window, int64_t max_tail, bool reindex)
    : model_(&model),
      cache_(model.config(), sink, window, sink + 2 * window + max_tail + 2, reindex, model.weights().local_kv_heads,
             model.device(), model.dtype()) {}

void StreamingRunner::reset() {
  cache_.cache().reset();
  committed_.clear();
  tail_.clear();
  base_len_ = 0;
  evicted_ = 0;
  begun_.clear();
}

void StreamingRunner::begin(const std::vector<int32_t>& prompt) {
  // Only a fresh begin_from for this very prompt is kept: after a run the
  // prompt's evicted K/V cannot be recovered.
  if (!begun_.empty() && begun_ == prompt && committed_.size() + 1 == prompt.size() && tail_.empty()) return;
  reset();
  absorb(prompt);
  begun_ = prompt;
}

void StreamingRunner::begin_from(const std::vector<int32_t>& prompt, const FullKVCache& full) {
  TF_CHECK(!prompt.empty(), "streaming runner: empty prompt");
  reset();
  const int64_t n = int64_t(prompt.size()) - 1;
  evicted_ = cache_.load_evicted(full, n);
  committed_.assign(prompt.begin(), prompt.end() - 1);
  base_len_ = cache_.length();
  begun_ = prompt;
}

void StreamingRunner::absorb(const std::vector<int32_t>& context) {
  FullKVCache& c = cache_.cache();
  const size_t target = context.empty() ? 0 : context.size() - 1;
  while (committed_.size() < target) {
    const size_t n = std::min(target - committed_.size(), size_t(cache_.window()));
    std::vector<int32_t> chunk(context.begin() + int64_t(committed_.size()),
                               context.begin() + int64_t(committed_.size() + n));
    // No logits row (nothing reads it; the K/V are the same): no copy back or wait per absorbed chunk.
    model_->forward(chunk, cache_.next_positions(int64_t(n), int64_t(committed_.size())), c, 0);
    committed_.insert(committed_.end(), chunk.begin(), chunk.end());
    evicted_ += cache_.evict();
    base_len_ = c.length();
  }
}

bool StreamingRunner::extends_committed(const std::vector<int32_t>& seq) const {
  // The committed context only grows (the chain's contract, see TokenMirror):
  // its last token stands for the rest.
  const size_t C = committed_.size();
  return seq.size() >= C + 1 && (C == 0 || seq[C - 1] == committed_.back());
}

size_t StreamingRunner::tail_common(const std::vector<int32_t>& seq) const {
  const size_t C = committed_.size();
  size_t n = 0;
  while (n < tail_.size() && C + n < seq.size() && tail_[n] == seq[C + n]) ++n;
  return n;
}

void StreamingRunner::sync(const std::vector<int32_t>& context) {
  if (!extends_committed(context)) {
    reset();
    absorb(context);
    return;
  }
  // Committed tail tokens join the committed part without a second forward.
  const size_t m = std::min(tail_common(context), context.size() - 1 - committed_.size());
  committed_.insert(committed_.end(), context.begin() + int64_t(committed_.size()),
                    context.begin() + int64_t(committed_.size() + m));
  base_len_ += int64_t(m);
  tail_.clear();
  cache_.cache().truncate(base_len_);
  evicted_ += cache_.evict();
  base_len_ = cache_.cache().length();
  absorb(context);
}

std::vector<int32_t> StreamingRunner::prepare(const std::vector<int32_t>& seq, int64_t n_out,
                                              std::vector<int64_t>& pos) {
  const size_t C = committed_.size();
  TF_CHECK(seq.size() >= C + size_t(n_out) && n_out >= 1 && extends_committed(seq),
           "streaming runner: the sequence does not extend the committed context (n_out " << n_out << ")");
  const size_t keep = std::min(tail_common(seq), seq.size() - C - size_t(n_out));
  tail_.resize(keep);
  cache_.cache().truncate(base_len_ + int64_t(keep));
  std::vector<int32_t> fresh(seq.begin() + int64_t(C + keep), seq.end());
  pos = cache_.next_positions(int64_t(fresh.size()), int64_t(C + keep));
  return fresh;
}

template <class Forward>
void StreamingRunner::step(const std::vector<int32_t>& seq, int64_t n_out, Forward&& forward) {
  std::vector<int64_t> pos;
  std::vector<int32_t> fresh = prepare(seq, n_out, pos);
  forward(fresh, pos, cache_.cache());
  tail_.insert(tail_.end(), fresh.begin(), fresh.end());
}

Tensor StreamingRunner::logits(const std::vector<int32_t>& seq, int64_t n_out) {
  Tensor out;
  step(seq, n_out, [&](const auto& t, const auto& pos, FullKVCache& c) { out = model_->forward(t, pos, c, n_out); });
  return out;
}

void StreamingRunner::greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) {
  if (!model_->greedy_on_device()) return Verifier::greedy_ids(seq, n_out, ids);
  step(seq, n_out, [&](const auto& t, const auto& pos, FullKVCache& c) { model_->forward_greedy(t, pos, c, n_out, ids); });
}

void StreamingRunner::device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                                     Tensor& rows) {
  step(seq, n_out, [&](const auto& t, const auto& pos, FullKVCache& c) {
    model_->forward_distributions(t, pos, c, n_out, softmax_params(sp), rows);
  });
}

}  // namespace tf::speculative
