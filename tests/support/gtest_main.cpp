// The main of every test binary without one of its own (tests/CMakeLists.txt).
#include "skip_exit_code.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return tf::testing::skip_exit_code(RUN_ALL_TESTS());
}
