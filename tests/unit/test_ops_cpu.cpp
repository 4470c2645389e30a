// CPU ops vs naive double-precision loops over awkward shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/ops.h"
#include "random_tensor.h"

using namespace tf;

namespace {

using tf::testing::randn;

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::cpu(DType::I32, {int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.ptr<int32_t>());
  return t;
}

void expect_close(const Tensor& a, const std::vector<double>& ref, double tol, const char* what) {
  ASSERT_EQ(a.numel(), int64_t(ref.size())) << what;
  double maxerr = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.ptr<float>()[i];
    ASSERT_FALSE(std::isnan(x)) << what << " NaN at " << i;
    maxerr = std::max(maxerr, std::abs(double(x) - ref[size_t(i)]) / (1.0 + std::abs(ref[size_t(i)])));
  }
  EXPECT_LT(maxerr, tol) << what;
}

}  // namespace

TEST(OpsCpu, Linear) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 3, 127, 129})
    for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {17, 5}, {64, 129}, {130, 33}}) {
      Tensor x = randn({n, in}, rng), w = randn({out, in}, rng), y = Tensor::cpu(DType::F32, {n, out});
      ops::linear(x, w, y);
      std::vector<double> ref(static_cast<size_t>(n * out));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < out; ++o) {
          double s = 0;
          for (int64_t k = 0; k < in; ++k) s += double(x.ptr<float>()[i * in + k]) * w.ptr<float>()[o * in + k];
          ref[size_t(i * out + o)] = s;
        }
      expect_close(y, ref, 1e-5, "linear");
    }
}

TEST(OpsCpu, LinearShapeError) {
  std::mt19937 rng(1);
  Tensor x = randn({3, 4}, rng), w = randn({5, 6}, rng), y = Tensor::cpu(DType::F32, {3, 5});
  EXPECT_THROW(ops::linear(x, w, y), tf::Error);
  Tensor w2 = randn({5, 4}, rng), c = x;
  c.device = Device::CUDA;
  try {
    ops::linear(c, w2, y);
    FAIL();
  } catch (const tf::Error& e) {
    // a CUDA build names the mixed devices; a CPU-only build says it has no CUDA
    const std::string m = e.what();
    EXPECT_TRUE(m.find("device") != std::string::npos || m.find("without CUDA") != std::string::npos) << m;
  }
}

TEST(OpsCpu, RmsNormAndFused) {
  std::mt19937 rng(2);
  for (int64_t n : {1, 3, 127, 129})
    for (int64_t d : {1, 7, 64, 129}) {
      Tensor x = randn({n, d}, rng, 3.0f), w = randn({d}, rng), y = Tensor::cpu(DType::F32, {n, d});
      ops::rmsnorm(x, w, y, {1e-5f});
      std::vector<double> ref(static_cast<size_t>(n * d));
      for (int64_t i = 0; i < n; ++i) {
        double ss = 0;
        for (int64_t j = 0; j < d; ++j) ss += double(x.ptr<float>()[i * d + j]) * x.ptr<float>()[i * d + j];
        const double r = 1.0 / std::sqrt(ss / d + 1e-5);
        for (int64_t j = 0; j < d; ++j) ref[size_t(i * d + j)] = w.ptr<float>()[j] * x.ptr<float>()[i * d + j] * r;
      }
      expect_close(y, ref, 1e-5, "rmsnorm");
      // fused: residual += a; out = norm(residual)
      Tensor res = randn({n, d}, rng), a = randn({n, d}, rng), o = Tensor::cpu(DType::F32, {n, d});
      std::vector<double> sum(static_cast<size_t>(n * d));
      for (int64_t i = 0; i < n * d; ++i) sum[size_t(i)] = double(res.ptr<float>()[i]) + a.ptr<float>()[i];
      ops::add_rmsnorm(res, a, w, o, {1e-6f});
      expect_close(res, sum, 1e-6, "add_rmsnorm residual");
      for (int64_t i = 0; i < n; ++i) {
        double ss = 0;
        for (int64_t j = 0; j < d; ++j) ss += sum[size_t(i * d + j)] * sum[size_t(i * d + j)];
        const double r = 1.0 / std::sqrt(ss / d + 1e-6);
        for (int64_t j = 0; j < d; ++j) ref[size_t(i * d + j)] = w.ptr<float>()[j] * sum[size_t(i * d + j)] * r;
      }
      expect_close(o, ref, 1e-5, "add_rmsnorm out");
    }
}

