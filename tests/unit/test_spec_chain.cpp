// SpecChain end to end: at T = 0 every 2- and 3-level chain (model, layer-skip
// and n-gram drafters) reproduces generate_autoregressive exactly; at T > 0 the
// first and second generated tokens follow the target's exact distribution
// (chi-square over thousands of seeds), while the reference's middle-level bug
// (resample from p) is detected; caches hold exactly the committed prefix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "gen/autoregressive.h"
#include "io/npy.h"
#include "model/checkpoint.h"
#include "speculative/chain.h"
#include "speculative/stats.h"
#include "exact_distribution.h"
#include "tiny_model.h"

using namespace tf;
using namespace tf::speculative;

namespace {

struct Fixture {
  ModelConfig cfg;
  std::unique_ptr<LlamaModel> target;
  std::vector<int32_t> prompt;
};

Fixture& gqa() {
  static Fixture f = [] {
    Fixture x;
    const std::string dir = std::string(TF_FIXTURES) + "/hf/gqa_f32";
    Checkpoint ck = open_checkpoint(dir);
    x.cfg = ck.config;
    x.target = std::make_unique<LlamaModel>(ck.config, LlamaWeights::load(*ck.weights, ck.config));
    NpyArray pr = read_npy_array(dir + "/prompt.npy");
    for (int64_t i = 0; i < 24; ++i) x.prompt.push_back(int32_t(pr.ints[size_t(i)]));
    return x;
  }();
  return f;
}

ModelConfig tiny_cfg(int64_t vocab, int64_t hidden, int64_t layers) {
  return tf::testing::tiny_llama_config(vocab, hidden, layers, 2, 1, hidden * 2);
}

std::vector<int32_t> ar_greedy(LlamaModel& m, const std::vector<int32_t>& prompt, int64_t n) {
  FullKVCache cache = m.make_cache(int64_t(prompt.size()) + n + 1);
  return generate_autoregressive(m, cache, prompt, n, SamplingParams{}, {}).tokens;
}

void print_metrics(const char* name, const ChainResult& r) {
  std::printf("%s: top steps %lld", name, (long long)r.top_steps);
  for (size_t l = 1; l < r.levels.size(); ++l)
    std::printf(" | L%zu alpha %.3f tau %.2f (drafted %lld)", l, r.levels[l].alpha(), r.levels[l].tau(),
                (long long)r.levels[l].drafted);
  std::printf("\n");
}

void check_metrics(const ChainResult& r) {
  for (size_t l = 1; l < r.levels.size(); ++l) {
    const LevelMetrics& m = r.levels[l];
    int64_t steps = 0, acc = 0;
    for (size_t k = 0; k < m.accepted_hist.size(); ++k) steps += m.accepted_hist[k], acc += int64_t(k) * m.accepted_hist[k];
    EXPECT_EQ(steps, m.steps);
    EXPECT_EQ(acc, m.accepted);
    EXPECT_LE(m.accepted, m.drafted);
  }
  EXPECT_EQ(r.levels.back().steps, r.top_steps);
  // Per-step phase times telescope to each level's total (level 0: the drafter).
  ASSERT_EQ(int64_t(r.steps.size()), r.top_steps);
  for (size_t l = 0; l < r.levels.size(); ++l) {
    int64_t sum = 0;
    for (const auto& st : r.steps) {
      ASSERT_EQ(st.ns.size(), r.levels.size());
      EXPECT_GE(st.ns[l], 0);
      sum += st.ns[l];
    }
    EXPECT_EQ(sum, r.levels[l].ns) << "level " << l;
  }
  EXPECT_GT(r.levels.back().ns, 0);
}

constexpr int64_t kNew = 128;

}  // namespace

TEST(SpecChainGreedy, TwoLevelEqualsAutoregressive) {
  Fixture& f = gqa();
  const auto ref = ar_greedy(*f.target, f.prompt, kNew);
  ASSERT_EQ(int64_t(ref.size()), kNew);
  // A different tiny random model as the draft.
  ModelConfig dc = tiny_cfg(f.cfg.vocab_size, 32, 1);
  LlamaModel draft(dc, LlamaWeights::random(dc, 5, 0.2f));
  for (int64_t g : {1, 3, 6}) {
    ModelDrafter d(draft, 512);
    SpecChain chain(d, {f.target.get()}, ChainOptions{{g}});
    ChainResult r = chain.generate(f.prompt, kNew, SamplingParams{});
    EXPECT_EQ(r.gen.tokens, ref) << "random draft, gamma " << g;
    check_metrics(r);
  }
  // Layer-skip draft (first layer of the target).
  for (int64_t g : {2, 4}) {
    LayerSkipDrafter d(*f.target, 1, 512);
    SpecChain chain(d, {f.target.get()}, ChainOptions{{g}});
    ChainResult r = chain.generate(f.prompt, kNew, SamplingParams{});
    EXPECT_EQ(r.gen.tokens, ref) << "layer-skip draft, gamma " << g;
    check_metrics(r);
    if (g == 4) print_metrics("greedy 2-level layer-skip g=4", r);
  }
  // N-gram drafter.
  for (int64_t g : {2, 5}) {
    NgramDrafter d(f.cfg.vocab_size, 3);
    SpecChain chain(d, {f.target.get()}, ChainOptions{{g}});
    ChainResult r = chain.generate(f.prompt, kNew, SamplingParams{});
    EXPECT_EQ(r.gen.tokens, ref) << "ngram draft, gamma " << g;
    check_metrics(r);
    if (g == 5) print_metrics("greedy 2-level ngram g=5", r);
  }
}

