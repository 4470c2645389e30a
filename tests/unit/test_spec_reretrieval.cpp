#include <gtest/gtest.h>

#include "core/check.h"
#include "speculative/reretrieval.h"

using tf::speculative::ReretrieveMonitor;
using tf::speculative::ReretrievePolicy;

TEST(Reretrieve, ParsesPolicies) {
  EXPECT_EQ(ReretrievePolicy::parse("never").kind, ReretrievePolicy::Kind::never);
  auto e = ReretrievePolicy::parse("every:16");
  EXPECT_EQ(e.kind, ReretrievePolicy::Kind::every);
  EXPECT_EQ(e.every, 16);
  auto b = ReretrievePolicy::parse("below:0.6");
  EXPECT_EQ(b.kind, ReretrievePolicy::Kind::below);
  EXPECT_DOUBLE_EQ(b.threshold, 0.6);
  EXPECT_EQ(b.str(), "below:0.6");
  for (const char* bad : {"sometimes", "every:0", "every:2.5", "every:", "below:0", "below:1.5", "below:x"}) {
    try {
      ReretrievePolicy::parse(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const tf::Error& err) {
      EXPECT_NE(std::string(err.what()).find("--reretrieve"), std::string::npos) << err.what();
    }
  }
}

TEST(Reretrieve, NeverRebuilds) {
  ReretrieveMonitor m(ReretrievePolicy::parse("never"));
  for (int i = 1; i <= 100; ++i) EXPECT_FALSE(m.after_step(i * 3, i * 6, 0));
  EXPECT_EQ(m.rebuilds(), 0);
}

TEST(Reretrieve, EveryNTokens) {
  ReretrieveMonitor m(ReretrievePolicy::parse("every:10"));
  // 4 tokens per step: rebuilds after 12, 24, 36 generated tokens (first step past each 10).
  int rebuilt_at[3], k = 0;
  for (int step = 1; step <= 10; ++step)
    if (m.after_step(step * 4, step * 6, step * 3)) rebuilt_at[k++] = step * 4;
  ASSERT_EQ(k, 3);
  EXPECT_EQ(rebuilt_at[0], 12);
  EXPECT_EQ(rebuilt_at[1], 24);
  EXPECT_EQ(rebuilt_at[2], 36);
}

TEST(Reretrieve, BelowThresholdUsesTheRollingWindow) {
  ReretrievePolicy p = ReretrievePolicy::parse("below:0.5");
  p.window = 4;
  ReretrieveMonitor m(p);
  int64_t drafted = 0, accepted = 0, gen = 0;
  auto step = [&](int64_t d, int64_t a) {
    drafted += d;
    accepted += a;
    gen += a + 1;
    return m.after_step(gen, drafted, accepted);
  };
  for (int i = 0; i < 12; ++i) EXPECT_FALSE(step(6, 5));  // alpha 0.83: never
  EXPECT_FALSE(step(6, 0));                                // window alpha (5+5+5+0)/24 = 0.625
  EXPECT_TRUE(step(6, 0));                                 // (5+5+0+0)/24 = 0.42 < 0.5
  // The window restarts after a rebuild: bad steps rebuild again only once it is full.
  EXPECT_FALSE(step(6, 0));
  EXPECT_FALSE(step(6, 0));
  EXPECT_FALSE(step(6, 0));
  EXPECT_TRUE(step(6, 0));
  EXPECT_EQ(m.rebuilds(), 2);
}
