#include "speculative/streaming_drafter.h"

#include <algorithm>

#include "core/check.h"

namespace tf::speculative {

StreamingDrafter::StreamingDrafter(LlamaModel& model, int64_t sink, int64_t window, int64_t max_tail, bool reindex)
    : model_(&model), max_tail_(max_tail),
      cache_(model.config(), sink, window, sink + 2 * window + max_tail + 2, reindex,
             model.weights().local_kv_heads, model.device(), model.dtype()) {
  TF_CHECK(max_tail >= 1, "streaming drafter: the tail must hold at least one token, got " << max_tail);
}

void StreamingDrafter::reset() {
  cache_.cache().reset();
  absorbed_.clear();
  tail_.clear();
  begun_.clear();
  base_len_ = 0;
  committed_ = 0;
  evicted_ = 0;
}

Tensor StreamingDrafter::forward(const std::vector<int32_t>& tokens, int64_t true_pos, int64_t n_out) {
  ++forwards_;
  return model_->forward(tokens, cache_.next_positions(int64_t(tokens.size()), true_pos), cache_.cache(), n_out);
}

int32_t StreamingDrafter::forward_greedy(const std::vector<int32_t>& tokens, int64_t true_pos) {
  if (!model_->greedy_on_device()) {
    const Tensor lg = forward(tokens, true_pos);
    return int32_t(argmax_lowest(lg.ptr<float>(), lg.dim(1)));
  }
  ++forwards_;
  model_->forward_greedy(tokens, cache_.next_positions(int64_t(tokens.size()), true_pos), cache_.cache(), 1, ids_);
  return ids_[0];
}

void StreamingDrafter::forward_distribution(const std::vector<int32_t>& tokens, int64_t true_pos,
                                            const SamplingParams& sp, Tensor& row) {
  ++forwards_;
  model_->forward_distributions(tokens, cache_.next_positions(int64_t(tokens.size()), true_pos), cache_.cache(), 1,
                                softmax_params(sp), row);
}

void StreamingDrafter::drop_tail() {
  cache_.cache().truncate(base_len_);
  tail_.clear();
}

bool StreamingDrafter::extends_absorbed(const std::vector<int32_t>& context) const {
  const size_t a = absorbed_.size();
  return context.size() >= a + 1 && (a == 0 || context[a - 1] == absorbed_.back());
}

void StreamingDrafter::absorb_chunks(const std::vector<int32_t>& context, size_t upto) {
  while (absorbed_.size() < upto) {
    const size_t n = std::min(upto - absorbed_.size(), size_t(cache_.window()));
    std::vector<int32_t> chunk(context.begin() + int64_t(absorbed_.size()),
                               context.begin() + int64_t(absorbed_.size() + n));
    // No logits row: nothing reads it, and it cost a copy back and a wait per
    // chunk (per top step for the newly committed tokens). The K/V are the same.
    forward(chunk, int64_t(absorbed_.size()), 0);
    absorbed_.insert(absorbed_.end(), chunk.begin(), chunk.end());
    evicted_ += cache_.evict();
    base_len_ = cache_.cache().length();
  }
}

// Why skipping chunks is exact. Absorbing P tokens from an empty cache in
// W-token chunks (W = window, S = sink, W > S) evicts after every chunk:
//  - chunk 0 fills slots [0, W); nothing is evicted (W <= S + W). The sinks,
//    slots [0, S), are never written again.
//  - chunk 1 fills [W, 2W); 2W > S + W, so eviction keeps the sinks and moves
//    chunk 1 to [S, S + W). From then on, after chunk j >= 1 the cache holds
//    exactly the sinks followed by chunk j, length S + W.
//  - chunk j >= 2 therefore always starts from length S + W, is written at
//    slots [S + W, S + 2W), and every slot of the cache is visible to all of
//    its queries (the cache's positions are all below the chunk's). With
//    reindex its positions are the slots, the same for every j, and eviction
//    re-rotates its keys by the same -W; without reindex its positions are its
//    text positions jW.., which the cache's only have to precede.
// In the forward of chunk j, its layer-l K/V come from its hidden states at
// layer l, which depend on its tokens, their positions and the attention of
// layers < l over the cache before the chunk: layers < l of the cache, never
// layer l or above. Layer 0 K/V depend on nothing in the cache. So if a cache
// of that shape agrees with the sequential one on layers [0, m) before chunk
// j, it agrees on layers [0, m + 1) after it (eviction copies and re-rotates
// the same numbers). Start from the state after chunk 1 (exact sinks, the
// right positions and length) in place of the state after chunk J - 1, where
// J = F - L, F the full chunks and L the model's layers: after chunks J .. F-1,
// L of them, all L layers are what the sequential absorption gives, bit for
// bit on deterministic kernels (the same inputs in the same shapes). The
// trailing partial chunk of r tokens then runs from that exact state as it
// would sequentially (written at S + W, evicting r slots, keys re-rotated by
// -r). Each skipped chunk would have evicted exactly W tokens. With W <= S the
// window is not one chunk, so the plain loop runs.
void StreamingDrafter::absorb_from_empty(const std::vector<int32_t>& context, size_t upto) {
  const size_t W = size_t(cache_.window()), S = size_t(cache_.sink());
  const size_t L = size_t(model_->config().num_layers);
  const size_t full = upto / W;
  if (!fast_absorb_ || W <= S || full <= L + 2) {
    absorb_chunks(context, upto);
    return;
  }
  absorb_chunks(context, 2 * W);  // chunks 0 and 1: the sinks and the first eviction
  const size_t resume = (full - L) * W;
  absorbed_.insert(absorbed_.end(), context.begin() + int64_t(2 * W), context.begin() + int64_t(resume));
  evicted_ += int64_t(resume - 2 * W);
  absorb_chunks(context, upto);
}

// The tail's tokens that are now committed are absorbed where they sit
// instead of being forwarded again. The definition absorbs context[a, upto) in
// chunks of at most a window, evicting after each; the tail's matching prefix,
// cut to the first chunk, was computed after the same committed part, at the
// same slots and positions, as that chunk's first tokens are, and every kernel
// is batch invariant, so its K/V are the chunk's bit for bit. The rest of the
// first chunk is forwarded behind it before the one eviction, as in the chunk.
void StreamingDrafter::promote_tail(const std::vector<int32_t>& context, size_t upto) {
  const size_t a = absorbed_.size();
  const size_t first = std::min(upto - a, size_t(cache_.window()));
  size_t n = 0;
  while (n < tail_.size() && n < first && tail_[n] == context[a + n]) ++n;
  if (n == 0) return;
  cache_.cache().truncate(base_len_ + int64_t(n));
  absorbed_.insert(absorbed_.end(), tail_.begin(), tail_.begin() + int64_t(n));
  tail_.clear();
  if (n < first) {
    std::vector<int32_t> rest(context.begin() + int64_t(a + n), context.begin() + int64_t(a + first));
    forward(rest, int64_t(a + n), 0);
    absorbed_.insert(absorbed_.end(), rest.begin(), rest.end());
  }
  evicted_ += cache_.evict();
  base_len_ = cache_.cache().length();
}

void StreamingDrafter::absorb(const std::vector<int32_t>& context, size_t upto) {
  if (absorbed_.size() >= upto) return;
  if (reuse_tail_ && !absorbed_.empty()) promote_tail(context, upto);
  drop_tail();
  if (absorbed_.empty())
    absorb_from_empty(context, upto);
  else
    absorb_chunks(context, upto);
}

void StreamingDrafter::begin(const std::vector<int32_t>& prompt) {
  TF_CHECK(!prompt.empty(), "streaming drafter: empty prompt");
  // Kept only right after a begin with this prompt: once more is absorbed,
  // the prompt's evicted K/V cannot be recovered.
  if (!begun_.empty() && absorbed_.size() + 1 == prompt.size() && begun_ == prompt) {
    drop_tail();
    committed_ = prompt.size();
    return;
  }
  reset();
  absorb(prompt, prompt.size() - 1);
  committed_ = prompt.size();
  begun_ = prompt;
}

void StreamingDrafter::sync(const std::vector<int32_t>& context) {
  TF_CHECK(!context.empty(), "streaming drafter: empty context");
  // The tail stays: the next absorb() takes its committed prefix as it is.
  if (!reuse_tail_) drop_tail();
  if (!extends_absorbed(context)) reset();
  committed_ = context.size();
}

Proposal StreamingDrafter::propose(const std::vector<int32_t>& context, int64_t k, const SamplingParams& sp,
                                   RngStream& rng) {
  TF_CHECK(k >= 1, "streaming drafter: " << k << " proposals requested");
  TF_CHECK(!context.empty(), "streaming drafter: empty context");
  // No committed context known (a drafter used without begin/sync), or one
  // this context does not extend: all of it is the committed context.
  if (committed_ == 0 || context.size() < committed_ || !extends_absorbed(context)) sync(context);
  absorb(context, committed_ - 1);
  const size_t a = absorbed_.size();
  const size_t spec = context.size() - a;  // speculative context tokens + the last committed one
  TF_CHECK(int64_t(spec) + k - 1 <= max_tail_,
           "streaming drafter: " << spec - 1 << " speculative context tokens + the last committed one + " << k - 1
                                 << " proposals exceed its tail of " << max_tail_
                                 << " slots (the chain's speculation room)");
  // Keep the tail's common prefix with this context; the last context token
  // is always forwarded again, since its logits are not kept.
  size_t keep = 0;
  while (keep < tail_.size() && keep + 1 < spec && tail_[keep] == context[a + keep]) ++keep;
  tail_.resize(keep);
  cache_.cache().truncate(base_len_ + int64_t(keep));
  std::vector<int32_t> fresh(context.begin() + int64_t(a + keep), context.end());
  Proposal pr;
  if (sp.greedy() && model_->greedy_chain_applies(cache_.cache(), int64_t(fresh.size()), k)) {
    // The same k forwards with one host wait (their positions follow on from the first's).
    forwards_ += k;
    model_->forward_greedy_chain(fresh, cache_.next_positions(int64_t(fresh.size()), int64_t(a + keep)),
                                 cache_.cache(), k, pr.tokens);
    tail_.insert(tail_.end(), fresh.begin(), fresh.end());
    tail_.insert(tail_.end(), pr.tokens.begin(), pr.tokens.end() - 1);
    return pr;
  }
  if (sp.greedy()) {  // T = 0: ids only (verify_greedy), each taken where the logits are
    int32_t t = forward_greedy(fresh, int64_t(a + keep));
    tail_.insert(tail_.end(), fresh.begin(), fresh.end());
    for (int64_t i = 0; i < k; ++i) {
      pr.tokens.push_back(t);
      if (i + 1 == k) break;
      t = forward_greedy(std::vector<int32_t>{t}, int64_t(context.size()) + i);
      tail_.push_back(pr.tokens.back());
    }
    return pr;
  }
  const int64_t V = vocab();
  if (device_sampling_) {  // T > 0 with the rows on the device: each draw's id comes back, no row
    q_rows_.reserve(k, V);
    pr.q_device = q_rows_.view(0, k);
    Tensor row = q_rows_.view(0, 1);
    forward_distribution(fresh, int64_t(a + keep), sp, row);
    tail_.insert(tail_.end(), fresh.begin(), fresh.end());
    for (int64_t i = 0; i < k; ++i) {
      const int32_t t = q_rows_.draw(row, rng);
      pr.tokens.push_back(t);
      if (i + 1 == k) break;
      row = q_rows_.view(i + 1, 1);
      forward_distribution(std::vector<int32_t>{t}, int64_t(context.size()) + i, sp, row);
      tail_.push_back(t);
    }
    return pr;
  }
  Tensor lg = forward(fresh, int64_t(a + keep));
  tail_.insert(tail_.end(), fresh.begin(), fresh.end());
  pr.q.resize(size_t(k * V));
  for (int64_t i = 0; i < k; ++i) {
    const int32_t t = draft_token(lg.ptr<float>(), V, sp, rng, pr.q.data() + i * V);
    pr.tokens.push_back(t);
    if (i + 1 == k) break;
    lg = forward(std::vector<int32_t>{t}, int64_t(context.size()) + i);
    tail_.push_back(t);
  }
  return pr;
}

}  // namespace tf::speculative
