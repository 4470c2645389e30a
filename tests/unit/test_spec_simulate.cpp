// --simulate-acceptance: verify_simulated emits what a real rejection would
// (argmax p at T = 0, the residual at T > 0, p where the residual vanishes,
// the bonus when all are accepted) and draws its decisions from a stream of
// its own; on a tiny 3-level chain each level's measured per-decision α lies
// in a 99.9% Wilson interval of its set rate, and the same check rejects a rate
// off by 0.1 (the test can fail); seeds reproduce, rates 1 and 0 accept all and
// nothing, simulated tokens differ from ar; run_method validates the rates,
// marks the outcome and its JSON, and the re-retrieval monitor sees the
// simulated acceptance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "gen/autoregressive.h"
#include "io/npy.h"
#include "model/checkpoint.h"
#include "speculative/chain.h"
#include "speculative/methods.h"
#include "speculative/simulate.h"
#include "speculative/stats.h"
#include "tiny_model.h"

using namespace tf;
using namespace tf::speculative;

namespace {

// Two-sided 99.9% Wilson score interval of k successes in n trials.
struct Interval {
  double lo, hi;
  bool contains(double a) const { return lo <= a && a <= hi; }
};
Interval wilson(int64_t k, int64_t n) {
  const double z = 3.2905267314919255;  // Φ^-1(1 - 0.0005)
  const double nn = double(n), ph = double(k) / nn, z2 = z * z;
  const double centre = (ph + z2 / (2 * nn)) / (1 + z2 / nn);
  const double half = z / (1 + z2 / nn) * std::sqrt(ph * (1 - ph) / nn + z2 / (4 * nn * nn));
  return {centre - half, centre + half};
}

ModelConfig tiny(int64_t vocab, int64_t hidden) { return tf::testing::tiny_llama_config(vocab, hidden, 1, 2, 1, 2 * hidden); }

struct TinyChain {
  ModelConfig c = tiny(32, 16);
  LlamaModel target{c, LlamaWeights::random(c, 11, 0.5f)};
  LlamaModel middle{c, LlamaWeights::random(c, 22, 0.5f)};
  LlamaModel draft{c, LlamaWeights::random(c, 33, 0.5f)};
  std::vector<int32_t> prompt = {3, 7, 1, 9, 4, 12};

  ChainResult run(std::vector<double> rates, float temperature, uint64_t seed, int64_t n) {
    ModelDrafter d(draft, 1024);
    ChainOptions opt;
    opt.gamma = {2, 6};
    opt.max_context = 1024;
    opt.simulate_acceptance = std::move(rates);
    SpecChain chain(d, {&middle, &target}, opt);
    SamplingParams sp;
    sp.temperature = temperature;
    sp.seed = seed;
    return chain.generate(prompt, n, sp);
  }
};

}  // namespace

