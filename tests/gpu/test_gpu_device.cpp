// GPU smoke test (ctest label gpu): the CUDA build sees a device and its
// libraries. Without a GPU, or in a build without CUDA, it reports SKIPPED.
#include <gtest/gtest.h>

#include <string>

#ifdef TRIFORCE_HAVE_CUDA
#include "device_info.cuh"
#endif

TEST(GpuDevice, VisibleWithLibraries) {
#ifndef TRIFORCE_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  const std::string s = tf::cuda::device_summary();
  if (s.find("no CUDA device") != std::string::npos) GTEST_SKIP() << "no CUDA device on this machine";
  EXPECT_NE(s.find("GPU 0: "), std::string::npos) << s;
  EXPECT_NE(s.find("NCCL "), std::string::npos) << s;
#endif
}
