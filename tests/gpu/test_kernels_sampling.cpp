// Sampling kernels (ctest label gpu) against the CPU reference: argmax vs
// ops::argmax (ties included) and the Philox inverse-CDF draw vs a host
// double-precision CDF using the same tf::philox_uniform numbers. Temperature and top-p:
// test_kernels_softmax_top_p. SKIPPED without CUDA or device.
#include <gtest/gtest.h>

#include "require_device.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "ops/ops.h"

#ifdef TRIFORCE_HAVE_CUDA
#include "device_buffer.cuh"
#include "sampling.cuh"
#endif

namespace {

using tf::DType;
const int64_t kVocabs[] = {1, 3, 127, 129, 4097, 65537, 128256};


std::vector<float> logits(int64_t n, int64_t V, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(n * V);
  for (auto& v : x) v = d(g);
  return x;
}

}  // namespace

TEST(KernelsSampling, ArgmaxMatchesCpuWithTies) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const int64_t n = 5;
  for (int64_t V : kVocabs) {
    auto x = logits(n, V, uint32_t(V));
    // Row 1: a tie for the maximum far apart; row 2: all equal; row 3: max at the end.
    if (V > 1) {
      x[1 * V + V / 3] = 50.0f, x[1 * V + V - 1] = 50.0f;
      for (int64_t j = 0; j < V; ++j) x[2 * V + j] = -1.0f;
      x[3 * V + V - 1] = 60.0f;
    }
    tf::cuda::DeviceBuffer dx(x.size() * 4), dout(n * 4);
    dx.upload(x.data(), dx.bytes());
    dout.poison();
    tf::cuda::argmax({dx.as<float>(), dout.as<int32_t>(), n, V});
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int32_t> got(n);
    dout.download(got.data(), n * 4);
    tf::Tensor tx = tf::Tensor::cpu(DType::F32, {n, V}), to = tf::Tensor::cpu(DType::I32, {n});
    std::memcpy(tx.data, x.data(), tx.bytes());
    tf::ops::argmax(tx, to);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(got[i], to.ptr<int32_t>()[i]) << "V=" << V << " row " << i;
  }
#endif
}

TEST(KernelsSampling, PhiloxDrawIsTheHostInverseCdf) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const int64_t n = 64;
  const uint64_t seed = 1234, offset = 99;
  for (int64_t V : kVocabs) {
    auto x = logits(n, V, uint32_t(V + 2));
    std::vector<float> pr(x.size());
    for (int64_t i = 0; i < n; ++i) {
      double m = -1e30, s = 0;
      for (int64_t j = 0; j < V; ++j) m = std::max<double>(m, x[i * V + j]);
      for (int64_t j = 0; j < V; ++j) s += std::exp(x[i * V + j] - m);
      for (int64_t j = 0; j < V; ++j) pr[i * V + j] = float(std::exp(x[i * V + j] - m) / s);
      if (V > 4 && i % 4 == 1)  // some zero entries (as after top-p filtering)
        for (int64_t j = 0; j < V; j += 2) pr[i * V + j] = 0.0f;
    }
    tf::cuda::DeviceBuffer dp(pr.size() * 4), dout(n * 4);
    dp.upload(pr.data(), dp.bytes());
    dout.poison();
    tf::cuda::sample({dp.as<float>(), dout.as<int32_t>(), n, V, seed, offset});
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int32_t> got(n);
    dout.download(got.data(), n * 4);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = got[i];
      ASSERT_TRUE(t >= 0 && t < V) << "V=" << V << " row " << i << " token " << t;
      EXPECT_GT(pr[i * V + t], 0.0f) << "V=" << V << " row " << i << " drew a zero-probability token";
      double total = 0, before = 0;
      for (int64_t j = 0; j < V; ++j) {
        if (j == t) before = total;
        total += pr[i * V + j];
      }
      const double target = double(tf::philox_uniform(seed, offset + uint64_t(i))) * total;
      const double tol = 1e-5 * total;  // fp32 chunked sums on the device vs double here
      EXPECT_LE(before, target + tol) << "V=" << V << " row " << i;
      EXPECT_GE(before + pr[i * V + t], target - tol) << "V=" << V << " row " << i;
    }
  }
#endif
}