TEST(SpecChainGreedy, NgramOnARepetitiveTargetAccepts) {
  // A small-vocab random target falls into loops under greedy decoding, so the
  // n-gram drafter's proposals are accepted; the output is still exactly AR.
  ModelConfig c = tiny_cfg(16, 16, 1);
  LlamaModel target(c, LlamaWeights::random(c, 77, 0.5f));
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6};
  const auto ref = ar_greedy(target, prompt, kNew);
  for (int64_t g : {1, 4, 8}) {
    NgramDrafter d(c.vocab_size, 3);
    SpecChain chain(d, {&target}, ChainOptions{{g}});
    ChainResult r = chain.generate(prompt, kNew, SamplingParams{});
    EXPECT_EQ(r.gen.tokens, ref) << "ngram, gamma " << g;
    EXPECT_GT(r.levels[1].accepted, 0);
    check_metrics(r);
    if (g == 4) print_metrics("greedy 2-level ngram on a looping target g=4", r);
  }
}

TEST(SpecChainGreedy, ThreeLevelEqualsAutoregressive) {
  Fixture& f = gqa();
  const auto ref = ar_greedy(*f.target, f.prompt, kNew);
  LlamaModel middle = make_layer_skip_model(*f.target, 1);
  ModelConfig dc = tiny_cfg(f.cfg.vocab_size, 32, 1);
  LlamaModel draft(dc, LlamaWeights::random(dc, 9, 0.2f));
  for (auto [g1, g2] : {std::pair<int64_t, int64_t>{1, 4}, {2, 6}, {3, 3}}) {
    ModelDrafter d(draft, 512);
    SpecChain chain(d, {&middle, f.target.get()}, ChainOptions{{g1, g2}});
    ChainResult r = chain.generate(f.prompt, kNew, SamplingParams{});
    EXPECT_EQ(r.gen.tokens, ref) << "3-level, gamma " << g1 << "," << g2;
    check_metrics(r);
  }
  // n-gram -> target as middle (full-cache stand-in for the retrieval level) -> target.
  NgramDrafter ng(f.cfg.vocab_size, 2);
  SpecChain chain(ng, {f.target.get(), f.target.get()}, ChainOptions{{2, 5}});
  ChainResult r = chain.generate(f.prompt, kNew, SamplingParams{});
  EXPECT_EQ(r.gen.tokens, ref) << "3-level ngram/target/target";
  print_metrics("greedy 3-level ngram/target/target", r);
  // middle == target at T = 0 accepts everything at the top.
  EXPECT_EQ(r.levels[2].accepted, r.levels[2].drafted);
}

TEST(SpecChain, CachesHoldTheCommittedPrefix) {
  Fixture& f = gqa();
  LlamaModel middle = make_layer_skip_model(*f.target, 1);
  ModelConfig dc = tiny_cfg(f.cfg.vocab_size, 32, 1);
  LlamaModel draft(dc, LlamaWeights::random(dc, 9, 0.2f));
  for (float temp : {0.0f, 1.0f}) {
    ModelDrafter d(draft, 512);
    SpecChain chain(d, {&middle, f.target.get()}, ChainOptions{{2, 4}});
    int64_t rejections = 0, checked = 0;
    const int64_t total = 48;
    chain.on_step = [&](const SpecChain& c, const std::vector<int32_t>& ctx, const VerifyResult& top) {
      const int64_t gen = int64_t(ctx.size() - f.prompt.size());
      if (gen >= total) return;  // the last step may be cut short by max_new_tokens
      ++checked;
      // The target's cache holds exactly the committed tokens except the last (not yet forwarded).
      const ModelRunner& t = c.runner(2);
      EXPECT_EQ(t.cache().length(), int64_t(ctx.size()) - 1);
      if (top.resampled) ++rejections;
      for (int l = 1; l <= 2; ++l) {
        const ModelRunner& r = c.runner(l);
        EXPECT_EQ(r.cache().length(), int64_t(r.cached_tokens().size()));
        EXPECT_LE(r.cache().length(), int64_t(ctx.size()) - 1);
        EXPECT_TRUE(std::equal(r.cached_tokens().begin(), r.cached_tokens().end(), ctx.begin()));
      }
      EXPECT_LE(c.drafter().cache_length(), int64_t(ctx.size()) - 1);
    };
    SamplingParams sp;
    sp.temperature = temp;
    sp.seed = 3;
    chain.generate(f.prompt, total, sp);
    EXPECT_GT(checked, 3);
    EXPECT_GT(rejections, 0) << "the test needs at least one rejection at the top";
  }
}

