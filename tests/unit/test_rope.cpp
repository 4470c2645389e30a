// RoPE frequencies vs hand-computed values of transformers' formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "model/rope.h"
#include "ops/ops.h"

using namespace tf;

namespace {

ModelConfig cfg(int64_t head_dim, double theta, int64_t max_pos, const std::string& type, double factor = 1.0) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.max_position_embeddings = max_pos;
  c.rope_scaling.type = type;
  c.rope_scaling.factor = factor;
  return c;
}

void expect_inv(const RopeTable& t, const std::vector<double>& want) {
  ASSERT_EQ(t.inv_freq.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(t.inv_freq[i], want[i], 2e-6 * std::abs(want[i]) + 1e-12) << "index " << i;
}

}  // namespace

TEST(Rope, Default) {
  auto t = compute_rope(cfg(4, 10000.0, 2048, "none"));
  expect_inv(t, {1.0, 0.01});
  EXPECT_EQ(t.attention_scaling, 1.0f);
  auto t8 = compute_rope(cfg(8, 10000.0, 2048, "default"));
  expect_inv(t8, {1.0, 0.1, 0.01, 0.001});
  // head_dim 64: 10000^(-2/64) = 0.7498942093324559
  auto t64 = compute_rope(cfg(64, 10000.0, 2048, "none"));
  EXPECT_NEAR(t64.inv_freq[1], 0.7498942093324559, 1e-7);
  EXPECT_NEAR(t64.inv_freq[31], std::pow(10000.0, -62.0 / 64.0), 1e-10);
}

TEST(Rope, Linear) {
  auto t = compute_rope(cfg(4, 10000.0, 2048, "linear", 2.0));
  expect_inv(t, {0.5, 0.005});
  EXPECT_EQ(t.attention_scaling, 1.0f);
}

TEST(Rope, DynamicNtk) {
  ModelConfig c = cfg(4, 10000.0, 10, "dynamic", 2.0);
  expect_inv(compute_rope(c, 0), {1.0, 0.01});   // seq_len <= max: the plain table
  expect_inv(compute_rope(c, 7), {1.0, 0.01});
  // seq_len 20: base' = 1e4 * (2*20/10 - 1)^(4/2) = 9e4 -> inv = [1, 1/300]
  expect_inv(compute_rope(c, 20), {1.0, 1.0 / 300.0});

  Rope r(c);
  EXPECT_TRUE(r.dynamic());
  expect_inv(r.update(5), {1.0, 0.01});
  expect_inv(r.update(20), {1.0, 1.0 / 300.0});  // grows
  expect_inv(r.update(15), {1.0, 1.0 / 300.0});  // never shrinks while >= original max
  expect_inv(r.update(10), {1.0, 1.0 / 300.0});
  expect_inv(r.update(9), {1.0, 0.01});          // below original max: reset, as transformers does
  expect_inv(r.update(15), {1.0, 1.0 / std::sqrt(1e4 * 4.0)});  // base' = 1e4*(3-1)^2 = 4e4
}

