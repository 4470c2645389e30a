#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/philox.h"

// Known-answer vectors from the Random123 distribution (kat_vectors, philox4x32 10 rounds).
TEST(Philox, KnownAnswerZero) {
  auto r = tf::philox4x32_10(0, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
}

TEST(Philox, KnownAnswerOnes) {
  auto r = tf::philox4x32_10(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(r.v[0], 0x408f276du);
  EXPECT_EQ(r.v[1], 0x41c83b0eu);
  EXPECT_EQ(r.v[2], 0xa20bc7c6u);
  EXPECT_EQ(r.v[3], 0x6d5451fdu);
}

TEST(Philox, KnownAnswerPi) {
  uint64_t ctr_lo = 0x85a308d3ull << 32 | 0x243f6a88ull;
  uint64_t ctr_hi = 0x03707344ull << 32 | 0x13198a2eull;
  uint64_t key = 0x299f31d0ull << 32 | 0xa4093822ull;
  auto r = tf::philox4x32_10(key, ctr_lo, ctr_hi);
  EXPECT_EQ(r.v[0], 0xd16cfe09u);
  EXPECT_EQ(r.v[1], 0x94fdccebu);
  EXPECT_EQ(r.v[2], 0x5001e420u);
  EXPECT_EQ(r.v[3], 0x24126ea1u);
}

TEST(Philox, UniformMomentsAndRange) {
  const int n = 200000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    float u = tf::philox_uniform(1234, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sum2 += double(u) * u;
  }
  double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 4 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 0.002);
  EXPECT_NE(tf::philox_uniform(1, 0), tf::philox_uniform(2, 0));
}
