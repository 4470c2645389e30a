// StreamingKVCache (sinks + recent window, positions re-indexed by re-rotating
// the post-RoPE keys), the StreamingDrafter built on it, and the
// StreamingRunner (a streaming cache as a verifying level): without eviction
// it is the full model; loading a prefill already evicted equals evicting; in
// a chain its cache holds sinks + window of exactly the committed context.
#include <gtest/gtest.h>

#include <cmath>

#include "gen/autoregressive.h"
#include "kv/streaming_cache.h"
#include "speculative/chain.h"
#include "speculative/streaming_drafter.h"
#include "speculative/streaming_runner.h"
#include "tiny_model.h"

using namespace tf;
using namespace tf::speculative;

namespace {
ModelConfig tiny(int64_t vocab = 32, int64_t layers = 2) {
  return tf::testing::tiny_llama_config(vocab, 32, layers, 4, 2, 48);
}
std::vector<int32_t> seq(int64_t n, int64_t vocab) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t((i * 7 + 3) % vocab));
  return t;
}
}  // namespace

TEST(StreamingKVCache, EvictKeepsSinksAndWindowReindexed) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 5, 0.3f));
  const int64_t sink = 4, window = 8, n = 40;
  auto toks = seq(n, c.vocab_size);
  StreamingKVCache s(c, sink, window, 64, true);
  m.forward(toks, s.next_positions(n, 0), s.cache(), 1);
  EXPECT_EQ(s.evict(), n - sink - window);
  ASSERT_EQ(s.length(), sink + window);
  for (int64_t j = 0; j < sink + window; ++j) EXPECT_EQ(s.cache().position(j), j);
  EXPECT_EQ(s.next_positions(2, 999), (std::vector<int64_t>{12, 13}));
  // Layer 0 keys/values depend only on the token and its position: the kept
  // tokens written fresh at positions 0..11 must match the re-rotated ones.
  std::vector<int32_t> kept(toks.begin(), toks.begin() + sink);
  kept.insert(kept.end(), toks.end() - window, toks.end());
  FullKVCache ref = m.make_cache(16);
  m.forward(kept, ref, 1);
  double dk = 0, dv = 0;
  for (int64_t h = 0; h < c.num_kv_heads; ++h)
    for (int64_t j = 0; j < sink + window; ++j)
      for (int64_t d = 0; d < c.head_dim; ++d) {
        dk = std::max(dk, double(std::abs(s.cache().k_at(0, h, j)[d] - ref.k_at(0, h, j)[d])));
        dv = std::max(dv, double(std::abs(s.cache().v_at(0, h, j)[d] - ref.v_at(0, h, j)[d])));
      }
  EXPECT_LT(dk, 1e-4);
  // V is not rotated, so only the GEMM's blocking for 40 vs 12 rows can differ (OpenBLAS picks kernels by size).
  EXPECT_LT(dv, 1e-5);
  EXPECT_EQ(s.evict(), 0);  // already within budget
}

TEST(StreamingKVCache, WithoutReindexKeepsTextPositions) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 6, 0.3f));
  StreamingKVCache s(c, 2, 3, 32, false);
  auto toks = seq(10, c.vocab_size);
  m.forward(toks, s.next_positions(10, 0), s.cache(), 1);
  s.evict();
  std::vector<int32_t> expect = {0, 1, 7, 8, 9};
  for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(s.cache().position(j), expect[size_t(j)]);
  EXPECT_EQ(s.next_positions(1, 10), (std::vector<int64_t>{10}));
  EXPECT_NE(s.cache().view(0).positions, nullptr);  // attention masks by these positions
}

TEST(StreamingDrafter, NoEvictionMatchesModelDrafter) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 7, 0.3f));
  SamplingParams sp;
  sp.temperature = 0.7f;
  auto ctx = seq(20, c.vocab_size);
  StreamingDrafter sd(m, 4, 64, 6);
  ModelDrafter md(m, 128);
  RngStream r1{3, 0}, r2{3, 0};
  Proposal a = sd.propose(ctx, 5, sp, r1), b = md.propose(ctx, 5, sp, r2);
  EXPECT_EQ(a.tokens, b.tokens);
  for (size_t i = 0; i < a.q.size(); ++i) ASSERT_NEAR(a.q[i], b.q[i], 1e-5);
  EXPECT_EQ(sd.evicted(), 0);
}