TEST(OpsCpu, EmbeddingSiluArgmax) {
  std::mt19937 rng(3);
  Tensor table = randn({11, 5}, rng), out = Tensor::cpu(DType::F32, {3, 5});
  ops::embedding(table, i32({10, 0, 4}), out);
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(out.ptr<float>()[j], table.ptr<float>()[50 + j]);
    EXPECT_EQ(out.ptr<float>()[10 + j], table.ptr<float>()[20 + j]);
  }
  EXPECT_THROW(ops::embedding(table, i32({1, 11, 2}), out), tf::Error);

  Tensor g = randn({129, 7}, rng, 4.0f), u = randn({129, 7}, rng), o = Tensor::cpu(DType::F32, {129, 7});
  ops::silu_mul(g, u, o);
  std::vector<double> ref(129 * 7);
  for (int i = 0; i < 129 * 7; ++i) {
    const double a = g.ptr<float>()[i];
    ref[size_t(i)] = a / (1.0 + std::exp(-a)) * u.ptr<float>()[i];
  }
  expect_close(o, ref, 1e-6, "silu_mul");

  Tensor x = randn({127, 33}, rng), am = Tensor::cpu(DType::I32, {127});
  x.ptr<float>()[5 * 33 + 32] = 100.0f;
  ops::argmax(x, am);
  for (int i = 0; i < 127; ++i) {
    int best = 0;
    for (int j = 1; j < 33; ++j)
      if (x.ptr<float>()[i * 33 + j] > x.ptr<float>()[i * 33 + best]) best = j;
    EXPECT_EQ(am.ptr<int32_t>()[i], best);
  }
  EXPECT_EQ(am.ptr<int32_t>()[5], 32);
}

TEST(OpsCpu, Rope) {
  std::mt19937 rng(4);
  const int64_t n = 129, H = 3, D = 10, half = 5;
  Tensor inv = Tensor::cpu(DType::F32, {half});
  for (int j = 0; j < half; ++j) inv.ptr<float>()[j] = float(1.0 / std::pow(10000.0, 2.0 * j / D));
  std::vector<int32_t> pv(n);
  for (int i = 0; i < n; ++i) pv[size_t(i)] = 3 * i + 1;
  Tensor pos = i32(pv), c = Tensor::cpu(DType::F32, {n, half}), s = Tensor::cpu(DType::F32, {n, half});
  ops::rope_cos_sin(inv, pos, c, s, {0.5f});
  Tensor x = randn({n, H, D}, rng);
  std::vector<double> ref(static_cast<size_t>(n * H * D));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < half; ++j) {
        const double a = double(inv.ptr<float>()[j]) * pv[size_t(i)];
        const double cc = std::cos(a) * 0.5, ss = std::sin(a) * 0.5;
        const double x1 = x.ptr<float>()[(i * H + h) * D + j], x2 = x.ptr<float>()[(i * H + h) * D + j + half];
        ref[size_t((i * H + h) * D + j)] = x1 * cc - x2 * ss;
        ref[size_t((i * H + h) * D + j + half)] = x2 * cc + x1 * ss;
      }
  ops::rope_apply(x, c, s);
  expect_close(x, ref, 1e-4, "rope_apply");
}

namespace {

// Naive causal-by-position attention in double.
std::vector<double> naive_attention(const Tensor& q, const std::vector<int32_t>& qpos, const std::vector<float>& K,
                                    const std::vector<float>& V, const std::vector<int32_t>& kpos, int64_t H,
                                    int64_t KH, int64_t D, int64_t cap) {
  const int64_t n = q.shape[0], L = int64_t(kpos.size()), G = H / KH;
  std::vector<double> out(size_t(n * H * D), 0.0);
  std::vector<double> s(static_cast<size_t>(L));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / G;
      double m = -1e300;
      bool any = false;
      for (int64_t j = 0; j < L; ++j) {
        if (kpos[size_t(j)] > qpos[size_t(i)]) continue;
        double d = 0;
        for (int64_t t = 0; t < D; ++t) d += double(q.ptr<float>()[(i * H + h) * D + t]) * K[size_t((g * cap + j) * D + t)];
        s[size_t(j)] = d / std::sqrt(double(D));
        m = std::max(m, s[size_t(j)]);
        any = true;
      }
      if (!any) continue;
      double z = 0;
      for (int64_t j = 0; j < L; ++j)
        if (kpos[size_t(j)] <= qpos[size_t(i)]) z += std::exp(s[size_t(j)] - m);
      for (int64_t j = 0; j < L; ++j) {
        if (kpos[size_t(j)] > qpos[size_t(i)]) continue;
        const double p = std::exp(s[size_t(j)] - m) / z;
        for (int64_t t = 0; t < D; ++t) out[size_t((i * H + h) * D + t)] += p * V[size_t((g * cap + j) * D + t)];
      }
    }
  return out;
}

