// The CPU decode / verification kernels (ops/cpu/skinny_cpu.h) behind
// ops::linear and ops::attention for n <= kSkinnyMaxRows: the linear against
// a double-precision reference over awkward shapes, and the batch invariance
// both promise (row r of an n-row call == the one-row call on that row, bit
// for bit), for the AVX2 kernels where the CPU has them and the portable ones.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "ops/cpu/skinny_cpu.h"
#include "ops/ops.h"
#include "random_tensor.h"

using namespace tf;

namespace {

using tf::testing::randn;

Tensor nan_filled(std::vector<int64_t> shape) {
  Tensor t = Tensor::cpu(DType::F32, std::move(shape));
  std::fill(t.ptr<float>(), t.ptr<float>() + t.numel(), std::numeric_limits<float>::quiet_NaN());
  return t;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0; }

// Runs the body once with the kernels chosen for this CPU and once with the
// portable ones (the same when the CPU has no AVX2).
class Isa : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!ops::cpu::skinny_enabled()) GTEST_SKIP() << "TRIFORCE_CPU_KERNELS=blas";
    ops::cpu::force_generic_kernels(GetParam());
  }
  void TearDown() override { ops::cpu::force_generic_kernels(false); }
};
INSTANTIATE_TEST_SUITE_P(CpuSkinny, Isa, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "generic" : "native"; });

const std::vector<std::pair<int64_t, int64_t>> kShapes = {  // (in, out): in off multiples of 8 and 16, odd out
    {1, 1}, {7, 3}, {9, 5}, {17, 13}, {24, 7}, {63, 31}, {100, 33}, {581, 97}, {576, 192}};

TEST_P(Isa, LinearMatchesDoubleReference) {
  std::mt19937 rng(3);
  for (auto [in, out] : kShapes)
    for (int64_t n = 1; n <= 17; ++n) {  // 17: the first BLAS row count, held to the same reference
      Tensor x = randn({n, in}, rng), w = randn({out, in}, rng), y = nan_filled({n, out});
      ops::linear(x, w, y);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < out; ++o) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < in; ++k) {
            const double t = double(x.ptr<float>()[i * in + k]) * double(w.ptr<float>()[o * in + k]);
            ref += t;
            mag += std::abs(t);
          }
          const float got = y.ptr<float>()[i * out + o];
          // fp32 summation of `in` products: |error| <= ~in * eps * sum |terms|
          ASSERT_LE(std::abs(double(got) - ref), double(in + 2) * 0x1p-24 * mag + 1e-30)
              << "in=" << in << " out=" << out << " n=" << n << " row " << i << " col " << o << " got " << got;
        }
    }
}

TEST_P(Isa, LinearRowsBitEqualOneRowCalls) {
  std::mt19937 rng(5);
  for (auto [in, out] : kShapes)
    for (int64_t n = 1; n <= ops::cpu::kSkinnyMaxRows; ++n) {
      Tensor x = randn({n, in}, rng), w = randn({out, in}, rng), y = nan_filled({n, out});
      ops::linear(x, w, y);
      for (int64_t r = 0; r < n; ++r) {
        Tensor xr = ops::slice_rows(x, r, r + 1), yr = nan_filled({1, out});
        ops::linear(xr, w, yr);
        ASSERT_TRUE(same_bits(yr.ptr<float>(), y.ptr<float>() + r * out, out))
            << "in=" << in << " out=" << out << " n=" << n << " row " << r;
      }
    }
}

// f16 weights (a CPU draft's, model/cpu_f16_linears.h) are widened exactly as
// they are read: the f32 call on f16-representable weights, bit for bit, on the
// skinny rows and on the BLAS path of a longer call (the weights widened into
// scratch), including infinities in the weights; and half the bytes read.
TEST_P(Isa, F16WeightsGiveTheF32CallsBits) {
  std::mt19937 rng(11);
  std::vector<std::pair<int64_t, int64_t>> shapes = kShapes;
  shapes.push_back({576, 4099});  // threaded, a short last tile
  for (auto [in, out] : shapes)
    for (int64_t n : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(5), int64_t(7), ops::cpu::kSkinnyMaxRows,
                      ops::cpu::kSkinnyMaxRows + 1, int64_t(40)}) {
      Tensor x = randn({n, in}, rng), w = randn({out, in}, rng);
      Tensor h = Tensor::cpu(DType::F16, {out, in});
      for (int64_t i = 0; i < w.numel(); ++i) {
        h.ptr<uint16_t>()[i] = f32_to_f16(w.ptr<float>()[i] * (i % 97 == 5 ? 1e6f : 1.0f));  // some overflow to inf
        w.ptr<float>()[i] = f16_to_f32(h.ptr<uint16_t>()[i]);
      }
      Tensor a = nan_filled({n, out}), b = nan_filled({n, out});
      ops::linear(x, w, a);
      ops::linear(x, h, b);
      ASSERT_TRUE(same_bits(a.ptr<float>(), b.ptr<float>(), n * out)) << "in=" << in << " out=" << out << " n=" << n;
    }
}

TEST(CpuSkinnyF16, BadWeightDtypeIsOneLine) {
  std::mt19937 rng(1);
  Tensor x = randn({2, 8}, rng), y = nan_filled({2, 4});
  Tensor w = Tensor::cpu(DType::BF16, {4, 8});
  try {
    ops::linear(x, w, y);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear: weight is bf16, expected f32"), std::string::npos) << e.what();
  }
}