TEST(Rope, Yarn) {
  // dim 8, base 1e4, original max 4096, factor 4, beta 32/1:
  // low = floor(8 ln(4096/(64 pi)) / (2 ln 1e4)) = floor(1.309) = 1
  // high = ceil(8 ln(4096/(2 pi)) / (2 ln 1e4)) = ceil(2.814) = 3
  // ramp over i=0..3 = clamp((i-1)/2) = [0, 0, .5, 1]; extrapolation factor = 1 - ramp
  // pos_freqs = [1, 10, 100, 1000]
  ModelConfig c = cfg(8, 10000.0, 16384, "yarn", 4.0);
  c.rope_scaling.original_max_position_embeddings = 4096;
  auto t = compute_rope(c);
  expect_inv(t, {1.0, 0.1, 0.5 * (1.0 / 400.0) + 0.5 * 0.01, 1.0 / 4000.0});
  EXPECT_NEAR(t.attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-6);  // 1.1386294

  // mscale / mscale_all_dim: ratio of the two get_mscale values
  c.rope_scaling.mscale = 2.0;
  c.rope_scaling.mscale_all_dim = 1.0;
  EXPECT_NEAR(compute_rope(c).attention_scaling, (0.2 * std::log(4.0) + 1.0) / (0.1 * std::log(4.0) + 1.0), 1e-6);
  c.rope_scaling.attention_factor = 0.9;
  EXPECT_NEAR(compute_rope(c).attention_scaling, 0.9, 1e-7);

  // truncate = false: low = 1.30904, high = 2.81419 (unrounded)
  ModelConfig u = cfg(8, 10000.0, 16384, "yarn", 4.0);
  u.rope_scaling.original_max_position_embeddings = 4096;
  u.rope_scaling.truncate = false;
  const double lo = 8 * std::log(4096 / (64 * M_PI)) / (2 * std::log(1e4));
  const double hi = 8 * std::log(4096 / (2 * M_PI)) / (2 * std::log(1e4));
  EXPECT_NEAR(lo, 1.30904, 1e-4);
  EXPECT_NEAR(hi, 2.81419, 1e-4);
  const double ramp2 = (2 - lo) / (hi - lo);  // 0.4592, i=0,1 -> 0, i=3 -> 1
  expect_inv(compute_rope(u), {1.0, 0.1, (1.0 / 400.0) * ramp2 + 0.01 * (1 - ramp2), 1.0 / 4000.0});
}

TEST(Rope, Llama3) {
  // dim 8, base 1e4: inv = [1, .1, .01, .001], wavelen = 2 pi / inv = [6.28, 62.8, 628.3, 6283]
  // original 1024, low 1, high 4 -> low_wl 1024, high_wl 256, factor 8
  ModelConfig c = cfg(8, 10000.0, 8192, "llama3", 8.0);
  c.rope_scaling.original_max_position_embeddings = 1024;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  auto t = compute_rope(c);
  const double s = (1024.0 / (2 * M_PI / 0.01) - 1.0) / 3.0;  // 0.20992, the medium band
  expect_inv(t, {1.0, 0.1, (1 - s) * 0.01 / 8 + s * 0.01, 0.001 / 8});
  EXPECT_NEAR(t.inv_freq[2], 0.0030868, 1e-7);
  EXPECT_EQ(t.attention_scaling, 1.0f);
}

TEST(Rope, Errors) {
  EXPECT_THROW(compute_rope(cfg(5, 10000.0, 10, "none")), tf::Error);
  EXPECT_THROW(compute_rope(cfg(4, 10000.0, 10, "longrope")), tf::Error);
}

TEST(Rope, ApplyRotatesPairsAndScales) {
  // head_dim 4, inv = [1, .01], yarn-like scaling 2: position 1 rotates pair (0,2) by 1 rad, (1,3) by .01 rad.
  RopeTable t;
  t.inv_freq = {1.0f, 0.01f};
  t.attention_scaling = 2.0f;
  Tensor pos = Tensor::cpu(DType::I32, {1});
  pos.ptr<int32_t>()[0] = 1;
  Tensor q = Tensor::cpu(DType::F32, {1, 1, 4}), k = Tensor::cpu(DType::F32, {1, 1, 4});
  const float qv[4] = {1, 2, 3, 4};
  std::copy(qv, qv + 4, q.ptr<float>());
  std::copy(qv, qv + 4, k.ptr<float>());
  apply_rope(t, pos, q, k);
  const double c0 = std::cos(1.0) * 2, s0 = std::sin(1.0) * 2, c1 = std::cos(0.01) * 2, s1 = std::sin(0.01) * 2;
  const double want[4] = {1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 3 * c0 + 1 * s0, 4 * c1 + 2 * s1};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(q.ptr<float>()[i], want[i], 1e-5) << i;
    EXPECT_NEAR(k.ptr<float>()[i], want[i], 1e-5) << i;
  }
}