TEST(VerifySimulated, EmitsWhatARealRejectionWould) {
  const int64_t V = 5;
  // Two proposals; rows of p (3 rows) and q (2 rows).
  const std::vector<float> q = {0.1f, 0.6f, 0.1f, 0.1f, 0.1f,   //
                                0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  const std::vector<float> p = {0.3f, 0.1f, 0.4f, 0.1f, 0.1f,   //
                                0.2f, 0.2f, 0.2f, 0.2f, 0.2f,   //
                                0.05f, 0.05f, 0.1f, 0.7f, 0.1f};
  const std::vector<int32_t> x = {1, 4};
  // Greedy, rate 0: the first proposal is rejected, argmax p_0 = 2 is emitted; no token draw.
  RngStream decide = RngStream::for_simulation(5, 1), rng = RngStream::for_level(5, 1);
  VerifyResult r = verify_simulated(x, q.data(), p.data(), V, 0.0, decide, rng, true);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_TRUE(r.resampled);
  EXPECT_EQ(r.tokens, std::vector<int32_t>({2}));
  EXPECT_EQ(decide.counter, 1u);  // one decision per proposal examined
  EXPECT_EQ(rng.counter, 0u);
  // Greedy, rate 1: both accepted (whatever p says of token 1), bonus argmax p_2 = 3.
  decide = RngStream::for_simulation(5, 1);
  r = verify_simulated(x, q.data(), p.data(), V, 1.0, decide, rng, true);
  EXPECT_EQ(r.accepted, 2);
  EXPECT_TRUE(r.bonus);
  EXPECT_EQ(r.tokens, std::vector<int32_t>({1, 4, 3}));
  EXPECT_EQ(decide.counter, 2u);
  EXPECT_EQ(rng.counter, 0u);
  // T > 0, rate 0: the first token follows norm(max(p_0 - q_0, 0)) = (0.2, 0, 0.3, 0, 0) / 0.5,
  // drawn from the level's stream (one draw per step), the decisions from their own.
  std::vector<int64_t> counts(size_t(V), 0);
  const int64_t trials = 4000;
  for (int64_t s = 0; s < trials; ++s) {
    RngStream d = RngStream::for_simulation(uint64_t(s), 1), v = RngStream::for_level(uint64_t(s), 1);
    VerifyResult t = verify_simulated(x, q.data(), p.data(), V, 0.0, d, v, false);
    ASSERT_EQ(t.tokens.size(), 1u);
    EXPECT_EQ(v.counter, 1u);
    EXPECT_NEAR(t.last_dist[2] / t.last_dist[0], 1.5f, 1e-5);  // the residual, normalized or not
    ++counts[size_t(t.tokens[0])];
  }
  EXPECT_EQ(counts[1] + counts[3] + counts[4], 0);
  EXPECT_GT(chi_square(counts, {0.4, 0, 0.6, 0, 0}).p_value, 1e-3);
  // Rejecting the second proposal where p_1 == q_1: the residual vanishes, the draw is from p_1.
  counts.assign(size_t(V), 0);
  for (int64_t s = 0, seen = 0; seen < 2000; ++s) {
    RngStream d = RngStream::for_simulation(uint64_t(s), 1), v = RngStream::for_level(uint64_t(s), 1);
    VerifyResult t = verify_simulated(x, q.data(), p.data(), V, 0.5, d, v, false);
    if (t.accepted != 1 || !t.resampled) continue;
    ++seen;
    ++counts[size_t(t.tokens[1])];
  }
  EXPECT_GT(chi_square(counts, {0.2, 0.2, 0.2, 0.2, 0.2}).p_value, 1e-3);
  // The decision stream is not a verification stream of any level of this seed.
  for (int l = 0; l < 4; ++l)
    for (int m = 0; m < 4; ++m) EXPECT_NE(RngStream::for_simulation(7, l).seed, RngStream::for_level(7, m).seed);
  RngStream d0 = RngStream::for_simulation(0, 0);
  EXPECT_THROW(verify_simulated(x, q.data(), p.data(), V, 1.5, d0, rng, true), tf::Error);
}

TEST(SimulatedAcceptance, MeasuredRateWithinWilsonBoundAndOffByATenthRejected) {
  TinyChain tc;
  struct Case {
    float temperature;
    std::vector<double> rates;
  };
  for (const Case& cs : {Case{0.0f, {0.5, 0.9}}, Case{0.8f, {0.35, 0.8}}}) {
    std::vector<int64_t> drafted(3, 0), accepted(3, 0), rejected(3, 0);
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      ChainResult r = tc.run(cs.rates, cs.temperature, seed, 128);
      for (int l = 1; l <= 2; ++l) {
        drafted[size_t(l)] += r.levels[size_t(l)].drafted;
        accepted[size_t(l)] += r.levels[size_t(l)].accepted;
        rejected[size_t(l)] += r.levels[size_t(l)].rejected;
      }
    }
    for (int l = 1; l <= 2; ++l) {
      const double a = cs.rates[size_t(l - 1)];
      const int64_t n = accepted[size_t(l)] + rejected[size_t(l)];
      ASSERT_GE(drafted[size_t(l)], 500) << "level " << l;
      ASSERT_GE(n, 500) << "level " << l;
      const Interval iv = wilson(accepted[size_t(l)], n);
      std::printf("T=%.1f level %d: set %.2f, measured %.4f over %lld decisions (%lld drafted), 99.9%% [%.4f, %.4f]\n",
                  cs.temperature, l, a, double(accepted[size_t(l)]) / double(n), (long long)n,
                  (long long)drafted[size_t(l)], iv.lo, iv.hi);
      EXPECT_TRUE(iv.contains(a)) << "level " << l << " at T " << cs.temperature;
      // Negative control: the same check must reject a rate off by 0.1 on either side.
      for (double off : {a - 0.1, a + 0.1})
        if (off >= 0 && off <= 1) EXPECT_FALSE(iv.contains(off)) << "level " << l << ": " << off << " not rejected";
    }
  }
}