void run_attention_case(int64_t H, int64_t KH, int64_t D, int64_t past, int64_t n, bool identity, uint32_t seed,
                        int64_t row_block = 64) {
  std::mt19937 rng(seed);
  const int64_t cap = past + n + 3, L = past + n;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> K(static_cast<size_t>(KH * cap * D)), V(static_cast<size_t>(KH * cap * D));
  for (auto& x : K) x = nd(rng) * 2.0f;
  for (auto& x : V) x = nd(rng);
  std::vector<int32_t> kpos(static_cast<size_t>(L)), qpos(static_cast<size_t>(n));
  for (int64_t j = 0; j < L; ++j) kpos[size_t(j)] = identity ? int32_t(j) : int32_t(L - 1 - j + (j % 3));
  for (int64_t i = 0; i < n; ++i) qpos[size_t(i)] = kpos[size_t(past + i)];
  Tensor q = randn({n, H, D}, rng), out = Tensor::cpu(DType::F32, {n, H, D});
  std::fill(out.ptr<float>(), out.ptr<float>() + out.numel(), std::nanf(""));  // every row must be written
  const ops::KVView kv = tf::testing::head_major_kv(K.data(), V.data(), L, cap, KH, D, identity ? nullptr : kpos.data());
  ops::AttentionParams p;
  p.num_heads = H;
  p.num_kv_heads = KH;
  p.head_dim = D;
  p.row_block = row_block;
  ops::attention(q, i32(qpos), kv, out, p);
  auto ref = naive_attention(q, qpos, K, V, kpos, H, KH, D, cap);
  SCOPED_TRACE(::testing::Message() << "H=" << H << " KH=" << KH << " D=" << D << " past=" << past << " n=" << n
                                  << " identity=" << identity);
  expect_close(out, ref, 2e-5, "attention");
}

}  // namespace

TEST(OpsCpu, AttentionMhaGqaMqa) {
  uint32_t seed = 10;
  for (auto [H, KH] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {4, 2}, {6, 1}})
    for (int64_t n : {1, 3, 127, 129})
      for (int64_t past : {0, 5})
        for (bool id : {true, false}) run_attention_case(H, KH, 16, past, n, id, seed++);
}

TEST(OpsCpu, AttentionRowBlocks) {
  run_attention_case(4, 2, 8, 0, 129, true, 99, 1);
  run_attention_case(4, 2, 8, 2, 129, true, 98, 7);
  run_attention_case(4, 2, 8, 2, 129, false, 97, 200);
}

TEST(OpsCpu, AttentionLong) { run_attention_case(2, 1, 8, 0, 4097, true, 123); }

// Decode and verification rows (n <= cpu::kSkinnyMaxRows, the split-KV kernel)
// over caches of several splits, at SmolLM2's heads and at awkward ones.
TEST(OpsCpu, AttentionFewRowsLongCache) {
  uint32_t seed = 300;
  for (int64_t n : {1, 2, 7, 16})
    for (bool id : {true, false}) {
      run_attention_case(9, 3, 64, 1000, n, id, seed++);
      run_attention_case(4, 2, 12, 257, n, id, seed++);
    }
}

TEST(OpsCpu, AttentionSeesNothingGivesZeros) {
  std::vector<float> K(8, 1.0f), V(8, 1.0f);
  std::vector<int32_t> kpos = {5, 6};
  ops::KVView kv{K.data(), V.data(), 2, 8, 4, kpos.data(), 1, 4, Device::CPU};
  Tensor q = Tensor::cpu(DType::F32, {1, 1, 4}), out = Tensor::cpu(DType::F32, {1, 1, 4});
  out.ptr<float>()[0] = 7;
  ops::AttentionParams p;
  p.num_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = 4;
  ops::attention(q, i32({2}), kv, out, p);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(out.ptr<float>()[t], 0.0f);
}

