// Sampling kernels (ctest label gpu) against the CPU reference: argmax vs
// ops::argmax (ties included) and vs argmax_lowest, the greedy rule of every
// level, on awkward rows (NaN, infinities, +-0, ties) with and without a
// reduced vocabulary; and the Philox inverse-CDF draw vs a host
// double-precision CDF using the same tf::philox_uniform numbers. Temperature and top-p:
// test_kernels_softmax_top_p. SKIPPED without CUDA or device.
#include <gtest/gtest.h>

#include "require_device.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "../unit/argmax_rows.h"
#include "core/device.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "gen/sampling.h"
#include "model/draft_vocab.h"
#include "ops/ops.h"
#include "sanitizer_shapes.h"

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

// The device greedy pick (ops::argmax on CUDA tensors, what forward_greedy
// launches) is argmax_lowest bit for bit: ties at several places, rows of
// -inf, all-equal rows, NaN first (it wins), NaN elsewhere (never wins), all
// NaN, +-0, +inf, many rows per launch, vocabularies around the 1024-thread
// block and the real ones. With a reduced vocabulary (token 0 in the set or
// not, a gap or none, every token, one token) it is argmax_lowest of the row
// expand_restricted_logits makes.
TEST(KernelsSampling, ArgmaxIsArgmaxLowestOnAwkwardRows) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  using tf::testing::kArgmaxCases;
  int checked = 0;
  auto run = [&](const std::vector<float>& rows, int64_t n, int64_t V, const tf::ops::ArgmaxIds* ids) {
    tf::Tensor h = tf::Tensor::cpu(DType::F32, {n, V});
    std::memcpy(h.data, rows.data(), h.bytes());
    tf::Tensor dx = tf::empty_tensor(tf::Device::CUDA, DType::F32, {n, V});
    tf::Tensor dout = tf::empty_tensor(tf::Device::CUDA, DType::I32, {n});
    tf::copy_tensor(dx, h);
    tf::ops::argmax(dx, dout, ids);
    tf::Tensor got = tf::Tensor::cpu(DType::I32, {n});
    tf::copy_tensor(got, dout);
    return std::vector<int32_t>(got.ptr<int32_t>(), got.ptr<int32_t>() + n);
  };
  for (int64_t V : tf::testing::grid<int64_t>({1, 2, 31, 1023, 1024, 1025, 4097, 49152, 128256}, {1, 1025, 49152})) {
    // Every case twice, in a different order, so a row's pick cannot depend on its neighbours.
    const int64_t n = 2 * kArgmaxCases;
    std::vector<float> x(size_t(n * V));
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<float> r = tf::testing::argmax_row(int(i < kArgmaxCases ? i : n - 1 - i), V, uint64_t(i / kArgmaxCases));
      std::copy(r.begin(), r.end(), x.begin() + i * V);
    }
    const std::vector<int32_t> got = run(x, n, V, nullptr);
    for (int64_t i = 0; i < n; ++i, ++checked)
      EXPECT_EQ(got[size_t(i)], tf::argmax_lowest(x.data() + i * V, V)) << "V=" << V << " row " << i;
    for (int set = 0; set < tf::testing::kArgmaxIdSets; ++set) {
      const int64_t full = V + 3;
      const std::vector<int32_t> ids = tf::testing::argmax_ids(set, full);
      const int64_t K = int64_t(ids.size());
      std::vector<float> xk(size_t(n * K));
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> r = tf::testing::argmax_row(int(i % kArgmaxCases), K, uint64_t(5 + i / kArgmaxCases));
        std::copy(r.begin(), r.end(), xk.begin() + i * K);
      }
      const tf::ops::ArgmaxIds a = tf::ops::argmax_ids(ids, full, tf::Device::CUDA);
      const std::vector<int32_t> gk = run(xk, n, K, &a);
      tf::Tensor hk = tf::Tensor::cpu(DType::F32, {n, K});
      std::memcpy(hk.data, xk.data(), hk.bytes());
      const tf::Tensor e = tf::expand_restricted_logits(hk, ids, full);
      for (int64_t i = 0; i < n; ++i, ++checked)
        EXPECT_EQ(gk[size_t(i)], tf::argmax_lowest(e.ptr<float>() + i * full, full))
            << "V=" << V << " id set " << set << " row " << i << " (case " << i % kArgmaxCases << ")";
    }
  }
  EXPECT_GT(checked, 300);
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