TEST_P(Isa, LinearBitsDoNotDependOnThreads) {
  std::mt19937 rng(7);
  const int threads = openblas_get_num_threads();
  Tensor x = randn({5, 576}, rng), w = randn({4099, 576}, rng), a = nan_filled({5, 4099}), b = nan_filled({5, 4099});
  ops::linear(x, w, a);
  openblas_set_num_threads(threads == 1 ? 2 : 1);
  ops::linear(x, w, b);
  openblas_set_num_threads(threads);
  EXPECT_TRUE(same_bits(a.ptr<float>(), b.ptr<float>(), a.numel()));
}

// Attention over a cache of past + n tokens: the n-row call (the verification)
// against n one-row calls over the cache as each decode step saw it (length
// past + r + 1), with identity positions or explicit ones (a streaming cache).
void check_attention_rows(int64_t H, int64_t KH, int64_t D, int64_t past, int64_t n, bool explicit_positions,
                          uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "H=" << H << " KH=" << KH << " D=" << D << " past=" << past << " n=" << n
                                  << " explicit=" << explicit_positions);
  std::mt19937 rng(seed);
  const int64_t cap = past + n + 5, L = past + n;
  std::vector<float> K(size_t(KH * cap * D)), V(size_t(KH * cap * D));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : K) v = nd(rng) * 2.0f;
  for (auto& v : V) v = nd(rng);
  // explicit: positions increase with the slot but skip some (evicted tokens)
  std::vector<int32_t> kpos(static_cast<size_t>(L));
  for (int64_t j = 0; j < L; ++j) kpos[size_t(j)] = explicit_positions ? int32_t(3 * j + 7) : int32_t(j);
  Tensor q = randn({n, H, D}, rng), out = nan_filled({n, H, D});
  Tensor qp = Tensor::cpu(DType::I32, {n});
  for (int64_t i = 0; i < n; ++i) qp.ptr<int32_t>()[i] = kpos[size_t(past + i)];
  const ops::KVView kv = tf::testing::head_major_kv(K.data(), V.data(), L, cap, KH, D, explicit_positions ? kpos.data() : nullptr);
  ops::AttentionParams p;
  p.num_heads = H;
  p.num_kv_heads = KH;
  p.head_dim = D;
  ops::attention(q, qp, kv, out, p);
  for (int64_t r = 0; r < n; ++r) {
    ops::KVView one = kv;
    one.length = past + r + 1;
    Tensor qr = ops::slice_rows(q, r, r + 1), o1 = nan_filled({1, H, D}), p1 = ops::slice_rows(qp, r, r + 1);
    ops::attention(qr, p1, one, o1, p);
    ASSERT_TRUE(same_bits(o1.ptr<float>(), out.ptr<float>() + r * H * D, H * D)) << "row " << r;
  }
}

TEST_P(Isa, AttentionRowsBitEqualOneRowCalls) {
  uint32_t seed = 20;
  for (bool ex : {false, true}) {
    // SmolLM2's heads; rows across split boundaries (128 slots) and inside one
    for (int64_t past : {0, 5, 120, 300, 1000})
      for (int64_t n : {1, 2, 3, 7, 8, 16}) check_attention_rows(9, 3, 64, past, n, ex, seed++);
    // awkward head dims (no multiple of 8, a tail) and MHA / MQA
    for (auto [H, KH, D] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{4, 4, 12}, {6, 1, 4}, {4, 2, 72}})
      for (int64_t n : {1, 5, 16}) check_attention_rows(H, KH, D, 130, n, ex, seed++);
  }
}


// The prefill softmax's exp: within a few ulps of exp, -inf gives 0, the sum
// matches, and nothing past cnt is written (its rows are packed).
TEST_P(Isa, ExpSumRowMatchesExpAndStaysInItsRow) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-30.0f, 0.0f);
  const float poison = std::numeric_limits<float>::quiet_NaN();
  for (int64_t cnt : {1, 5, 8, 9, 16, 23, 130, 1031}) {
    std::vector<float> s(size_t(cnt) + 9, poison);
    std::vector<float> e_ref(static_cast<size_t>(cnt));
    for (int64_t j = 0; j < cnt; ++j) s[j] = j % 7 == 3 ? -std::numeric_limits<float>::infinity() : u(rng);
    const float m = -0.25f;
    double want = 0.0;
    for (int64_t j = 0; j < cnt; ++j) {
      e_ref[j] = std::isinf(s[j]) ? 0.0f : float(std::exp(double(s[j]) - double(m)));
      want += e_ref[j];
    }
    const float got = ops::cpu::exp_sum_row(s.data(), cnt, m);
    for (int64_t j = 0; j < cnt; ++j) ASSERT_NEAR(s[j], e_ref[j], 4e-7f * e_ref[j] + 1e-30f) << "cnt " << cnt << " j " << j;
    for (int64_t j = cnt; j < cnt + 9; ++j) ASSERT_TRUE(std::isnan(s[j])) << "wrote past the row at " << j;
    EXPECT_NEAR(got, want, 1e-5 * want) << "cnt " << cnt;
  }
}

}  // namespace
