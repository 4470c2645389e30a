// TRIFORCE_PREFILL_STACKED (model/prefill_options.h): a bad value is one error
// naming the variable and what it takes; 1 turns the switch on. The default is
// read once per process, so one test walks both in order.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/check.h"
#include "model/prefill_options.h"

TEST(PrefillOptions, EnvironmentSwitch) {
  ::setenv("TRIFORCE_PREFILL_STACKED", "yes", 1);
  try {
    tf::prefill_options_default();
    ADD_FAILURE() << "TRIFORCE_PREFILL_STACKED=yes was accepted";
  } catch (const tf::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("TRIFORCE_PREFILL_STACKED=yes"), std::string::npos) << m;
    EXPECT_NE(m.find("expected 0 or 1"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;
  }
  ::setenv("TRIFORCE_PREFILL_STACKED", "1", 1);
  EXPECT_TRUE(tf::prefill_options_default().stacked_gemms);
  ::setenv("TRIFORCE_PREFILL_STACKED", "0", 1);
  EXPECT_TRUE(tf::prefill_options_default().stacked_gemms) << "read once per process";
  ::unsetenv("TRIFORCE_PREFILL_STACKED");
}
