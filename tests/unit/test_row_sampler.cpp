// RowSampler (sampling_distribution's fast path) against ops::softmax_top_p,
// the definition: every row bit for bit, outputs poisoned before each call, on
// rows built to put the top-p cut on ties, -inf entries, flat rows and exact
// ties at the threshold (where it must fall back to the op); the sparse draw
// against draw_from; the approximate masses against exact sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gen/sampling.h"
#include "ops/ops.h"

using namespace tf;

namespace {

std::vector<float> op_row(const std::vector<float>& logits, float T, float top_p) {
  std::vector<float> out(logits.size(), std::numeric_limits<float>::quiet_NaN());
  Tensor l, pr;
  l.data = const_cast<float*>(logits.data());
  pr.data = out.data();
  l.shape = pr.shape = {1, int64_t(logits.size())};
  ops::SoftmaxParams p;
  p.temperature = T;
  p.top_p = top_p;
  ops::softmax_top_p(l, pr, p);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

enum class Shape { normal, spiky, ties, neg_inf, flat };

std::vector<float> make_row(Shape shape, int64_t V, std::mt19937& gen) {
  std::normal_distribution<float> n(0.0f, 4.0f);
  std::uniform_int_distribution<int64_t> id(0, V - 1);
  std::vector<float> l(static_cast<size_t>(V));
  for (auto& x : l) x = n(gen);
  switch (shape) {
    case Shape::normal: break;
    case Shape::spiky:
      for (int k = 0; k < 4; ++k) l[size_t(id(gen))] += 14.0f - 3.0f * float(k);
      break;
    case Shape::ties:  // few distinct values: the cut falls inside a run of equal logits
      for (auto& x : l) x = std::round(x / 3.0f);
      break;
    case Shape::neg_inf:  // a reduced-vocabulary draft's row
      for (auto& x : l)
        if (gen() % 10 < 7) x = -std::numeric_limits<float>::infinity();
      l[size_t(id(gen))] = 5.0f;
      break;
    case Shape::flat:
      for (auto& x : l) x = 1.25f;
      break;
  }
  return l;
}

}  // namespace

TEST(RowSampler, EqualsTheOpBitForBit) {
  std::mt19937 gen(2024);
  RowSampler rs;
  int64_t rows = 0, sparse = 0, top_p_rows = 0;
  for (int64_t V : {7, 1000, 49152})
    for (Shape shape : {Shape::normal, Shape::spiky, Shape::ties, Shape::neg_inf, Shape::flat})
      for (float T : {0.3f, 0.6f, 1.0f, 1.7f})
        for (float top_p : {1.0f, 0.95f, 0.9f, 0.5f, 0.2f}) {
          if (V == 49152 && (T == 0.3f || T == 1.7f)) continue;  // keep the test short
          const std::vector<float> l = make_row(shape, V, gen);
          const std::vector<float> want = op_row(l, T, top_p);
          std::vector<float> got(size_t(V), std::numeric_limits<float>::quiet_NaN());
          rs.distribution(l.data(), V, SamplingParams{T, top_p, 1}, got.data());
          ASSERT_TRUE(same_bits(got, want)) << "V " << V << " shape " << int(shape) << " T " << T << " top_p "
                                            << top_p;
          // A sparse row is zero off its support, which is ascending.
          if (rs.sparse()) {
            ++sparse;
            const auto& ids = rs.support();
            std::vector<char> in(size_t(V), 0);
            for (size_t k = 0; k < ids.size(); ++k) {
              in[size_t(ids[k])] = 1;
              if (k) ASSERT_LT(ids[k - 1], ids[k]);
            }
            for (int64_t v = 0; v < V; ++v)
              if (!in[size_t(v)]) ASSERT_EQ(got[size_t(v)], 0.0f) << v;
          }
          // The sampler's draw is draw_from's.
          for (uint64_t d = 0; d < 20; ++d)
            ASSERT_EQ(rs.draw(got.data(), V, 5, d), draw_from(want.data(), V, 5, d));
          ++rows;
          top_p_rows += top_p < 1.0f;
        }
  std::printf("rows %lld, sparse (fast top-p) %lld of %lld top-p rows, fallbacks %lld\n", (long long)rows,
              (long long)sparse, (long long)top_p_rows, (long long)rs.fallbacks());
  EXPECT_GT(sparse, top_p_rows * 3 / 4);  // the fast path, not the op, made most top-p rows
}

TEST(RowSampler, FallsBackWhereTheCutIsATie) {
  // Two tokens of mass 1/2 each and top_p 0.5: the op drops the lower id
  // (cumulative 0.5 <= 0.5), a decision within rounding of the threshold that
  // the approximation must leave to the op.
  std::vector<float> l(100, -60.0f);
  l[10] = l[20] = 3.0f;
  RowSampler rs;
  std::vector<float> got(l.size(), std::numeric_limits<float>::quiet_NaN());
  rs.distribution(l.data(), int64_t(l.size()), SamplingParams{1.0f, 0.5f, 1}, got.data());
  EXPECT_EQ(rs.fallbacks(), 1);
  EXPECT_TRUE(same_bits(got, op_row(l, 1.0f, 0.5f)));
  EXPECT_FALSE(rs.sparse());
}

TEST(RowSampler, GreedyRowIsOneHotWithItsSupport) {
  std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f};
  RowSampler rs;
  std::vector<float> got(4, std::numeric_limits<float>::quiet_NaN());
  rs.distribution(l.data(), 4, SamplingParams{}, got.data());
  EXPECT_EQ(got, (std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f}));
  ASSERT_TRUE(rs.sparse());
  EXPECT_EQ(rs.support(), (std::vector<int32_t>{1}));
  EXPECT_EQ(rs.draw(got.data(), 4, 3, 0), 1);
}