TEST(OpsCpu, SoftmaxTopP) {
  Tensor l = Tensor::cpu(DType::F32, {1, 4}), p = Tensor::cpu(DType::F32, {1, 4});
  for (int j = 0; j < 4; ++j) l.ptr<float>()[j] = float(j + 1);
  // softmax([1,2,3,4]) = [.0321, .0871, .2369, .6439]; cumulative (ascending) .0321 .1192 .3561 1
  ops::softmax_top_p(l, p, {1.0f, 1.0f, 1});
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(4.0);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(p.ptr<float>()[j], std::exp(j + 1.0) / z, 1e-6);
  ops::softmax_top_p(l, p, {1.0f, 0.5f, 1});  // drop cum <= 0.5: only token 3 stays
  EXPECT_FLOAT_EQ(p.ptr<float>()[3], 1.0f);
  EXPECT_EQ(p.ptr<float>()[2], 0.0f);
  ops::softmax_top_p(l, p, {1.0f, 0.7f, 1});  // drop cum <= 0.3: tokens 0,1
  EXPECT_EQ(p.ptr<float>()[0], 0.0f);
  EXPECT_EQ(p.ptr<float>()[1], 0.0f);
  EXPECT_NEAR(p.ptr<float>()[2], std::exp(3.0) / (std::exp(3.0) + std::exp(4.0)), 1e-6);
  ops::softmax_top_p(l, p, {1.0f, 0.5f, 2});  // min_tokens_to_keep = 2
  EXPECT_GT(p.ptr<float>()[2], 0.0f);
  ops::softmax_top_p(l, p, {2.0f, 1.0f, 1});  // temperature
  const double z2 = std::exp(0.5) + std::exp(1.0) + std::exp(1.5) + std::exp(2.0);
  EXPECT_NEAR(p.ptr<float>()[0], std::exp(0.5) / z2, 1e-6);
  EXPECT_THROW(ops::softmax_top_p(l, p, {0.0f, 1.0f, 1}), tf::Error);
}

// ---- the step fusions (ops_step_cpu.cpp) against the unfused CPU ops ----

namespace {

// cos/sin tables of `rows` positions for head_dim D (the model's f32 rows).
void rope_tables(int64_t rows, int64_t D, Tensor& cos, Tensor& sin) {
  const int64_t half = D / 2;
  Tensor inv = Tensor::cpu(DType::F32, {half});
  for (int64_t i = 0; i < half; ++i) inv.ptr<float>()[i] = std::pow(10000.0f, -float(2 * i) / float(D));
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) pos[size_t(i)] = int32_t(i * 37 + 5);
  cos = Tensor::cpu(DType::F32, {rows, half}), sin = Tensor::cpu(DType::F32, {rows, half});
  ops::rope_cos_sin(inv, i32(pos), cos, sin, {1.0f});
}

std::vector<double> as_ref(const Tensor& t) { return std::vector<double>(t.ptr<float>(), t.ptr<float>() + t.numel()); }

// Columns [c0, c0 + cols) of a [n, ld] tensor as a contiguous [n, cols / D, D] copy.
Tensor columns(const Tensor& t, int64_t c0, int64_t cols, int64_t D) {
  const int64_t n = t.shape[0], ld = t.shape[1];
  Tensor o = Tensor::cpu(DType::F32, {n, cols / D, D});
  for (int64_t i = 0; i < n; ++i) std::copy_n(t.ptr<float>() + i * ld + c0, cols, o.ptr<float>() + i * cols);
  return o;
}

}  // namespace

