// Retrieval KV cache: recomputed query/key of the last prompt token match the
// model's, chunk selection is the top-k of the GQA-summed chunk scores with
// chunk 0 kept, a budget covering the prompt reproduces the full model, and a
// 3-level chain with the retrieval middle level is exact at T = 0 and lossless
// at T > 0 (chi-square). Building from the top level's prefill (begin_from)
// gives the cache a second prefill of its own gives; as the drafter of the
// `retrieval` method its tail rolls back to committed tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "gen/autoregressive.h"
#include "io/npy.h"
#include "kv/retrieval_cache.h"
#include "model/checkpoint.h"
#include "speculative/chain.h"
#include "speculative/retrieval_runner.h"
#include "speculative/stats.h"
#include "speculative/streaming_drafter.h"
#include "tiny_model.h"

using namespace tf;
using namespace tf::speculative;

namespace {
ModelConfig tiny(int64_t vocab = 32, int64_t layers = 2, int64_t hidden = 32) {
  return tf::testing::tiny_llama_config(vocab, hidden, layers, 4, 2, hidden * 2);
}
std::vector<int32_t> seq(int64_t n, int64_t vocab, int64_t mul = 7) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t((i * mul + 3 + i / 5) % vocab));
  return t;
}
}  // namespace

// The captured query is the one the forward used: a one-call prefill and an
// incremental last step capture the same query, and capturing changes no logits.
TEST(RetrievalKVCache, CapturedQueryMatchesIncrementalForward) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 5, 0.3f));
  auto toks = seq(30, c.vocab_size);
  FullKVCache a = m.make_cache(32), b = m.make_cache(32), plain = m.make_cache(32);
  std::vector<std::vector<float>> qa, qb;
  Tensor la = m.forward_capturing_last_query(toks, a, 1, qa);
  Tensor lp = m.forward(toks, plain, 1);
  m.forward(std::vector<int32_t>(toks.begin(), toks.end() - 1), b, 1);
  m.forward_capturing_last_query({toks.back()}, b, 1, qb);
  ASSERT_EQ(qa.size(), size_t(c.num_layers));
  double d = 0, norm = 0;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t i = 0; i < c.num_heads * c.head_dim; ++i) {
      d = std::max(d, double(std::abs(qa[size_t(l)][size_t(i)] - qb[size_t(l)][size_t(i)])));
      norm = std::max(norm, double(std::abs(qa[size_t(l)][size_t(i)])));
    }
  EXPECT_LT(d, 1e-5);
  EXPECT_GT(norm, 1e-3);  // a real query, not zeros
  for (int64_t i = 0; i < c.vocab_size; ++i) EXPECT_EQ(la.ptr<float>()[i], lp.ptr<float>()[i]);
}

TEST(RetrievalKVCache, SelectsTopChunksWithChunkZero) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 6, 0.3f));
  auto toks = seq(50, c.vocab_size);
  FullKVCache full = m.make_cache(50);
  std::vector<std::vector<float>> q;
  m.forward_capturing_last_query(toks, full, 1, q);
  RetrievalOptions opt{16, 4};
  RetrievalSelection s = select_chunks(full, 49, q, c.num_heads, opt);
  EXPECT_EQ(s.num_chunks, 12);
  EXPECT_EQ(s.remainder, 1);
  bool some_differ = false;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t g = 0; g < c.num_kv_heads; ++g) {
      const auto& ch = s.chunks[size_t(l * c.num_kv_heads + g)];
      const auto& sc = s.scores[size_t(l * c.num_kv_heads + g)];
      ASSERT_EQ(ch.size(), 4u);
      EXPECT_EQ(ch[0], 0);
      // Naive score of chunk 5: sum over the group's heads of q_h . mean key.
      double naive = 0;
      const int64_t D = c.head_dim, grp = c.num_heads / c.num_kv_heads;
      for (int64_t h = g * grp; h < (g + 1) * grp; ++h)
        for (int64_t d = 0; d < D; ++d) {
          double mk = 0;
          for (int64_t t = 20; t < 24; ++t) mk += full.k_at(l, g, t)[d] / 4.0;
          naive += q[size_t(l)][size_t(h * D + d)] * mk;
        }
      EXPECT_NEAR(sc[5], naive, 1e-4);
      double min_sel = INFINITY, max_rest = -INFINITY;
      for (int64_t cc = 1; cc < s.num_chunks; ++cc) {
        const bool sel = std::find(ch.begin(), ch.end(), cc) != ch.end();
        if (sel) min_sel = std::min(min_sel, sc[size_t(cc)]);
        else max_rest = std::max(max_rest, sc[size_t(cc)]);
      }
      EXPECT_GE(min_sel, max_rest);
      if (ch != s.chunks[0]) some_differ = true;
    }
  EXPECT_TRUE(some_differ) << "per-(layer, head) selections are expected to differ on random weights";
  // The built cache: region = 4 chunks * 4 + 1 remainder token.
  RetrievalKVCache rc(c, opt, 16);
  rc.build(m, toks);
  EXPECT_EQ(rc.region(), 17);
  EXPECT_EQ(rc.cache().length(), 17);
  const auto& ch = rc.selection().chunks[1];  // layer 0, kv head 1
  EXPECT_EQ(rc.cache().k_at(0, 1, 4)[0], full.k_at(0, 1, ch[1] * 4)[0]);
  EXPECT_EQ(rc.cache().v_at(0, 1, 16)[0], full.v_at(0, 1, 48)[0]);  // the remainder token
}

