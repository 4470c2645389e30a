// Drafters: n-gram prompt lookup, layer-skip model (all layers == the target),
// ModelDrafter rollback (propose, sync back, propose again == fresh drafter).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "speculative/drafter.h"
#include "tiny_model.h"

using namespace tf;
using namespace tf::speculative;

namespace {
ModelConfig tiny(int64_t layers = 2) {
  return tf::testing::tiny_llama_config(20, 16, layers, 2, 1, 32, 256);
}
}  // namespace

TEST(SpecDrafter, NgramLongestMostRecentSuffixMatch) {
  NgramDrafter d(10, 3);
  SamplingParams sp;
  RngStream rng;
  // Suffix [1,2] occurred at the start: propose what followed.
  Proposal p = d.propose({1, 2, 3, 4, 5, 1, 2}, 4, sp, rng);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{3, 4, 5, 1}));
  ASSERT_EQ(p.q.size(), 40u);
  EXPECT_EQ(p.q[3], 1.0f);
  EXPECT_EQ(p.q[10 + 4], 1.0f);
  // The longer suffix [7,1,2] wins over the more recent [1,2].
  p = d.propose({7, 1, 2, 9, 1, 2, 8, 7, 1, 2}, 2, sp, rng);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{9, 1}));
  // Most recent occurrence among equal lengths; proposals stop at the end of the context.
  p = d.propose({5, 6, 5, 8, 5}, 5, sp, rng);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{8, 5}));
  // No match: nothing proposed.
  p = d.propose({1, 2, 3}, 4, sp, rng);
  EXPECT_TRUE(p.tokens.empty());
  EXPECT_TRUE(p.q.empty());
}

TEST(SpecDrafter, LayerSkipWithAllLayersIsTheTarget) {
  ModelConfig c = tiny(2);
  LlamaModel target(c, LlamaWeights::random(c, 3, 0.3f));
  LlamaModel full = make_layer_skip_model(target, 2);
  LlamaModel one = make_layer_skip_model(target, 1);
  EXPECT_EQ(one.config().num_layers, 1);
  EXPECT_EQ(one.weights().embed.data, target.weights().embed.data);  // shared, not copied
  std::vector<int32_t> t = {1, 5, 7, 2, 19, 0};
  auto c1 = target.make_cache(16), c2 = full.make_cache(16), c3 = one.make_cache(16);
  Tensor a = target.forward(t, c1), b = full.forward(t, c2), l1 = one.forward(t, c3);
  double diff = 0, diff1 = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, double(std::abs(a.ptr<float>()[i] - b.ptr<float>()[i])));
    diff1 = std::max(diff1, double(std::abs(a.ptr<float>()[i] - l1.ptr<float>()[i])));
  }
  EXPECT_EQ(diff, 0.0);
  EXPECT_GT(diff1, 1e-4);
  EXPECT_THROW(make_layer_skip_model(target, 3), Error);
}

