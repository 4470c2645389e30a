// Batch invariance of split-KV attention with fixed 512-slot splits (ctest
// label gpu), one of the kernels behind exact greedy speculation on the GPU:
// query i of a 7-query verification is bit-identical to the decode of that
// query at its own length. Outputs are poisoned with NaN before every launch.
// The skinny GEMM's invariance, for every variant, is in test_kernels_gemm_skinny.
#include <gtest/gtest.h>

#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"

#include <cmath>
#include <cstring>
#include <vector>

#ifdef TRIFORCE_HAVE_CUDA
#include "attention_decode.cuh"
#include "device_buffer.cuh"
#endif

namespace {

#ifdef TRIFORCE_HAVE_CUDA
using tf::DType;
using namespace tf::cuda;

std::vector<float> uniform(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  tf::testing::fill_uniform(v, 0, n, seed);
  for (auto& x : v) x *= scale;
  return v;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

#endif

}  // namespace

TEST(BatchInvariance, VerifyRowsEqualTheirOwnDecodeSteps) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : {DType::BF16, DType::F16})
    for (auto [D, warps] : {std::pair<int64_t, int>{64, 4}, {64, 8}, {128, 4}})  // every split width
      for (auto [H, KH] : {std::pair<int64_t, int64_t>{8, 8}, {12, 3}})
        // Sanitizer shapes: one split, two, and three (1300), not the long contexts.
        for (int64_t L : tf::testing::grid<int64_t>({7, 513, 4097, 65537}, {7, 513, 1300})) {
          SCOPED_TRACE(testing::Message() << tf::dtype_name(dt) << " D=" << D << " warps=" << warps << " H=" << H
                                          << "/" << KH << " L=" << L);
          const int64_t n = 7, cap = L + 8;
          auto kh = uniform(size_t(KH * cap * D), 1), vh = uniform(size_t(KH * cap * D), 2);
          auto qh = uniform(size_t(n * H * D), 3, 2.0f);
          round_to(kh, dt), round_to(vh, dt), round_to(qh, dt);
          DeviceBuffer k = upload_as(kh, dt), v = upload_as(vh, dt), q = upload_as(qh, dt);
          auto attend = [&](int64_t row0, int64_t rows, int32_t len) {
            std::vector<int32_t> slots(static_cast<size_t>(rows));
            for (int64_t i = 0; i < rows; ++i) slots[size_t(i)] = int32_t(L - n + row0 + i);
            DeviceBuffer dslots(slots.size() * 4), dlen(4), out(size_t(rows * H * D) * 2);
            dslots.upload(slots.data(), slots.size() * 4);
            dlen.upload(&len, 4);
            out.poison();
            AttentionDecodeParams p;
            p.q = static_cast<const uint16_t*>(q.get()) + row0 * H * D, p.k_cache = k.get(), p.v_cache = v.get();
            p.out = out.get(), p.kv_length = dlen.as<int32_t>(), p.q_positions = dslots.as<int32_t>();
            p.n = rows, p.num_heads = H, p.num_kv_heads = KH, p.head_dim = D, p.capacity = cap;
            p.max_length = len, p.split_slots = 512, p.dtype = dt, p.split_warps = warps;
            DeviceBuffer ws(attention_decode_workspace_bytes(p));
            ws.poison();
            p.workspace = ws.as<float>();
            attention_decode(p);
            return download_as(out, size_t(rows * H * D), dt);
          };
          const auto all = attend(0, n, int32_t(L));
          for (int64_t i = 0; i < n; ++i) {
            const auto one = attend(i, 1, int32_t(L - n + i + 1));  // the decode step of token i
            const std::vector<float> row(all.begin() + i * H * D, all.begin() + (i + 1) * H * D);
            for (float x : one) ASSERT_TRUE(std::isfinite(x));
            ASSERT_EQ(bits(one), bits(row)) << "query " << i;
          }
        }
#endif
}

// What a CUDA graph step relies on: a grid sized for more slots than the
// length (the graph's bucket, up to the capacity) gives the bits of the grid
// sized for the length. The extra splits exit at once and the combine skips
// them, so their (poisoned) workspace is never read.
TEST(BatchInvariance, GridAboveTheLengthGivesTheLengthsBits) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const DType dt = DType::BF16;
  const int64_t D = 128, H = 12, KH = 3, cap = 8192 + 64;
  auto kh = uniform(size_t(KH * cap * D), 4), vh = uniform(size_t(KH * cap * D), 5);
  auto qh = uniform(size_t(7 * H * D), 6, 2.0f);
  round_to(kh, dt), round_to(vh, dt), round_to(qh, dt);
  DeviceBuffer k = upload_as(kh, dt), v = upload_as(vh, dt), q = upload_as(qh, dt);
  for (int64_t n : {1, 7})
    for (int64_t L : tf::testing::grid<int64_t>({1, 7, 511, 512, 513, 1025, 4097, 8192}, {1, 511, 513, 1025}))
      for (int64_t grid : {int64_t(2048), cap}) {
        if (L < n || grid < L) continue;
        SCOPED_TRACE(testing::Message() << "n=" << n << " L=" << L << " grid=" << grid);
        auto attend = [&](int64_t max_length) {
          std::vector<int32_t> slots(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) slots[size_t(i)] = int32_t(L - n + i);
          const int32_t len = int32_t(L);
          DeviceBuffer dslots(slots.size() * 4), dlen(4), out(size_t(n * H * D) * 2);
          dslots.upload(slots.data(), slots.size() * 4);
          dlen.upload(&len, 4);
          out.poison();
          AttentionDecodeParams p;
          p.q = q.get(), p.k_cache = k.get(), p.v_cache = v.get();
          p.out = out.get(), p.kv_length = dlen.as<int32_t>(), p.q_positions = dslots.as<int32_t>();
          p.n = n, p.num_heads = H, p.num_kv_heads = KH, p.head_dim = D, p.capacity = cap;
          p.max_length = max_length, p.split_slots = 512, p.dtype = dt;
          DeviceBuffer ws(attention_decode_workspace_bytes(p));
          ws.poison();
          p.workspace = ws.as<float>();
          attention_decode(p);
          return download_as(out, size_t(n * H * D), dt);
        };
        const auto exact = attend(L);
        const auto wide = attend(grid);
        for (float x : wide) ASSERT_TRUE(std::isfinite(x));
        ASSERT_EQ(bits(wide), bits(exact));
      }
#endif
}