TEST(OpsCpu, RopeQkvSplitAndToCacheMatchUnfused) {
  std::mt19937 rng(7);
  struct Shape { int64_t H, KH, D; };
  for (Shape s : {Shape{4, 4, 8}, Shape{9, 3, 64}, Shape{8, 1, 128}})
    for (int64_t n : {1, 3, 32}) {
      SCOPED_TRACE(::testing::Message() << "H=" << s.H << " KH=" << s.KH << " D=" << s.D << " n=" << n);
      const int64_t D = s.D, ld = (s.H + 2 * s.KH) * D, table_rows = 50, cap = 2 * n + 5;
      Tensor cos, sin;
      rope_tables(table_rows, D, cos, sin);
      std::vector<int32_t> rows_v(static_cast<size_t>(n)), slots_v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) rows_v[size_t(i)] = int32_t((i * 13 + 4) % table_rows);
      for (int64_t i = 0; i < n; ++i) slots_v[size_t(i)] = int32_t(cap - 1 - 2 * i);  // distinct, descending, gaps
      Tensor rows = i32(rows_v), slots = i32(slots_v);
      Tensor qkv = randn({n, ld}, rng);
      // The unfused reference: separate q, k, v, rope_apply_rows, then a cache write by hand.
      Tensor q = columns(qkv, 0, s.H * D, D), k = columns(qkv, s.H * D, s.KH * D, D);
      Tensor v = columns(qkv, (s.H + s.KH) * D, s.KH * D, D);
      ops::rope_apply_rows(q, k, cos, sin, rows);
      for (bool stacked : {true, false}) {
        const ops::QKVRows in = stacked ? ops::qkv_rows(qkv, s.H, s.KH, D)
                                        : ops::qkv_rows(columns(qkv, 0, s.H * D, D), columns(qkv, s.H * D, s.KH * D, D),
                                                        columns(qkv, (s.H + s.KH) * D, s.KH * D, D));
        Tensor qo = Tensor::cpu(DType::F32, {n, s.H, D}), ko = Tensor::cpu(DType::F32, {n, s.KH, D});
        Tensor vo = Tensor::cpu(DType::F32, {n, s.KH, D});
        ops::rope_qkv_split(in, cos, sin, rows, qo, ko, vo);
        expect_close(qo, as_ref(q), 1e-6, "split q");
        expect_close(ko, as_ref(k), 1e-6, "split k");
        expect_close(vo, as_ref(v), 1e-12, "split v");
        Tensor kc = Tensor::cpu(DType::F32, {s.KH, cap, D}), vc = Tensor::cpu(DType::F32, {s.KH, cap, D});
        for (Tensor* c : {&kc, &vc}) std::fill_n(c->ptr<float>(), c->numel(), 7.5f);
        Tensor q2 = Tensor::cpu(DType::F32, {n, s.H, D});
        ops::rope_qkv_to_cache(in, cos, sin, rows, slots, q2, kc, vc);
        expect_close(q2, as_ref(q), 1e-6, "to_cache q");
        std::vector<double> kref(size_t(kc.numel()), 7.5), vref(size_t(vc.numel()), 7.5);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t h = 0; h < s.KH; ++h)
            for (int64_t j = 0; j < D; ++j) {
              const size_t at = size_t((h * cap + slots_v[size_t(t)]) * D + j);
              kref[at] = k.ptr<float>()[(t * s.KH + h) * D + j];
              vref[at] = v.ptr<float>()[(t * s.KH + h) * D + j];
            }
        expect_close(kc, kref, 1e-6, "to_cache K (written slots rotated, the others untouched)");
        expect_close(vc, vref, 1e-12, "to_cache V");
      }
      // A slot outside the layer is refused with one line, not written.
      Tensor kc = Tensor::cpu(DType::F32, {s.KH, cap, D}), vc = Tensor::cpu(DType::F32, {s.KH, cap, D});
      Tensor qo = Tensor::cpu(DType::F32, {n, s.H, D});
      std::vector<int32_t> bad = slots_v;
      bad.back() = int32_t(cap);
      EXPECT_THROW(ops::rope_qkv_to_cache(ops::qkv_rows(qkv, s.H, s.KH, D), cos, sin, rows, i32(bad), qo, kc, vc),
                   tf::Error);
    }
}

TEST(OpsCpu, RopeQkvShapeErrors) {
  std::mt19937 rng(8);
  Tensor cos, sin;
  rope_tables(8, 16, cos, sin);
  Tensor qkv = randn({2, (4 + 2 * 2) * 16}, rng);
  EXPECT_THROW(ops::qkv_rows(qkv, 4, 1, 16), tf::Error);  // the row is not (H + 2 KH) * D
  Tensor qo = Tensor::cpu(DType::F32, {2, 4, 16}), ko = Tensor::cpu(DType::F32, {2, 2, 16});
  Tensor vo = Tensor::cpu(DType::F32, {2, 2, 16}), bad_q = Tensor::cpu(DType::F32, {2, 3, 16});
  const ops::QKVRows in = ops::qkv_rows(qkv, 4, 2, 16);
  EXPECT_THROW(ops::rope_qkv_split(in, cos, sin, i32({0}), qo, ko, vo), tf::Error);  // rows for 1 of 2 tokens
  EXPECT_THROW(ops::rope_qkv_split(in, cos, sin, i32({0, 1}), bad_q, ko, vo), tf::Error);
  EXPECT_THROW(ops::rope_qkv_split(in, cos, sin, i32({0, 8}), qo, ko, vo), tf::Error);  // row outside the table
  ops::rope_qkv_split(in, cos, sin, i32({0, 7}), qo, ko, vo);
}

