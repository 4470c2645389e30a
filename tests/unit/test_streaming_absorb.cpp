// The StreamingDrafter's prompt absorption: the shortcut (chunks 0 and 1, then
// only the last L full chunks and the partial one) must leave the cache bit
// for bit as the chunk-by-chunk definition does, for every layer count, prompt
// shape, sink/window (W <= sink included) and with or without re-indexing;
// and in a chain, rejections at the levels above never re-absorb the prompt.
#include <gtest/gtest.h>

#include <cstring>

#include "gen/autoregressive.h"
#include "speculative/chain.h"
#include "speculative/retrieval_runner.h"
#include "speculative/streaming_drafter.h"
#include "tiny_model.h"

using namespace tf;
using namespace tf::speculative;

namespace {

std::vector<int32_t> tokens(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t((i * 7 + i * i * salt + 3) % vocab));
  return t;
}

// Every K and V bit, every position, the length and the eviction count.
void expect_same_cache(const StreamingDrafter& a, const StreamingDrafter& b, const std::string& what) {
  const FullKVCache& x = a.streaming().cache();
  const FullKVCache& y = b.streaming().cache();
  ASSERT_EQ(x.length(), y.length()) << what;
  EXPECT_EQ(a.evicted(), b.evicted()) << what;
  EXPECT_EQ(a.absorbed_tokens(), b.absorbed_tokens()) << what;
  auto& xm = const_cast<FullKVCache&>(x);
  auto& ym = const_cast<FullKVCache&>(y);
  for (int64_t j = 0; j < x.length(); ++j) ASSERT_EQ(x.position(j), y.position(j)) << what << " slot " << j;
  const size_t bytes = size_t(x.head_dim()) * sizeof(float);
  for (int64_t l = 0; l < x.num_layers(); ++l)
    for (int64_t h = 0; h < x.num_kv_heads(); ++h)
      for (int64_t j = 0; j < x.length(); ++j) {
        ASSERT_EQ(std::memcmp(xm.k_at(l, h, j), ym.k_at(l, h, j), bytes), 0)
            << what << ": K of layer " << l << " head " << h << " slot " << j;
        ASSERT_EQ(std::memcmp(xm.v_at(l, h, j), ym.v_at(l, h, j), bytes), 0)
            << what << ": V of layer " << l << " head " << h << " slot " << j;
      }
}

}  // namespace

TEST(StreamingAbsorb, ShortcutIsBitIdenticalToChunkByChunk) {
  int64_t skipped_cases = 0;
  for (int64_t layers : {1, 2, 3}) {
    ModelConfig c = tf::testing::tiny_llama_config(32, 32, layers, 4, 2, 48, 4096);
    LlamaModel m(c, LlamaWeights::random(c, 40 + uint64_t(layers), 0.5f));
    for (auto [sink, window] : std::vector<std::pair<int64_t, int64_t>>{{4, 8}, {2, 13}, {0, 5}, {8, 8}, {9, 4}}) {
      const int64_t W = window;
      // < W, exactly k*W, k*W + r, and many chunks (+1: the last prompt token stays out of the cache).
      for (int64_t absorbed : {W - 3, 3 * W, 7 * W, 7 * W + 3, 9 * W + W - 1, 40 * W + 5}) {
        if (absorbed < 1) continue;
        for (bool reindex : {true, false}) {
          const auto prompt = tokens(absorbed + 1, c.vocab_size, layers + W);
          StreamingDrafter fast(m, sink, window, 8, reindex), slow(m, sink, window, 8, reindex);
          slow.set_fast_absorb(false);
          fast.begin(prompt);
          slow.begin(prompt);
          const std::string what = std::to_string(layers) + " layers, sink " + std::to_string(sink) + ", window " +
                                   std::to_string(window) + ", " + std::to_string(absorbed) + " tokens, reindex " +
                                   std::to_string(reindex);
          expect_same_cache(fast, slow, what);
          if (fast.forwards() < slow.forwards()) ++skipped_cases;
          // Both propose the same next tokens from there.
          SamplingParams sp;
          RngStream r1{1, 0}, r2{1, 0};
          EXPECT_EQ(fast.propose(prompt, 3, sp, r1).tokens, slow.propose(prompt, 3, sp, r2).tokens) << what;
        }
      }
    }
  }
  EXPECT_GT(skipped_cases, 20);  // the shortcut ran (the forwards it saved), not only the fallback
}

TEST(StreamingAbsorb, ShortcutSkipsAllButTheLastLayersChunks) {
  ModelConfig c = tf::testing::tiny_llama_config(32, 32, 2, 4, 2, 48, 4096);
  LlamaModel m(c, LlamaWeights::random(c, 3, 0.5f));
  const auto prompt = tokens(1000 * 1 + 1, c.vocab_size, 5);
  StreamingDrafter d(m, 4, 16, 8);
  d.begin(prompt);
  // 1000 = 62 chunks of 16 + 8: chunks 0, 1, the last 2 and the partial one.
  EXPECT_EQ(d.forwards(), 5);
  EXPECT_EQ(d.evicted(), 1000 - 4 - 16);
  d.begin(prompt);  // the same prompt again: kept
  EXPECT_EQ(d.forwards(), 5);
}

