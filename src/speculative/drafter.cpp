#include "speculative/drafter.h"

#include <algorithm>

#include "core/check.h"
#include "speculative/prefill.h"

namespace tf::speculative {

ModelRunner::ModelRunner(LlamaModel& model, int64_t capacity) : model_(&model), cache_(model.make_cache(capacity)) {}

ModelRunner::ModelRunner(LlamaModel& model, FullKVCache cache, const std::vector<int32_t>& tokens)
    : model_(&model), cache_(std::move(cache)) {
  cached_.assign(tokens);
  cache_.truncate(int64_t(tokens.size()));
}

void ModelRunner::reset() {
  cache_.reset();
  cached_.clear();
}

void ModelRunner::load_prefix(const FullKVCache& src, const std::vector<int32_t>& tokens) {
  copy_prefix(src, int64_t(tokens.size()), cache_);
  cached_.assign(tokens);
}

void ModelRunner::absorb(const std::vector<int32_t>& seq) {
  rollback_to(seq);
  if (cached_.size() >= seq.size()) return;
  std::vector<int32_t> fresh(seq.begin() + int64_t(cached_.size()), seq.end());
  model_->forward(fresh, cache_, 0);
  cached_.append(fresh.begin(), fresh.end());
}

void ModelRunner::last_query(const std::vector<int32_t>& context, std::vector<std::vector<float>>& q) {
  TF_CHECK(!context.empty(), "ModelRunner::last_query: empty context");
  rollback_to(context);
  const size_t keep = std::min(cached_.size(), context.size() - 1);
  cache_.truncate(int64_t(keep));
  cached_.truncate(keep);
  std::vector<int32_t> fresh(context.begin() + int64_t(keep), context.end());
  model_->forward_capturing_last_query(fresh, cache_, 1, q);
  cached_.append(fresh.begin(), fresh.end());
}

void ModelRunner::rollback_to(const std::vector<int32_t>& seq) {
  const size_t n = cached_.common(seq);
  cache_.truncate(int64_t(n));
  cached_.truncate(n);
}

void ModelRunner::sync(const std::vector<int32_t>& context) {
  rollback_to(context);
  cached_.commit(cached_.size());
}

std::vector<int32_t> ModelRunner::prepare(const std::vector<int32_t>& seq, int64_t n_out) {
  TF_CHECK(n_out >= 1 && n_out <= int64_t(seq.size()), "ModelRunner: n_out " << n_out << " for " << seq.size()
                                                                              << " tokens");
  rollback_to(seq);
  // At least n_out tokens must be forwarded to get their logits.
  const size_t keep = std::min(cached_.size(), seq.size() - size_t(n_out));
  cache_.truncate(int64_t(keep));
  cached_.truncate(keep);
  return std::vector<int32_t>(seq.begin() + int64_t(keep), seq.end());
}

Tensor ModelRunner::logits(const std::vector<int32_t>& seq, int64_t n_out) {
  std::vector<int32_t> fresh = prepare(seq, n_out);
  Tensor out = model_->forward(fresh, cache_, n_out);
  cached_.append(fresh.begin(), fresh.end());
  return out;
}

void ModelRunner::greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) {
  if (!model_->greedy_on_device()) return Verifier::greedy_ids(seq, n_out, ids);
  std::vector<int32_t> fresh = prepare(seq, n_out);
  model_->forward_greedy(fresh, cache_, n_out, ids);
  cached_.append(fresh.begin(), fresh.end());
}

bool ModelRunner::greedy_chain(const std::vector<int32_t>& seq, int64_t k, std::vector<int32_t>& ids) {
  if (seq.empty()) return false;
  rollback_to(seq);
  const size_t keep = std::min(cached_.size(), seq.size() - 1);
  if (!model_->greedy_chain_applies(cache_, int64_t(seq.size() - keep), k)) return false;
  std::vector<int32_t> fresh = prepare(seq, 1);
  std::vector<int64_t> pos(fresh.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = cache_.length() + int64_t(i);
  model_->forward_greedy_chain(fresh, pos, cache_, k, ids);
  cached_.append(fresh.begin(), fresh.end());
  cached_.append(ids.begin(), ids.end() - 1);  // the last id was drafted, not forwarded
  return true;
}

void Verifier::greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) {
  host_greedy_ids(logits(seq, n_out), ids);
}

void Verifier::device_distributions(const std::vector<int32_t>&, int64_t, const SamplingParams&, Tensor&) {
  TF_FAIL("device_distributions: this level samples on the host (distributions_on_device() is false)");
}

void ModelRunner::device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                                       Tensor& rows) {
  std::vector<int32_t> fresh = prepare(seq, n_out);
  model_->forward_distributions(fresh, cache_, n_out, softmax_params(sp), rows);
  cached_.append(fresh.begin(), fresh.end());
}

