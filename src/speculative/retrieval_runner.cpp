#include "speculative/retrieval_runner.h"

#include <algorithm>

#include "core/check.h"

namespace tf::speculative {

RetrievalRunner::RetrievalRunner(LlamaModel& model, RetrievalOptions opt, int64_t tail_capacity)
    : model_(&model), rc_(model.config(), opt, tail_capacity + 1, model.weights().local_kv_heads, model.device(), model.dtype()) {}

void RetrievalRunner::reset() {
  rc_.cache().reset();
  prompt_.clear();
  prompt_checked_ = false;
  tail_.clear();
}

void RetrievalRunner::begin(const std::vector<int32_t>& prompt) {
  if (!prompt_.empty() && prompt_ == prompt) {
    sync(prompt);
    return;
  }
  reset();
  rc_.build(*model_, prompt);
  prompt_ = prompt;
}

void RetrievalRunner::begin_from(const std::vector<int32_t>& prompt, const FullKVCache& full,
                                 const std::vector<std::vector<float>>& q) {
  reset();
  rc_.build_from(full, int64_t(prompt.size()), q, model_->weights().local_heads);
  prompt_ = prompt;
}

void RetrievalRunner::rebuild(const std::vector<int32_t>& context) {
  // The committed context becomes the new "prompt": chunks are scored against
  // the query of its last token, whose K/V then lives in the tail as usual.
  reset();
  rc_.build(*model_, context);
  prompt_ = context;
}

size_t RetrievalRunner::common(const std::vector<int32_t>& seq) {
  const size_t P = prompt_.size();
  TF_CHECK(!prompt_.empty() && seq.size() >= P && seq[P - 1] == prompt_.back() &&
               (prompt_checked_ || std::equal(prompt_.begin(), prompt_.end(), seq.begin())),
           "retrieval runner: the context does not start with the prompt given to begin()");
  prompt_checked_ = true;
  size_t n = 0;
  while (n < tail_.size() && P - 1 + n < seq.size() && tail_[n] == seq[P - 1 + n]) ++n;
  return n;
}

void RetrievalRunner::sync(const std::vector<int32_t>& context) {
  const size_t n = common(context);
  tail_.resize(n);
  rc_.cache().truncate(rc_.region() + int64_t(n));
}

std::vector<int32_t> RetrievalRunner::prepare(const std::vector<int32_t>& seq, int64_t n_out,
                                              std::vector<int64_t>& pos) {
  const size_t P = prompt_.size();
  const size_t tail_len = seq.size() - (P - 1);
  TF_CHECK(n_out >= 1 && size_t(n_out) <= tail_len, "retrieval runner: n_out " << n_out << " reaches into the prompt");
  const size_t keep = std::min(common(seq), tail_len - size_t(n_out));
  tail_.resize(keep);
  rc_.cache().truncate(rc_.region() + int64_t(keep));
  std::vector<int32_t> fresh(seq.begin() + int64_t(P - 1 + keep), seq.end());
  pos.resize(fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) pos[i] = int64_t(P - 1 + keep + i);
  return fresh;
}

template <class Forward>
void RetrievalRunner::step(const std::vector<int32_t>& seq, int64_t n_out, Forward&& forward) {
  std::vector<int64_t> pos;
  std::vector<int32_t> fresh = prepare(seq, n_out, pos);
  forward(fresh, pos, rc_.cache());
  tail_.insert(tail_.end(), fresh.begin(), fresh.end());
}

Tensor RetrievalRunner::logits(const std::vector<int32_t>& seq, int64_t n_out) {
  Tensor out;
  step(seq, n_out, [&](const auto& t, const auto& pos, FullKVCache& c) { out = model_->forward(t, pos, c, n_out); });
  return out;
}

void RetrievalRunner::greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) {
  if (!model_->greedy_on_device()) return Verifier::greedy_ids(seq, n_out, ids);
  step(seq, n_out, [&](const auto& t, const auto& pos, FullKVCache& c) { model_->forward_greedy(t, pos, c, n_out, ids); });
}

void RetrievalRunner::device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                                     Tensor& rows) {
  step(seq, n_out, [&](const auto& t, const auto& pos, FullKVCache& c) {
    model_->forward_distributions(t, pos, c, n_out, softmax_params(sp), rows);
  });
}

}  // namespace tf::speculative
