// speculative::verify on synthetic distributions: exact greedy at T = 0, the emitted
// token's distribution equals p (chi-square), the reference's middle-level bug
// (resample from p) is detected, and the chi-square helper itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/check.h"
#include "gen/sampling.h"
#include "speculative/stats.h"
#include "speculative/verify.h"

using namespace tf;
using namespace tf::speculative;

namespace {

std::vector<float> one_hot(int64_t V, std::vector<int32_t> ids) {
  std::vector<float> r(ids.size() * size_t(V), 0.0f);
  for (size_t i = 0; i < ids.size(); ++i) r[i * size_t(V) + size_t(ids[i])] = 1.0f;
  return r;
}

}  // namespace

TEST(SpecStats, GammaQKnownValues) {
  // chi-square survival: 3.841 (1 dof) -> 0.05; 11.070 (5 dof) -> 0.05; 2 dof: exp(-x/2).
  EXPECT_NEAR(gamma_q(0.5, 3.841459 / 2), 0.05, 1e-6);
  EXPECT_NEAR(gamma_q(2.5, 11.0705 / 2), 0.05, 1e-5);
  EXPECT_NEAR(gamma_q(1.0, 7.3), std::exp(-7.3), 1e-12);
  EXPECT_NEAR(gamma_q(1.0, 0.2), std::exp(-0.2), 1e-12);
  ChiSquare c = chi_square({50, 50}, {0.5, 0.5});
  EXPECT_EQ(c.dof, 1);
  EXPECT_NEAR(c.p_value, 1.0, 1e-12);
  EXPECT_EQ(chi_square({1, 9}, {0.0, 1.0}).p_value, 0.0);
}

TEST(SpecVerify, GreedyAcceptsWhileArgmaxMatches) {
  const int64_t V = 5;
  RngStream rng{1, 0};
  // p argmaxes 2, 4, 1, 0; proposals 2, 4, 3 -> accept 2, then emit argmax p_3 = 1.
  auto p = one_hot(V, {2, 4, 1, 0});
  auto q = one_hot(V, {2, 4, 3});
  VerifyResult r = verify({2, 4, 3}, q.data(), p.data(), V, rng, true);
  EXPECT_EQ(r.accepted, 2);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 4, 1}));
  EXPECT_TRUE(r.resampled);
  EXPECT_FALSE(r.bonus);
  EXPECT_EQ(rng.counter, 0u);  // greedy consumes no draws
  // All match: bonus = argmax p_{g+1}.
  auto q2 = one_hot(V, {2, 4, 1});
  r = verify({2, 4, 1}, q2.data(), p.data(), V, rng, true);
  EXPECT_EQ(r.accepted, 3);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 4, 1, 0}));
  EXPECT_TRUE(r.bonus);
  // No proposals: one token from p_1.
  r = verify({}, nullptr, p.data(), V, rng, true);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2}));
  EXPECT_TRUE(r.bonus);
}

TEST(SpecVerify, OneHotDistributionsAtPositiveTemperatureAreGreedy) {
  // The sampled path with one-hot p and q behaves exactly like greedy.
  const int64_t V = 4;
  auto p = one_hot(V, {1, 3, 2});
  auto q = one_hot(V, {1, 0});
  for (uint64_t s = 0; s < 50; ++s) {
    RngStream rng{s, 0};
    VerifyResult r = verify({1, 0}, q.data(), p.data(), V, rng, false);
    EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 3}));
  }
}

namespace {

// Draw x ~ q with the uniform stream, verify against p; count the first emitted token.
std::vector<int64_t> first_token_counts(const std::vector<float>& p, const std::vector<float>& q, int64_t V,
                                        int64_t n, ResampleMode mode) {
  std::vector<int64_t> counts(size_t(V), 0);
  for (int64_t s = 0; s < n; ++s) {
    RngStream rng = RngStream::for_level(uint64_t(s), 0);
    const int32_t x = draw_from(q.data(), V, rng.seed, rng.next());
    VerifyResult r = verify({x}, q.data(), p.data(), V, rng, false, mode);
    ++counts[size_t(r.tokens[0])];
  }
  return counts;
}

}  // namespace