namespace {

// The exact distributions of the first and second generated tokens of the target.
struct Lossless {
  ChiSquare first, second;
};

Lossless run_lossless(Drafter& d, std::vector<LlamaModel*> levels, ChainOptions opt, const SamplingParams& base,
                      const std::vector<int32_t>& prompt, int64_t trials) {
  LlamaModel& target = *levels.back();
  const int64_t V = target.config().vocab_size;
  std::vector<double> p1, p2;
  tf::testing::exact_first_two(target, prompt, base, p1, p2);
  opt.max_context = 64;
  SpecChain chain(d, levels, opt);
  std::vector<int64_t> c1(size_t(V), 0), c2(size_t(V), 0);
  for (int64_t s = 0; s < trials; ++s) {
    SamplingParams sp = base;
    sp.seed = uint64_t(s) * 7919 + 1;
    ChainResult r = chain.generate(prompt, 2, sp);
    ++c1[size_t(r.gen.tokens.at(0))];
    ++c2[size_t(r.gen.tokens.at(1))];
  }
  return {chi_square(c1, p1), chi_square(c2, p2)};
}

}  // namespace

TEST(SpecChainLossless, ChiSquareFirstAndSecondToken) {
  // Tiny random models (vocab 12) with peaked, mutually different distributions.
  ModelConfig c = tiny_cfg(12, 16, 1);
  LlamaModel target(c, LlamaWeights::random(c, 101, 0.6f));
  LlamaModel middle(c, LlamaWeights::random(c, 202, 0.6f));
  LlamaModel draft(c, LlamaWeights::random(c, 303, 0.6f));
  const std::vector<int32_t> prompt = {3, 7, 1, 9, 4};
  const int64_t trials = 4000;
  SamplingParams sp;
  sp.temperature = 1.0f;
  SamplingParams sp_top_p = sp;
  sp_top_p.temperature = 0.8f;
  sp_top_p.top_p = 0.9f;

  auto report = [](const char* name, const Lossless& r) {
    std::printf("%-44s first p=%.4g (chi2 %.2f, dof %lld)  second p=%.4g (chi2 %.2f, dof %lld)\n", name,
                r.first.p_value, r.first.statistic, (long long)r.first.dof, r.second.p_value, r.second.statistic,
                (long long)r.second.dof);
  };
  {
    ModelDrafter d(draft, 64);
    Lossless r = run_lossless(d, {&target}, ChainOptions{{3}}, sp, prompt, trials);
    report("2-level draft->target T=1", r);
    EXPECT_GT(r.first.p_value, 1e-3);
    EXPECT_GT(r.second.p_value, 1e-3);
  }
  {
    ModelDrafter d(draft, 64);
    Lossless r = run_lossless(d, {&middle, &target}, ChainOptions{{2, 3}}, sp, prompt, trials);
    report("3-level draft->middle->target T=1", r);
    EXPECT_GT(r.first.p_value, 1e-3);
    EXPECT_GT(r.second.p_value, 1e-3);
  }
  {
    ModelDrafter d(draft, 64);
    Lossless r = run_lossless(d, {&middle, &target}, ChainOptions{{2, 3}}, sp_top_p, prompt, trials);
    report("3-level draft->middle->target T=0.8 p=0.9", r);
    EXPECT_GT(r.first.p_value, 1e-3);
    EXPECT_GT(r.second.p_value, 1e-3);
  }
  {
    // TriForce's shape: the middle level is the target itself (a sparse cache in the real system).
    ModelDrafter d(draft, 64);
    Lossless r = run_lossless(d, {&target, &target}, ChainOptions{{1, 3}}, sp, prompt, trials);
    report("3-level draft->target->target T=1", r);
    EXPECT_GT(r.first.p_value, 1e-3);
    EXPECT_GT(r.second.p_value, 1e-3);
  }
  {
    // The reference's bug: the middle level resamples from p instead of the residual.
    ModelDrafter d(draft, 64);
    ChainOptions opt{{1, 3}};
    opt.middle_mode = ResampleMode::reference_bug;
    Lossless r = run_lossless(d, {&target, &target}, opt, sp, prompt, trials);
    report("BUGGY middle (reference_bug) T=1", r);
    EXPECT_LT(r.first.p_value, 1e-6);
  }
}