TEST(OpsCpu, SiluMulHalvesAndRoundedAddNorm) {
  std::mt19937 rng(9);
  for (int64_t n : {1, 3, 32})
    for (int64_t I : {8, 1408}) {
      Tensor gu = randn({n, 2 * I}, rng, 3.0f), out = Tensor::cpu(DType::F32, {n, I});
      Tensor g = Tensor::cpu(DType::F32, {n, I}), u = Tensor::cpu(DType::F32, {n, I});
      for (int64_t i = 0; i < n; ++i) {
        std::copy_n(gu.ptr<float>() + i * 2 * I, I, g.ptr<float>() + i * I);
        std::copy_n(gu.ptr<float>() + i * 2 * I + I, I, u.ptr<float>() + i * I);
      }
      ops::silu_mul_halves(gu, out);
      ops::silu_mul(g, u, g);
      expect_close(out, as_ref(g), 1e-12, "silu_mul_halves");
    }
  Tensor bad = Tensor::cpu(DType::F32, {2, 7});
  Tensor gu = randn({2, 16}, rng);
  EXPECT_THROW(ops::silu_mul_halves(gu, bad), tf::Error);
  // The down projection over a stacked gate/up output: on the CPU the two ops,
  // the SwiGLU left in the scratch; a weight of the wrong width is refused.
  {
    Tensor gu2 = randn({3, 32}, rng), w = randn({5, 16}, rng);
    Tensor y = Tensor::cpu(DType::F32, {3, 5}), scratch = Tensor::cpu(DType::F32, {3, 16});
    Tensor act = Tensor::cpu(DType::F32, {3, 16}), want = Tensor::cpu(DType::F32, {3, 5});
    ops::linear_silu_mul_halves(gu2, w, y, scratch);
    ops::silu_mul_halves(gu2, act);
    ops::linear(act, w, want);
    expect_close(y, as_ref(want), 1e-12, "linear_silu_mul_halves");
    expect_close(scratch, as_ref(act), 1e-12, "linear_silu_mul_halves scratch");
    Tensor wide = randn({5, 32}, rng);
    try {
      ops::linear_silu_mul_halves(gu2, wide, y, scratch);
      ADD_FAILURE() << "a [5, 32] weight for a [3, 32] gate/up was accepted";
    } catch (const tf::Error& e) {
      EXPECT_NE(std::string(e.what()).find("linear_silu_mul_halves"), std::string::npos) << e.what();
    }
  }
  // rounded_sum: on f32 activations the stored sum is the sum, so add_rmsnorm
  // with it is add_inplace followed by rmsnorm, exactly.
  for (int64_t d : {64, 576}) {
    Tensor r1 = randn({3, d}, rng), x = randn({3, d}, rng), w = randn({d}, rng);
    Tensor r2 = Tensor::cpu(DType::F32, {3, d}), o1 = Tensor::cpu(DType::F32, {3, d}), o2 = Tensor::cpu(DType::F32, {3, d});
    std::copy_n(r1.ptr<float>(), r1.numel(), r2.ptr<float>());
    ops::RmsNormParams p{1e-5f};
    p.rounded_sum = true;
    ops::add_rmsnorm(r1, x, w, o1, p);
    ops::add_inplace(r2, x);
    ops::rmsnorm(r2, w, o2, {1e-5f});
    expect_close(r1, as_ref(r2), 1e-12, "residual");
    expect_close(o1, as_ref(o2), 1e-12, "norm");
  }
}

// The per-model decode attention split (TRIFORCE_ATTN_SPLIT_SLOTS=auto): 16
// slots per KV head, a power of two times 64 in [64, 512]; with the variable
// unset (as here) every model keeps the process default.
TEST(OpsCpu, AttentionSplitSlotsRule) {
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 64},   {1, 64},   {3, 64},   {4, 64},   {8, 128},
                                                         {12, 128}, {16, 256}, {31, 256}, {32, 512}, {64, 512}};
  for (const auto& [kv, slots] : want) EXPECT_EQ(ops::attention_split_slots_auto(kv), slots) << kv << " kv heads";
  if (!std::getenv("TRIFORCE_ATTN_SPLIT_SLOTS")) {
    EXPECT_EQ(ops::attention_split_slots(), 512);
    for (int64_t kv : {3, 8, 32}) EXPECT_EQ(ops::attention_split_slots_for(kv), 512);
  }
}