TEST(SpecVerify, EmittedTokenIsDistributedAsP) {
  const int64_t V = 6;
  // p row 0 and (unused) row 1; q overlaps p partially (beta = sum min = 0.55); q has a zero cell.
  std::vector<float> p = {0.30f, 0.25f, 0.20f, 0.10f, 0.10f, 0.05f, 1, 1, 1, 1, 1, 1};
  std::vector<float> q = {0.05f, 0.05f, 0.40f, 0.40f, 0.10f, 0.00f};
  std::vector<double> expect(p.begin(), p.begin() + V);
  const int64_t n = 60000;
  ChiSquare honest = chi_square(first_token_counts(p, q, V, n, ResampleMode::residual), expect);
  ChiSquare buggy = chi_square(first_token_counts(p, q, V, n, ResampleMode::reference_bug), expect);
  std::printf("verify chi-square (n=%lld, V=%lld): residual p=%.4g (stat %.2f), reference_bug p=%.4g (stat %.1f)\n",
              (long long)n, (long long)V, honest.p_value, honest.statistic, buggy.p_value, buggy.statistic);
  EXPECT_GT(honest.p_value, 1e-3);
  EXPECT_LT(buggy.p_value, 1e-6);
}

TEST(SpecVerify, ResidualAndCounters) {
  const int64_t V = 3;
  std::vector<float> p = {0.5f, 0.5f, 0.0f, 0.2f, 0.3f, 0.5f};
  std::vector<float> q = {0.0f, 0.0f, 1.0f};  // proposes token 2, p(2) = 0: always rejected
  RngStream rng{7, 0};
  VerifyResult r = verify({2}, q.data(), p.data(), V, rng, false);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_TRUE(r.resampled);
  ASSERT_EQ(r.last_dist.size(), 3u);
  EXPECT_FLOAT_EQ(r.last_dist[0], 0.5f);
  EXPECT_FLOAT_EQ(r.last_dist[2], 0.0f);
  EXPECT_NE(r.tokens[0], 2);
  EXPECT_EQ(rng.counter, 2u);  // one uniform for the test, one draw for the resample
  // Same seed and counter, same result.
  RngStream a{7, 0};
  EXPECT_EQ(verify({2}, q.data(), p.data(), V, a, false).tokens, r.tokens);
}

TEST(SpecVerify, GreedyFromIdsEqualsGreedyFromDistributions) {
  // verify_greedy (the chain's T = 0 path, argmax ids only) against verify(greedy)
  // on random logits with planted near-ties, every proposal length 0..5.
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> tok(0, 6);
  const int64_t V = 7;
  int rejections = 0, bonuses = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t g = trial % 6;
    std::vector<float> logits(size_t((g + 1) * V));
    for (auto& x : logits) x = float(tok(gen) % 3);  // ties: argmax is the lowest index
    std::vector<float> p(logits.size());
    std::vector<int32_t> best;
    for (int64_t i = 0; i <= g; ++i) {
      SamplingParams sp;
      sampling_distribution(logits.data() + i * V, V, sp, p.data() + i * V);
      best.push_back(int32_t(argmax_lowest(logits.data() + i * V, V)));
    }
    std::vector<int32_t> x;
    // Mostly the argmax (long accepted runs), sometimes another token.
    for (int64_t i = 0; i < g; ++i) x.push_back(tok(gen) < 5 ? best[size_t(i)] : int32_t(tok(gen)));
    RngStream rng{3, 0};
    const VerifyResult a = verify(x, one_hot(V, x).data(), p.data(), V, rng, true);
    const VerifyResult b = verify_greedy(x, best);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.accepted, b.accepted);
    EXPECT_EQ(a.bonus, b.bonus);
    EXPECT_EQ(a.resampled, b.resampled);
    EXPECT_EQ(rng.counter, 0u);
    rejections += b.resampled, bonuses += b.bonus;
  }
  EXPECT_GT(rejections, 20);
  EXPECT_GT(bonuses, 20);
  EXPECT_THROW(verify_greedy({1, 2}, {1, 2}), tf::Error);  // one id short
}