TEST(RetrievalRunner, FullBudgetReproducesTheModel) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 7, 0.3f));
  auto prompt = seq(33, c.vocab_size);
  RetrievalRunner rr(m, RetrievalOptions{64, 4}, 32);
  rr.begin(prompt);
  std::vector<int32_t> s = prompt;
  FullKVCache full = m.make_cache(64);
  Tensor ref = m.forward(prompt, full, 1);
  for (int step = 0; step < 6; ++step) {
    Tensor got = rr.logits(s, 1);
    double d = 0;
    for (int64_t v = 0; v < c.vocab_size; ++v) d = std::max(d, double(std::abs(got.ptr<float>()[v] - ref.ptr<float>()[v])));
    EXPECT_LT(d, 1e-4) << "step " << step;
    const int32_t t = int32_t((step * 5 + 1) % c.vocab_size);
    s.push_back(t);
    ref = m.forward(std::vector<int32_t>{t}, full, 1);
  }
  // Rollback: sync to a shorter context, the tail truncates.
  s.resize(prompt.size() + 2);
  rr.sync(s);
  EXPECT_EQ(rr.tail_length(), 3);
}

TEST(RetrievalRunner, ThreeLevelGreedyEqualsAutoregressive) {
  const std::string dir = std::string(TF_FIXTURES) + "/hf/gqa_f32";
  Checkpoint ck = open_checkpoint(dir);
  LlamaModel target(ck.config, LlamaWeights::load(*ck.weights, ck.config));
  NpyArray pr = read_npy_array(dir + "/prompt.npy");
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < 160; ++i) prompt.push_back(int32_t(pr.ints[size_t(i)]));
  const int64_t n = 64;
  FullKVCache cache = target.make_cache(256);
  auto ref = generate_autoregressive(target, cache, prompt, n, SamplingParams{}, {}).tokens;
  LlamaModel draft = make_layer_skip_model(target, 1);
  for (auto [g1, g2] : {std::pair<int64_t, int64_t>{1, 4}, {2, 6}}) {
    StreamingDrafter d(draft, 4, 32, g1 + g2);  // tail: up to g2 - 1 speculative tokens + 1 + g1 - 1
    RetrievalRunner mid(target, RetrievalOptions{32, 8}, n + 16);
    ModelRunner top(target, 512);
    SpecChain chain({&mid, &top}, d, ChainOptions{{g1, g2}, ResampleMode::residual, ResampleMode::residual, 512});
    ChainResult r = chain.generate(prompt, n, SamplingParams{});
    EXPECT_EQ(r.gen.tokens, ref) << "gamma " << g1 << "," << g2;
    std::printf("greedy streaming(4+32) -> retrieval(32/8) -> full, g=%lld,%lld: L1 alpha %.3f | L2 alpha %.3f tau %.2f\n",
                (long long)g1, (long long)g2, r.levels[1].alpha(), r.levels[2].alpha(), r.levels[2].tau());
  }
}

TEST(RetrievalRunner, ThreeLevelLosslessChiSquare) {
  ModelConfig c = tiny(12, 1, 16);
  LlamaModel target(c, LlamaWeights::random(c, 101, 0.6f));
  LlamaModel draft(c, LlamaWeights::random(c, 303, 0.6f));
  std::vector<int32_t> prompt = seq(21, c.vocab_size, 5);
  SamplingParams sp;
  sp.temperature = 1.0f;
  // Exact first-token distribution of the target.
  FullKVCache fc = target.make_cache(32);
  Tensor lg = target.forward(prompt, fc, 1);
  std::vector<float> d1(static_cast<size_t>(c.vocab_size));
  sampling_distribution(lg.ptr<float>(), c.vocab_size, sp, d1.data());
  std::vector<double> p1(d1.begin(), d1.end());
  auto run = [&](ResampleMode middle) {
    ModelDrafter d(draft, 64);
    RetrievalRunner mid(target, RetrievalOptions{8, 4}, 16);
    ModelRunner top(target, 64);
    SpecChain chain({&mid, &top}, d, ChainOptions{{1, 3}, middle, ResampleMode::residual, 64});
    std::vector<int64_t> cnt(static_cast<size_t>(c.vocab_size), 0);
    for (int64_t s = 0; s < 3000; ++s) {
      SamplingParams x = sp;
      x.seed = uint64_t(s) * 104729 + 5;
      ++cnt[size_t(chain.generate(prompt, 1, x).gen.tokens.at(0))];
    }
    return chi_square(cnt, p1);
  };
  ChiSquare honest = run(ResampleMode::residual), buggy = run(ResampleMode::reference_bug);
  std::printf("retrieval middle, first token (3000 seeds): residual p=%.4g (chi2 %.2f, dof %lld), reference_bug p=%.4g (chi2 %.1f)\n",
              honest.p_value, honest.statistic, (long long)honest.dof, buggy.p_value, buggy.statistic);
  EXPECT_GT(honest.p_value, 1e-3);
}

