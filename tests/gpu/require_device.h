// REQUIRE_DEVICE(): the first line of every GPU test. It reports SKIPPED (not
// passed) in a build without CUDA or on a machine without a GPU, as CI is.
#pragma once
#include <gtest/gtest.h>

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/device.h"

namespace tf::testing {
// After the last test, while the CUDA context is alive, the process-lifetime
// device state is freed: compute-sanitizer's leak check then reports only what a
// test or the code really lost (experiments/h200/sanitize.sh).
class ReleaseDeviceState : public ::testing::Environment {
 public:
  void TearDown() override { ::tf::release_device_state(); }
};
inline ::testing::Environment* const kReleaseDeviceState =
    ::testing::AddGlobalTestEnvironment(new ReleaseDeviceState);

inline bool have_cuda_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return true;
}
}  // namespace tf::testing

#define REQUIRE_DEVICE() \
  if (!::tf::testing::have_cuda_device()) GTEST_SKIP() << "no CUDA device on this machine"
#else
#define REQUIRE_DEVICE() GTEST_SKIP() << "built without CUDA"
#endif