namespace {

// Logits rows [n, V]: a shared base plus per-row noise, so draft and target agree in part.
std::vector<float> noisy_rows(const std::vector<float>& base, int64_t n, float noise, std::mt19937& gen) {
  const int64_t V = int64_t(base.size());
  std::normal_distribution<float> d(0.0f, noise);
  std::vector<float> r(size_t(n * V));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t v = 0; v < V; ++v) r[size_t(i * V + v)] = base[size_t(v)] + d(gen);
  return r;
}

}  // namespace

TEST(SpecVerify, FromLogitsEqualsVerifyOnFullRows) {
  // verify_logits (rows made as reached, residual on the support) against
  // verify() on every p row made first: tokens, flags, the stream's counter
  // and the rows of the emitted tokens, bit for bit; p poisoned before.
  std::mt19937 gen(17);
  std::normal_distribution<float> n(0.0f, 3.0f);
  int rejections = 0, bonuses = 0;
  VerifyScratch scratch;
  for (int trial = 0; trial < 240; ++trial) {
    const int64_t V = trial % 3 == 0 ? 4000 : 64;
    const int64_t g = 1 + trial % 5;
    const float top_p = trial % 2 ? 0.9f : 1.0f;
    const ResampleMode mode = trial % 7 == 0 ? ResampleMode::reference_bug : ResampleMode::residual;
    const SamplingParams sp{0.6f, top_p, 1};
    std::vector<float> base(static_cast<size_t>(V));
    for (auto& x : base) x = n(gen);
    const std::vector<float> lt = noisy_rows(base, g + 1, 1.0f, gen), ld = noisy_rows(base, g, 1.5f, gen);
    std::vector<float> q(size_t(g * V)), p_full(size_t((g + 1) * V));
    std::vector<int32_t> x;
    RngStream draft_rng{uint64_t(trial), 0};
    for (int64_t i = 0; i < g; ++i) {
      sampling_distribution(ld.data() + i * V, V, sp, q.data() + i * V);
      x.push_back(draw_from(q.data() + i * V, V, draft_rng.seed, draft_rng.next()));
    }
    if (trial % 11 == 0) x[0] = int32_t((x[0] + 1) % V);  // sometimes a token q never proposes
    for (int64_t i = 0; i <= g; ++i) sampling_distribution(lt.data() + i * V, V, sp, p_full.data() + i * V);
    RngStream a{uint64_t(trial) * 3 + 1, 0}, b = a;
    const VerifyResult want = verify(x, q.data(), p_full.data(), V, a, false, mode);
    std::vector<float> p(p_full.size(), std::numeric_limits<float>::quiet_NaN());
    const VerifyResult got = verify_logits(x, q.data(), lt.data(), V, sp, b, p.data(), scratch, mode);
    ASSERT_EQ(got.tokens, want.tokens) << trial;
    EXPECT_EQ(got.accepted, want.accepted);
    EXPECT_EQ(got.bonus, want.bonus);
    EXPECT_EQ(got.resampled, want.resampled);
    EXPECT_EQ(b.counter, a.counter);
    EXPECT_TRUE(got.last_dist.empty());
    const size_t made = size_t(got.accepted + 1) * size_t(V);
    EXPECT_EQ(std::memcmp(p.data(), p_full.data(), made * sizeof(float)), 0) << trial;
    rejections += got.resampled, bonuses += got.bonus;
  }
  EXPECT_GT(rejections, 40);
  EXPECT_GT(bonuses, 20);
  RngStream unused;
  EXPECT_THROW(verify_logits({}, nullptr, nullptr, 4, SamplingParams{}, unused, nullptr, scratch),
               tf::Error);  // T = 0 goes through verify_greedy
}