TEST(RetrievalRunner, BuildFromASharedPrefillEqualsItsOwnPrefill) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 9, 0.3f));
  auto prompt = seq(45, c.vocab_size);
  RetrievalRunner own(m, RetrievalOptions{16, 4}, 32), shared(m, RetrievalOptions{16, 4}, 32);
  own.begin(prompt);
  FullKVCache full = m.make_cache(int64_t(prompt.size()));
  std::vector<std::vector<float>> q;
  m.forward_capturing_last_query(prompt, full, 1, q);
  shared.begin_from(prompt, full, q);
  shared.begin(prompt);  // what a chain calls next: keeps the shared build
  EXPECT_EQ(own.retrieval().selection().chunks, shared.retrieval().selection().chunks);
  ASSERT_EQ(own.retrieval().region(), shared.retrieval().region());
  auto& a = const_cast<FullKVCache&>(own.retrieval().cache());
  auto& b = const_cast<FullKVCache&>(shared.retrieval().cache());
  ASSERT_EQ(a.length(), b.length());
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t h = 0; h < c.num_kv_heads; ++h)
      for (int64_t j = 0; j < a.length(); ++j)
        for (int64_t d = 0; d < c.head_dim; ++d) {
          ASSERT_EQ(a.k_at(l, h, j)[d], b.k_at(l, h, j)[d]);
          ASSERT_EQ(a.v_at(l, h, j)[d], b.v_at(l, h, j)[d]);
        }
  std::vector<int32_t> s = prompt;
  s.push_back(3);
  Tensor x = own.logits(s, 2), y = shared.logits(s, 2);
  for (int64_t i = 0; i < 2 * c.vocab_size; ++i) EXPECT_EQ(x.ptr<float>()[i], y.ptr<float>()[i]);
}

TEST(RetrievalRunner, AsTheDrafterItsTailHoldsOnlyCommittedTokens) {
  // The `retrieval` method: the target on the retrieval cache drafts for the full target.
  ModelConfig c = tiny();
  LlamaModel target(c, LlamaWeights::random(c, 12, 0.3f));
  auto prompt = seq(50, c.vocab_size);
  FullKVCache cache = target.make_cache(160);
  auto ref = generate_autoregressive(target, cache, prompt, 64, SamplingParams{}, {}).tokens;
  for (float temp : {0.0f, 1.0f}) {
    auto owned = std::make_unique<RetrievalRunner>(target, RetrievalOptions{16, 4}, 64 + 16);
    RetrievalRunner* rr = owned.get();
    VerifierDrafter d(std::move(owned));
    ModelRunner top(target, 160);
    SpecChain chain({&top}, d, ChainOptions{{4}, ResampleMode::residual, ResampleMode::residual, 160});
    int64_t checked = 0;
    chain.on_step = [&](const SpecChain&, const std::vector<int32_t>& ctx, const VerifyResult&) {
      if (int64_t(ctx.size() - prompt.size()) >= 64) return;  // the last step may be cut short
      ++checked;
      // After rollback: at most the committed tokens from the last prompt token on, at their slots.
      EXPECT_LE(rr->tail_length(), int64_t(ctx.size() - prompt.size()) + 1);
      EXPECT_EQ(rr->retrieval().cache().length(), rr->retrieval().region() + rr->tail_length());
      EXPECT_EQ(top.cache().length(), int64_t(ctx.size()) - 1);
    };
    SamplingParams sp;
    sp.temperature = temp;
    sp.seed = 9;
    ChainResult r = chain.generate(prompt, 64, sp);
    if (temp == 0.0f) EXPECT_EQ(r.gen.tokens, ref);
    EXPECT_GT(checked, 5);
    EXPECT_GT(r.levels[1].accepted, 0);
  }
}