TEST(SpecDrafter, ModelDrafterRollsBackByTruncate) {
  ModelConfig c = tiny(1);
  LlamaModel m(c, LlamaWeights::random(c, 4, 0.3f));
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.seed = 11;
  const std::vector<int32_t> ctx = {3, 4, 5, 6};
  ModelDrafter d(m, 64);
  RngStream r1{5, 0};
  Proposal a = d.propose(ctx, 5, sp, r1);
  ASSERT_EQ(a.tokens.size(), 5u);
  EXPECT_EQ(d.cache_length(), int64_t(ctx.size()) + 4);
  // Accept 2 of them plus a correction 0: the cache keeps the common prefix only.
  std::vector<int32_t> next = ctx;
  next.insert(next.end(), a.tokens.begin(), a.tokens.begin() + 2);
  next.push_back(a.tokens[2] == 0 ? 1 : 0);
  d.sync(next);
  EXPECT_EQ(d.cache_length(), int64_t(ctx.size()) + 2);
  RngStream r2{9, 0}, r3{9, 0};
  Proposal b = d.propose(next, 3, sp, r2);
  ModelDrafter fresh(m, 64);
  Proposal f = fresh.propose(next, 3, sp, r3);
  EXPECT_EQ(b.tokens, f.tokens);
  ASSERT_EQ(b.q.size(), f.q.size());
  for (size_t i = 0; i < b.q.size(); ++i) EXPECT_NEAR(b.q[i], f.q[i], 1e-5);
  // q rows are distributions.
  for (size_t i = 0; i < 3; ++i) {
    double s = 0;
    for (int64_t v = 0; v < c.vocab_size; ++v) s += b.q[i * size_t(c.vocab_size) + size_t(v)];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

TEST(SpecDrafter, TokenMirrorComparesPastTheCommittedWatermark) {
  TokenMirror m;
  m.assign({1, 2, 3, 4, 5, 6});
  EXPECT_EQ(m.common({1, 2, 3, 9}), 3u);
  m.truncate(5);
  m.commit(4);  // {1, 2, 3, 4} committed: later sequences extend it
  EXPECT_EQ(m.common({1, 2, 3, 4, 5, 7}), 5u);
  EXPECT_EQ(m.common({1, 2, 3, 4}), 4u);
  // Outside the contract, the full comparison of before: shorter than the
  // watermark, or disagreeing with its last token.
  EXPECT_EQ(m.common({1, 2}), 2u);
  EXPECT_EQ(m.common({1, 2, 3, 8, 5}), 3u);
  m.truncate(2);  // a rollback below the watermark lowers it
  const std::vector<int32_t> sevens = {7, 7};
  m.append(sevens.begin(), sevens.end());
  EXPECT_EQ(m.common({1, 2, 7, 7}), 4u);
  EXPECT_EQ(m.common({1, 3, 7, 7}), 1u);
}

TEST(SpecDrafter, DraftTokenIsTheDistributionAndOneDraw) {
  // draft_token against the pick it replaced in both model drafters:
  // sampling_distribution into the q row, then draw_from with the next number.
  std::mt19937 gen(5);
  std::normal_distribution<float> n(0.0f, 4.0f);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t V = trial % 2 ? 3000 : 50;
    std::vector<float> l(static_cast<size_t>(V));
    for (auto& x : l) x = n(gen);
    if (trial % 5 == 0) l[3] = l[7] = 30.0f;  // a tie at the top
    const SamplingParams sp{trial % 4 == 0 ? 0.0f : 0.6f, trial % 3 == 0 ? 1.0f : 0.9f, 1};
    RngStream a{uint64_t(trial), 4}, b = a;
    std::vector<float> want(static_cast<size_t>(V)), got(static_cast<size_t>(V), std::numeric_limits<float>::quiet_NaN());
    int32_t t_want;
    if (sp.greedy()) {
      t_want = int32_t(argmax_lowest(l.data(), V));
    } else {
      sampling_distribution(l.data(), V, sp, want.data());
      t_want = draw_from(want.data(), V, a.seed, a.next());
    }
    const int32_t t = draft_token(l.data(), V, sp, b, sp.greedy() ? nullptr : got.data());
    EXPECT_EQ(t, t_want) << trial;
    EXPECT_EQ(b.counter, a.counter);  // one number at T > 0, none at T = 0
    if (!sp.greedy()) EXPECT_EQ(std::memcmp(got.data(), want.data(), size_t(V) * sizeof(float)), 0) << trial;
  }
}

// Verifier::greedy_ids, the T = 0 decision of every level: on a CPU model it
// is argmax_lowest of the logits rows (a CUDA model takes it on the device,
// tests/gpu/test_greedy_ids_gpu.cpp), and it leaves the runner where logits()
// leaves its twin.
TEST(SpecDrafter, GreedyIdsAreTheArgmaxOfTheLogits) {
  const ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 4, 0.3f));
  EXPECT_FALSE(m.greedy_on_device());
  ModelRunner a(m, 64), b(m, 64);
  std::vector<int32_t> ctx = {1, 2, 3, 4, 5};
  a.begin(ctx), b.begin(ctx);
  std::vector<int32_t> ids, want;
  for (int step = 0; step < 8; ++step) {
    std::vector<int32_t> seq = ctx;
    for (int j = 0; j <= step % 4; ++j) seq.push_back(int32_t((step * 7 + j * 3) % c.vocab_size));
    const int64_t n_out = step % 2 ? int64_t(seq.size() - ctx.size()) + 1 : 1;
    a.greedy_ids(seq, n_out, ids);
    const Tensor lg = b.logits(seq, n_out);
    want.clear();
    for (int64_t r = 0; r < n_out; ++r) want.push_back(int32_t(argmax_lowest(lg.ptr<float>() + r * c.vocab_size, c.vocab_size)));
    ASSERT_EQ(ids, want) << "step " << step;
    EXPECT_EQ(a.cached_tokens(), b.cached_tokens());
    ctx.push_back(ids[0]);
    a.sync(ctx), b.sync(ctx);
  }
  // Greedy drafting through it proposes what draft_token picks from the logits.
  ModelDrafter d(m, 64);
  SamplingParams sp;
  RngStream rng;
  const Proposal p = d.propose(ctx, 4, sp, rng);
  EXPECT_TRUE(p.q.empty());
  ModelRunner r(m, 64);
  std::vector<int32_t> seq = ctx;
  for (int32_t t : p.tokens) {
    const Tensor lg = r.logits(seq, 1);
    EXPECT_EQ(t, draft_token(lg.ptr<float>(), c.vocab_size, sp, rng, nullptr));
    seq.push_back(t);
  }
}