TEST(StreamingDrafter, GreedyChainEqualsAutoregressiveWithBoundedCache) {
  ModelConfig tc = tiny(32, 2);
  LlamaModel target(tc, LlamaWeights::random(tc, 8, 0.3f));
  LlamaModel draft = make_layer_skip_model(target, 1);
  auto prompt = seq(40, tc.vocab_size);
  FullKVCache cache = target.make_cache(256);
  auto ref = generate_autoregressive(target, cache, prompt, 96, SamplingParams{}, {}).tokens;
  const int64_t sink = 4, window = 16;
  for (int64_t g : {2, 5}) {
    StreamingDrafter d(draft, sink, window, g);
    SpecChain chain(d, {&target}, ChainOptions{{g}});
    int64_t max_len = 0;
    chain.on_step = [&](const SpecChain& ch, const std::vector<int32_t>&, const VerifyResult&) {
      max_len = std::max(max_len, ch.drafter().cache_length());
    };
    ChainResult r = chain.generate(prompt, 96, SamplingParams{});
    EXPECT_EQ(r.gen.tokens, ref) << "gamma " << g;
    EXPECT_LE(max_len, sink + window + g);  // the committed part + the kept tail (at most its room, gamma)
    EXPECT_GT(d.evicted(), 0);
    EXPECT_GT(r.levels[1].accepted, 0);
  }
}

TEST(StreamingKVCache, LoadEvictedEqualsEvict) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 5, 0.3f));
  const int64_t sink = 3, window = 7, n = 30;
  auto toks = seq(n, c.vocab_size);
  StreamingKVCache a(c, sink, window, 64, true);
  m.forward(toks, a.next_positions(n, 0), a.cache(), 1);
  a.evict();
  FullKVCache full = m.make_cache(n);
  m.forward(toks, full, 1);
  StreamingKVCache b(c, sink, window, 64, true);
  EXPECT_EQ(b.load_evicted(full, n), n - sink - window);
  ASSERT_EQ(a.length(), b.length());
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t h = 0; h < c.num_kv_heads; ++h)
      for (int64_t j = 0; j < a.length(); ++j) {
        EXPECT_EQ(a.cache().position(j), b.cache().position(j));
        for (int64_t d = 0; d < c.head_dim; ++d) {
          ASSERT_FLOAT_EQ(a.cache().k_at(l, h, j)[d], b.cache().k_at(l, h, j)[d]) << l << " " << h << " " << j;
          ASSERT_FLOAT_EQ(a.cache().v_at(l, h, j)[d], b.cache().v_at(l, h, j)[d]);
        }
      }
}

TEST(StreamingRunner, NoEvictionMatchesModelRunner) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 7, 0.3f));
  auto ctx = seq(20, c.vocab_size);
  StreamingRunner sr(m, 4, 64, 16);
  ModelRunner mr(m, 128);
  sr.begin(ctx);
  mr.begin(ctx);
  std::vector<int32_t> s = ctx;
  for (int step = 0; step < 4; ++step) {
    s.push_back(int32_t((step * 3 + 1) % c.vocab_size));
    s.push_back(int32_t((step * 5 + 2) % c.vocab_size));
    Tensor a = sr.logits(s, 3), b = mr.logits(s, 3);
    for (int64_t i = 0; i < 3 * c.vocab_size; ++i) ASSERT_NEAR(a.ptr<float>()[i], b.ptr<float>()[i], 1e-4);
    s.pop_back();  // commit all but the last
    sr.sync(s);
    mr.sync(s);
    EXPECT_EQ(sr.committed_tokens(), int64_t(s.size()) - 1);
    EXPECT_EQ(sr.tail_length(), 0);
  }
  EXPECT_EQ(sr.evicted(), 0);
}

TEST(StreamingRunner, MiddleLevelHoldsSinksAndWindowOfTheCommittedContext) {
  ModelConfig tc = tiny(32, 2);
  LlamaModel target(tc, LlamaWeights::random(tc, 8, 0.3f));
  LlamaModel draft = make_layer_skip_model(target, 1);
  auto prompt = seq(40, tc.vocab_size);
  FullKVCache cache = target.make_cache(256);
  auto ref = generate_autoregressive(target, cache, prompt, 96, SamplingParams{}, {}).tokens;
  const int64_t sink = 2, window = 12;
  for (float temp : {0.0f, 1.0f}) {
    StreamingDrafter d(draft, 4, 8, 6);  // tail: 3 speculative tokens + 1 + 1 proposal
    StreamingRunner mid(target, sink, window, 16);
    ModelRunner top(target, 256);
    SpecChain chain({&mid, &top}, d, ChainOptions{{2, 4}});
    int64_t checked = 0;
    chain.on_step = [&](const SpecChain&, const std::vector<int32_t>& ctx, const VerifyResult&) {
      ++checked;
      EXPECT_EQ(mid.committed_tokens(), int64_t(ctx.size()) - 1);
      EXPECT_EQ(mid.tail_length(), 0);
      EXPECT_LE(mid.streaming().length(), sink + window);
      EXPECT_EQ(mid.streaming().length(), std::min<int64_t>(int64_t(ctx.size()) - 1, sink + window));
    };
    SamplingParams sp;
    sp.temperature = temp;
    sp.seed = 5;
    ChainResult r = chain.generate(prompt, 96, sp);
    if (temp == 0.0f) EXPECT_EQ(r.gen.tokens, ref);
    EXPECT_GT(checked, 10);
    EXPECT_GT(mid.evicted(), 0);
    EXPECT_GT(r.levels[2].accepted, 0);
  }
}