void host_greedy_ids(const Tensor& logits, std::vector<int32_t>& ids) {
  const int64_t n = logits.dim(0), V = logits.dim(1);
  ids.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t(argmax_lowest(logits.ptr<float>() + i * V, V));
}

void sync_mirror(TokenMirror& seq, const std::vector<int32_t>& context) {
  seq.truncate(seq.common(context));
  seq.commit(seq.size());
}

int32_t draft_token(const float* logits, int64_t vocab, const SamplingParams& sp, RngStream& rng, float* q_row) {
  if (sp.greedy()) return int32_t(argmax_lowest(logits, vocab));
  thread_local RowSampler rows;
  rows.distribution(logits, vocab, sp, q_row);
  return rows.draw(q_row, vocab, rng.seed, rng.next());
}

Proposal propose_autoregressive(Verifier& v, const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                                RngStream& rng, TokenMirror& seq, DeviceSampler* device) {
  Proposal pr;
  const int64_t V = v.vocab();
  if (sp.greedy()) device = nullptr;
  if (device) {
    device->reserve(k, V);
    pr.q_device = device->view(0, k);
  } else if (!sp.greedy()) {
    pr.q.resize(size_t(k * V));  // T = 0: ids only (verify_greedy)
  }
  seq.truncate(seq.common(context));
  seq.append(context.begin() + int64_t(seq.size()), context.end());
  std::vector<int32_t> id;
  if (sp.greedy() && v.greedy_chain(seq.tokens(), k, pr.tokens)) {  // the k steps with one wait
    seq.append(pr.tokens.begin(), pr.tokens.end());
    return pr;
  }
  for (int64_t i = 0; i < k; ++i) {
    int32_t t;
    if (sp.greedy()) {  // the id alone (on a CUDA model the argmax never leaves the device)
      v.greedy_ids(seq.tokens(), 1, id);
      t = id[0];
    } else if (device) {  // the q row stays on the device; its draw comes back
      Tensor row = device->view(i, 1);
      v.device_distributions(seq.tokens(), 1, sp, row);
      t = device->draw(row, rng);
    } else {
      Tensor lg = v.logits(seq.tokens(), 1);
      t = draft_token(lg.ptr<float>(), V, sp, rng, pr.q.data() + i * V);
    }
    pr.tokens.push_back(t);
    seq.append(&t, &t + 1);
  }
  return pr;
}

Proposal ModelDrafter::propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                               RngStream& rng) {
  return propose_autoregressive(runner_, context, k, sp, rng, seq_, device_sampling_ ? &q_rows_ : nullptr);
}

Proposal VerifierDrafter::propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                                  RngStream& rng) {
  return propose_autoregressive(*v_, context, k, sp, rng, seq_, device_sampling_ ? &q_rows_ : nullptr);
}

Proposal NgramDrafter::propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams&, RngStream&) {
  Proposal pr;
  const int64_t L = int64_t(context.size());
  for (int64_t n = std::min(max_n_, L - 1); n >= 1 && pr.tokens.empty(); --n) {
    // suffix context[L-n, L); find the most recent earlier occurrence ending at e (exclusive), e < L.
    for (int64_t e = L - 1; e >= n; --e) {
      bool match = true;
      for (int64_t j = 0; j < n && match; ++j) match = context[size_t(e - n + j)] == context[size_t(L - n + j)];
      if (!match) continue;
      for (int64_t j = e; j < L && int64_t(pr.tokens.size()) < k; ++j) pr.tokens.push_back(context[size_t(j)]);
      break;
    }
  }
  pr.q.assign(pr.tokens.size() * size_t(vocab_), 0.0f);
  for (size_t i = 0; i < pr.tokens.size(); ++i) pr.q[i * size_t(vocab_) + size_t(pr.tokens[i])] = 1.0f;
  return pr;
}

LlamaModel make_layer_skip_model(const LlamaModel& target, int64_t K) {
  ModelConfig c = target.config();
  TF_CHECK(K >= 1 && K <= c.num_layers, "layer-skip draft: K = " << K << " of " << c.num_layers << " layers");
  c.num_layers = K;
  LlamaWeights w = target.weights();  // Tensors share storage through their owners
  w.layers.resize(size_t(K));
  return LlamaModel(c, std::move(w), target.max_chunk(), target.communicator());  // a shard runs with its ranks
}

LayerSkipDrafter::LayerSkipDrafter(const LlamaModel& target, int64_t K, int64_t capacity)
    : model_(std::make_unique<LlamaModel>(make_layer_skip_model(target, K))),
      inner_(std::make_unique<ModelDrafter>(*model_, capacity)) {}

}  // namespace tf::speculative
