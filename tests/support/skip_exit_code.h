// How a test binary tells ctest it was skipped: exit 77 (SKIP_RETURN_CODE)
// only when every test that ran was skipped and none failed. ctest's
// SKIP_REGULAR_EXPRESSION on "[  SKIPPED ]", used before, marked a binary
// skipped as soon as ONE of its tests skipped, whatever its exit status, so a
// GPU binary whose real-model test skipped (no GGUF) hid the failure of its
// synthetic-model test.
#pragma once
#include <gtest/gtest.h>

namespace tf::testing {

constexpr int kSkipExitCode = 77;

inline int skip_exit_code(int run_all_tests_rc) {
  const ::testing::UnitTest* u = ::testing::UnitTest::GetInstance();
  if (run_all_tests_rc == 0 && u->test_to_run_count() > 0 && u->skipped_test_count() == u->test_to_run_count())
    return kSkipExitCode;
  return run_all_tests_rc;
}

}  // namespace tf::testing