TEST(RowSampler, DrawFromIdsEqualsDrawFrom) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t V = 1 + trial * 7;
    std::vector<float> p(size_t(V), 0.0f);
    std::vector<int32_t> ids;
    for (int64_t v = 0; v < V; ++v)
      if (gen() % 3 == 0) {
        ids.push_back(int32_t(v));
        p[size_t(v)] = gen() % 5 == 0 ? 0.0f : u(gen);  // a listed id may still be zero
      }
    for (uint64_t d = 0; d < 50; ++d)
      ASSERT_EQ(draw_from_ids(p.data(), ids.data(), int64_t(ids.size()), 11, d), draw_from(p.data(), V, 11, d));
  }
}

TEST(RowSampler, ApproximateMassesWithinTheirBound) {
  double worst = 0;
  for (float d = -87.0f; d <= 0.0f; d += 1e-3f) {
    const double e = std::exp(double(d));
    worst = std::max(worst, std::fabs(double(detail::exp_approx(d)) - e) / e);
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_GE(detail::exp_approx(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_LT(detail::exp_approx(-std::numeric_limits<float>::infinity()), 1e-37f);
  std::mt19937 gen(3);
  for (Shape shape : {Shape::normal, Shape::spiky, Shape::neg_inf, Shape::flat})
    for (int64_t V : {5, 257, 49152}) {
      const std::vector<float> l = make_row(shape, V, gen);
      const float T = 0.6f;
      float mx = l[0];
      for (float x : l) mx = std::max(mx, x);
      const float m = mx / T;
      double total = 0, above[3] = {0, 0, 0};
      for (float x : l) {
        const float d = x / T - m;
        const double e = std::exp(double(std::max(d, -87.0f)));
        total += e;
        for (int c = 0; c < 3; ++c) above[c] += d > -detail::kMassCuts[c] ? e : 0.0;
      }
      const detail::ApproxMass am = detail::approx_exp_masses(l.data(), V, T, m);
      EXPECT_LT(std::fabs(am.total - total), 1e-5 * total) << V;
      for (int c = 0; c < 3; ++c) EXPECT_LT(std::fabs(am.above[c] - above[c]), 1e-5 * total) << V << " " << c;
    }
}