TEST(SimulatedAcceptance, SeedsReproduceAndTokensDifferFromAr) {
  TinyChain tc;
  for (float t : {0.0f, 0.8f}) {
    const ChainResult a = tc.run({0.5, 0.9}, t, 3, 64);
    const ChainResult b = tc.run({0.5, 0.9}, t, 3, 64);
    EXPECT_EQ(a.gen.tokens, b.gen.tokens);
    EXPECT_EQ(a.levels[1].accepted, b.levels[1].accepted);
    EXPECT_EQ(a.levels[2].accepted, b.levels[2].accepted);
    const ChainResult c = tc.run({0.5, 0.9}, t, 4, 64);
    auto pattern = [](const ChainResult& r) {
      std::vector<int64_t> v;
      for (const auto& st : r.steps) v.insert(v.end(), {st.accepted[1], st.accepted[2]});
      return v;
    };
    EXPECT_NE(pattern(a), pattern(c)) << "another seed, other decisions";
  }
  FullKVCache cache = tc.target.make_cache(int64_t(tc.prompt.size()) + 65);
  const auto ar = generate_autoregressive(tc.target, cache, tc.prompt, 64, SamplingParams{}, {}).tokens;
  const ChainResult real = tc.run({}, 0.0f, 3, 64);
  EXPECT_EQ(real.gen.tokens, ar) << "a real run is exact";
  EXPECT_NE(tc.run({0.5, 0.9}, 0.0f, 3, 64).gen.tokens, ar) << "simulated decisions accept non-argmax drafts";
}

TEST(SimulatedAcceptance, RateOneAcceptsEverythingRateZeroNothing) {
  TinyChain tc;
  for (float t : {0.0f, 0.8f}) {
    const ChainResult all = tc.run({1.0, 1.0}, t, 2, 64);
    for (int l = 1; l <= 2; ++l) {
      EXPECT_GT(all.levels[size_t(l)].drafted, 0);
      EXPECT_EQ(all.levels[size_t(l)].accepted, all.levels[size_t(l)].drafted) << "level " << l;
      EXPECT_EQ(all.levels[size_t(l)].rejected, 0);
    }
    const ChainResult none = tc.run({0.0, 0.0}, t, 2, 64);
    for (int l = 1; l <= 2; ++l) {
      EXPECT_GT(none.levels[size_t(l)].drafted, 0);
      EXPECT_EQ(none.levels[size_t(l)].accepted, 0) << "level " << l;
      EXPECT_EQ(none.levels[size_t(l)].rejected, none.levels[size_t(l)].steps);
    }
    EXPECT_EQ(none.top_steps, 64) << "one token per top step when nothing is accepted";
    // Mixed: each level follows its own rate.
    const ChainResult mixed = tc.run({1.0, 0.0}, t, 2, 32);
    EXPECT_EQ(mixed.levels[1].accepted, mixed.levels[1].drafted);
    EXPECT_EQ(mixed.levels[2].accepted, 0);
  }
  // A chain refuses a wrong count or a rate outside [0, 1].
  ModelDrafter d(tc.draft, 64);
  ChainOptions opt;
  opt.gamma = {2, 6};
  opt.simulate_acceptance = {0.5};
  const std::vector<LlamaModel*> levels = {&tc.middle, &tc.target};
  EXPECT_THROW(SpecChain(d, levels, opt), tf::Error);
  opt.simulate_acceptance = {0.5, -0.1};
  EXPECT_THROW(SpecChain(d, levels, opt), tf::Error);
}

