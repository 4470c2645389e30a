#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "argmax_rows.h"
#include "core/tensor.h"
#include "gen/sampling.h"
#include "model/draft_vocab.h"
#include "ops/ops.h"

TEST(Sampling, GreedyIsArgmaxLowestIdOnTies) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  tf::SamplingParams sp;
  EXPECT_EQ(tf::sample_token(l.data(), 4, sp, 0), 1);
  std::vector<float> p(4);
  tf::sampling_distribution(l.data(), 4, sp, p.data());
  EXPECT_EQ(p[1], 1.0f);
  EXPECT_EQ(p[3], 0.0f);
}

TEST(Sampling, TemperatureSoftmax) {
  std::vector<float> l = {0.0f, std::log(3.0f)};
  tf::SamplingParams sp{1.0f, 1.0f, 7};
  std::vector<float> p(2);
  tf::sampling_distribution(l.data(), 2, sp, p.data());
  EXPECT_NEAR(p[0], 0.25, 1e-6);
  EXPECT_NEAR(p[1], 0.75, 1e-6);
  sp.temperature = 0.5f;  // logits doubled: 1 : 9
  tf::sampling_distribution(l.data(), 2, sp, p.data());
  EXPECT_NEAR(p[1], 0.9, 1e-6);
}

TEST(Sampling, TopPKeepsSmallestHeadSet) {
  // probs 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps {0.5, 0.3} (0.05 + 0.15 <= 0.25 are dropped).
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  tf::SamplingParams sp{1.0f, 0.75f, 1};
  std::vector<float> p(4);
  tf::sampling_distribution(l.data(), 4, sp, p.data());
  EXPECT_NEAR(p[0], 0.625, 1e-6);
  EXPECT_NEAR(p[1], 0.375, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_EQ(p[3], 0.0f);
}

TEST(Sampling, DrawFrequenciesMatchDistribution) {
  std::vector<float> p = {0.1f, 0.0f, 0.6f, 0.3f};
  std::vector<int> count(4);
  const int n = 100000;
  for (int i = 0; i < n; ++i) ++count[tf::draw_from(p.data(), 4, 99, i)];
  EXPECT_EQ(count[1], 0);
  for (int k : {0, 2, 3}) EXPECT_NEAR(count[k] / double(n), p[k], 0.01) << k;
}

// argmax_lowest against the plain one-compare-per-element scan it replaced, on
// lengths around its 8-wide blocks, planted ties, +-0, infinities and NaNs.
TEST(Sampling, ArgmaxLowestEqualsThePlainScan) {
  auto plain = [](const float* x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (x[i] > x[best]) best = i;
    return best;
  };
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return int((state >> 33) % 1000);
  };
  int checked = 0;
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32000, 49152, 49153}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = float(next() % 50) - 25.0f;  // many exact ties
      if (trial % 5 == 1) x[size_t(next() % n)] = INFINITY;
      if (trial % 5 == 2) x[size_t(next() % n)] = std::nanf("");
      if (trial % 5 == 3) for (auto& v : x) v = (next() % 2) ? 0.0f : -0.0f;
      if (trial % 5 == 4) x[size_t(n - 1)] = 1000.0f;  // the maximum in the scalar tail
      EXPECT_EQ(tf::argmax_lowest(x.data(), n), plain(x.data(), n)) << "n=" << n << " trial " << trial;
      ++checked;
    }
  }
  std::vector<float> nan_first = {std::nanf(""), 3.0f, 5.0f};
  EXPECT_EQ(tf::argmax_lowest(nan_first.data(), 3), plain(nan_first.data(), 3));
  EXPECT_GT(checked, 400);
}

// ops::argmax (the op every device greedy path runs, here its CPU body) is
// argmax_lowest on every awkward row, and with a reduced vocabulary it is
// argmax_lowest of the row expand_restricted_logits would make.
TEST(Sampling, ArgmaxOpIsArgmaxLowestOnAwkwardRows) {
  int checked = 0;
  for (int64_t V : {1, 2, 3, 8, 33, 1025, 49152}) {
    const int64_t n = tf::testing::kArgmaxCases;
    tf::Tensor x = tf::Tensor::cpu(tf::DType::F32, {n, V}), out = tf::Tensor::cpu(tf::DType::I32, {n});
    for (int kind = 0; kind < n; ++kind) {
      const std::vector<float> r = tf::testing::argmax_row(kind, V, 7);
      std::copy(r.begin(), r.end(), x.ptr<float>() + kind * V);
    }
    tf::ops::argmax(x, out);
    for (int64_t i = 0; i < n; ++i, ++checked)
      EXPECT_EQ(out.ptr<int32_t>()[i], tf::argmax_lowest(x.ptr<float>() + i * V, V)) << "V=" << V << " kind " << i;
    // The same rows as the K logits of a reduced vocabulary of a larger model.
    for (int set = 0; set < tf::testing::kArgmaxIdSets; ++set) {
      const int64_t full = V + 5;
      std::vector<int32_t> ids = tf::testing::argmax_ids(set, full);
      const int64_t K = int64_t(ids.size());
      tf::Tensor xk = tf::Tensor::cpu(tf::DType::F32, {n, K});
      for (int kind = 0; kind < n; ++kind) {
        const std::vector<float> r = tf::testing::argmax_row(kind, K, 11);
        std::copy(r.begin(), r.end(), xk.ptr<float>() + kind * K);
      }
      const tf::ops::ArgmaxIds a = tf::ops::argmax_ids(ids, full, tf::Device::CPU);
      tf::ops::argmax(xk, out, &a);
      const tf::Tensor e = tf::expand_restricted_logits(xk, ids, full);
      for (int64_t i = 0; i < n; ++i, ++checked)
        EXPECT_EQ(out.ptr<int32_t>()[i], tf::argmax_lowest(e.ptr<float>() + i * full, full))
            << "V=" << V << " id set " << set << " kind " << i;
    }
  }
  EXPECT_GT(checked, 700);
}