TEST(StreamingAbsorb, RejectionsAboveNeverReabsorbThePrompt) {
  ModelConfig tc = tf::testing::tiny_llama_config(32, 32, 2, 4, 2, 48, 4096);
  LlamaModel target(tc, LlamaWeights::random(tc, 8, 0.5f));
  LlamaModel draft = make_layer_skip_model(target, 1);
  const auto prompt = tokens(1500, tc.vocab_size, 3);
  FullKVCache cache = target.make_cache(2048);
  const auto ref = generate_autoregressive(target, cache, prompt, 48, SamplingParams{}, {}).tokens;
  StreamingDrafter d(draft, 4, 12, 16);
  d.set_fast_absorb(false);  // so that a re-absorption would cost 125 forwards
  RetrievalRunner mid(target, RetrievalOptions{64, 4}, 128);
  ModelRunner top(target, 2048);
  SpecChain chain({&mid, &top}, d, ChainOptions{{2, 4}, ResampleMode::residual, ResampleMode::residual, 2048});
  d.begin(prompt);
  const int64_t after_begin = d.forwards();
  EXPECT_EQ(after_begin, (1499 + 11) / 12);
  ChainResult r = chain.generate(prompt, 48, SamplingParams{});
  EXPECT_EQ(r.gen.tokens, ref);
  // Rejections happened at both levels, and yet each proposal cost at most
  // its k forwards, plus one chunk of newly committed tokens per top step.
  EXPECT_LT(r.levels[1].accepted, r.levels[1].drafted);
  EXPECT_LT(r.levels[2].accepted, r.levels[2].drafted);
  EXPECT_LE(d.forwards() - after_begin, r.levels[1].steps * 2 + r.top_steps);
  EXPECT_LE(d.streaming().length() - d.tail_length(), 4 + 12);  // the committed part; the last tail stays
}

// After each verification the tail's committed tokens are absorbed where they
// sit (promote_tail) instead of being forwarded again: the same tokens at every
// temperature, the same cache bit for bit (batch-invariant kernels), fewer forwards.
TEST(StreamingAbsorb, TailReuseIsBitIdenticalToForwardingAgain) {
  ModelConfig tc = tf::testing::tiny_llama_config(32, 32, 2, 4, 2, 48, 4096);
  LlamaModel target(tc, LlamaWeights::random(tc, 11, 0.5f));
  LlamaModel draft = make_layer_skip_model(target, 1);
  int64_t saved_cases = 0;
  for (auto [sink, window] : std::vector<std::pair<int64_t, int64_t>>{{4, 8}, {2, 13}, {8, 8}, {3, 4}}) {
    for (bool reindex : {true, false}) {
      for (float temperature : {0.0f, 0.8f}) {
        const auto prompt = tokens(3 * window + 5, tc.vocab_size, sink + window);
        StreamingDrafter reuse(draft, sink, window, 8, reindex), again(draft, sink, window, 8, reindex);
        again.set_reuse_tail(false);
        ModelRunner top1(target, 512), top2(target, 512);
        ChainOptions opt{{3}, ResampleMode::residual, ResampleMode::residual, 512};
        SpecChain c1({&top1}, reuse, opt), c2({&top2}, again, opt);
        const SamplingParams sp{temperature, 1.0f, 7};
        const ChainResult r1 = c1.generate(prompt, 40, sp), r2 = c2.generate(prompt, 40, sp);
        const std::string what = "sink " + std::to_string(sink) + ", window " + std::to_string(window) +
                                 ", reindex " + std::to_string(reindex) + ", T " + std::to_string(temperature);
        ASSERT_EQ(r1.gen.tokens, r2.gen.tokens) << what;
        EXPECT_GT(r1.levels[1].accepted, 0) << what;  // something was accepted, so something was promoted
        // One more proposal from the final context: same tokens, and every K/V bit of both caches agrees.
        auto ctx = prompt;
        ctx.insert(ctx.end(), r1.gen.tokens.begin(), r1.gen.tokens.end());
        RngStream g1{3, 0}, g2{3, 0};
        EXPECT_EQ(reuse.propose(ctx, 3, sp, g1).tokens, again.propose(ctx, 3, sp, g2).tokens) << what;
        expect_same_cache(reuse, again, what);
        if (reuse.forwards() < again.forwards()) ++saved_cases;
      }
    }
  }
  EXPECT_EQ(saved_cases, 16);  // every case saved forwards: the promotion ran, not only the fallback
}

TEST(StreamingAbsorb, TailBeyondItsRoomFailsWithOneLine) {
  ModelConfig c = tf::testing::tiny_llama_config(32, 32, 1, 4, 2, 48);
  LlamaModel m(c, LlamaWeights::random(c, 3, 0.5f));
  const auto prompt = tokens(20, c.vocab_size, 1);
  StreamingDrafter d(m, 2, 8, 3);
  d.begin(prompt);
  auto ctx = prompt;
  ctx.insert(ctx.end(), {1, 2, 3});  // 3 speculative tokens + the last committed one > 3
  SamplingParams sp;
  RngStream r{1, 0};
  try {
    d.propose(ctx, 1, sp, r);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed its tail of 3 slots"), std::string::npos) << e.what();
  }
  EXPECT_EQ(d.propose(prompt, 3, sp, r).tokens.size(), 3u);  // 1 + 2 proposals fit
}