namespace {

LlamaModel load_fixture(std::vector<int32_t>& prompt) {
  const std::string dir = std::string(TF_FIXTURES) + "/hf/gqa_f32";
  Checkpoint ck = open_checkpoint(dir);
  NpyArray a = read_npy_array(dir + "/prompt.npy");
  for (size_t i = 0; i < std::min<size_t>(96, a.ints.size()); ++i) prompt.push_back(int32_t(a.ints[i]));
  return LlamaModel(ck.config, LlamaWeights::load(*ck.weights, ck.config));
}

}  // namespace

TEST(SimulatedAcceptance, RunMethodValidatesMarksAndFeedsReretrieval) {
  std::vector<int32_t> prompt;
  LlamaModel target = load_fixture(prompt);
  PrefillSnapshot snap(target, prompt);
  MethodRequest r;
  r.method = "triforce";
  r.draft = "layerskip:1";
  r.max_new_tokens = 48;
  r.simulate_acceptance = {0.4, 0.9};
  MethodOutcome o = run_method(target, r, prompt, &snap);
  EXPECT_EQ(o.simulated_acceptance, r.simulate_acceptance);
  ASSERT_EQ(o.levels.size(), 2u);
  EXPECT_GT(o.levels[0].rejected, 0);
  const nlohmann::json j = o.to_json();
  EXPECT_EQ(j["simulated_acceptance"], nlohmann::json({0.4, 0.9}));
  EXPECT_TRUE(j["levels"][0].contains("rejected"));
  // A real run says false.
  r.simulate_acceptance = {};
  const MethodOutcome real = run_method(target, r, prompt, &snap);
  EXPECT_EQ(real.to_json()["simulated_acceptance"], nlohmann::json(false));

  // The re-retrieval monitor sees the simulated top-level acceptance.
  r.reretrieve = "below:0.5";
  r.simulate_acceptance = {0.5, 1.0};
  EXPECT_EQ(run_method(target, r, prompt, &snap).retrieval_rebuilds, 0);
  r.simulate_acceptance = {0.5, 0.0};
  EXPECT_GT(run_method(target, r, prompt, &snap).retrieval_rebuilds, 0);
  r.reretrieve = "never";

  auto fails_naming = [&](MethodRequest q, const std::string& also) {
    try {
      run_method(target, q, prompt, &snap);
      ADD_FAILURE() << "accepted: " << also;
    } catch (const tf::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--simulate-acceptance"), std::string::npos) << m;
      EXPECT_NE(m.find(also), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  };
  r.simulate_acceptance = {0.9};
  fails_naming(r, "2 verifying level(s)");
  r.simulate_acceptance = {0.4, 1.2};
  fails_naming(r, "outside [0, 1]");
  r.method = "ar";
  r.simulate_acceptance = {0.9};
  fails_naming(r, "ar");
  r.method = "spec";
  r.simulate_acceptance = {0.9, 0.9};
  fails_naming(r, "1 verifying level(s)");

  // Parsing and printing the rates.
  EXPECT_EQ(parse_acceptance_rates("0.35, 0.9137", "--simulate-acceptance"), std::vector<double>({0.35, 0.9137}));
  EXPECT_EQ(acceptance_str({0.35, 0.9137}), "0.35/0.9137");
  EXPECT_EQ(acceptance_str({1.0, 0.0}, ','), "1,0");
  for (const char* bad : {"", "0.3,", "x", "0.3,1.01", "-0.1", "0.5,,0.5"})
    EXPECT_THROW(parse_acceptance_rates(bad, "--simulate-acceptance"), tf::Error) << bad;
}
