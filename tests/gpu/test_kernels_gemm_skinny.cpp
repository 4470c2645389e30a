// The batch-invariant skinny GEMM (ctest label gpu), every variant:
//  - against a double-precision host reference over awkward shapes (in 8, 24,
//    576, 4104; out 1, 3, 127, 129, 4097; n 1..32 sampled) in f16 and bf16,
//    with the input dtype and f32 out; outputs are poisoned with NaN first and
//    must come back finite, with a poisoned guard after y left untouched;
//  - batch invariance: for every n in 1..32, row i of the n-row call is
//    bit-identical to the one-row call on x row i, on awkward shapes and on
//    the Llama-2-7B shapes the model runs (lm_head with f32 out);
//  - the PDL weight prefetch's bound (a quarter of L2 by default).
// SKIPPED without CUDA or a device.
#include <gtest/gtest.h>

#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#ifdef TRIFORCE_HAVE_CUDA
#include "device_buffer.cuh"
#include "gemm_skinny.cuh"
#include "pdl.cuh"
#endif

namespace {

#ifdef TRIFORCE_HAVE_CUDA
using tf::DType;
using namespace tf::cuda;

constexpr int64_t kGuard = 64;  // poisoned elements after y that no call may write

std::vector<float> uniform(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  tf::testing::fill_uniform(v, 0, n, seed);
  for (auto& x : v) x *= scale;
  return v;
}

// y[n, out] of one call (x from row row0), plus whether the guard after y kept its poison.
struct Result {
  std::vector<uint16_t> raw16;  // y_dtype f16/bf16
  std::vector<uint32_t> raw32;  // y_dtype f32
  bool guard_intact = true;
  float at(size_t k, DType yt) const {
    if (yt == DType::F32) {
      float f;
      std::memcpy(&f, &raw32[k], 4);
      return f;
    }
    return from_half_bits(raw16[k], yt);
  }
};

Result run(const DeviceBuffer& x, const DeviceBuffer& w, int64_t n, int64_t in, int64_t out, DType dt, DType yt,
           int variant, int64_t row0 = 0) {
  const size_t es = yt == DType::F32 ? 4 : 2;
  const size_t count = size_t(n * out), total = count + kGuard;
  DeviceBuffer y(total * es);
  y.poison();
  SkinnyGemmParams p;
  p.x = static_cast<const uint8_t*>(x.get()) + size_t(row0 * in) * 2, p.w = w.get(), p.y = y.get();
  p.n = n, p.in = in, p.out = out, p.dtype = dt, p.y_dtype = yt, p.variant = variant;
  gemm_skinny(p);
  CUDA_CHECK(cudaDeviceSynchronize());
  Result r;
  if (es == 4) {
    r.raw32.resize(total);
    y.download(r.raw32.data(), total * 4);
    for (size_t k = count; k < total; ++k) r.guard_intact &= r.raw32[k] == 0xFFFFFFFFu;
    r.raw32.resize(count);
  } else {
    r.raw16.resize(total);
    y.download(r.raw16.data(), total * 2);
    for (size_t k = count; k < total; ++k) r.guard_intact &= r.raw16[k] == 0xFFFFu;
    r.raw16.resize(count);
  }
  return r;
}

// The bits of row i of a result.
std::vector<uint32_t> row_bits(const Result& r, int64_t i, int64_t out) {
  std::vector<uint32_t> b(static_cast<size_t>(out));
  for (int64_t j = 0; j < out; ++j)
    b[size_t(j)] = r.raw32.empty() ? r.raw16[size_t(i * out + j)] : r.raw32[size_t(i * out + j)];
  return b;
}

std::string vname(int v) { return skinny_variant_name(SkinnyVariant(v)); }
#endif

}  // namespace

TEST(KernelsGemmSkinny, EveryVariantMatchesTheReference) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  constexpr int64_t kRows = 32;
  for (DType dt : {DType::BF16, DType::F16})
    // Sanitizer shapes: one short and one long reduction, outputs below and past a 128 tile.
    for (int64_t in : tf::testing::grid<int64_t>({8, 24, 576, 4104}, {24, 576}))
      for (int64_t out : tf::testing::grid<int64_t>({1, 3, 127, 129, 4097}, {3, 129})) {
        auto xh = uniform(size_t(kRows * in), 11 + in), wh = uniform(size_t(out * in), 5 + out, 0.05f);
        round_to(xh, dt), round_to(wh, dt);
        DeviceBuffer x = upload_as(xh, dt), w = upload_as(wh, dt);
        // Exact products summed in double, and the sum of their magnitudes for the bound.
        std::vector<double> ref(size_t(kRows * out)), mag(size_t(kRows * out));
        for (int64_t i = 0; i < kRows; ++i)
          for (int64_t j = 0; j < out; ++j) {
            double s = 0, m = 0;
            for (int64_t k = 0; k < in; ++k) {
              const double pr = double(xh[size_t(i * in + k)]) * wh[size_t(j * in + k)];
              s += pr, m += std::fabs(pr);
            }
            ref[size_t(i * out + j)] = s, mag[size_t(i * out + j)] = m;
          }
        for (int v = 0; v < kSkinnyVariants; ++v)
          for (DType yt : {dt, DType::F32})
            for (int64_t n : tf::testing::grid<int64_t>({1, 2, 3, 7, 8, 9, 16, 17, 31, 32}, {1, 3, 8, 9, 17, 32})) {
              SCOPED_TRACE(testing::Message() << vname(v) << " " << tf::dtype_name(dt) << " -> " << tf::dtype_name(yt)
                                              << " n=" << n << " in=" << in << " out=" << out);
              const Result r = run(x, w, n, in, out, dt, yt, v);
              EXPECT_TRUE(r.guard_intact) << "wrote past y";
              // fp32 accumulation of exact products; a half output adds its own rounding.
              const double rel = yt == DType::F32 ? 0.0 : (dt == DType::BF16 ? 1.0 / 256 : 1.0 / 2048);
              size_t bad = 0;
              for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < out; ++j) {
                  const size_t k = size_t(i * out + j);
                  const float got = r.at(k, yt);
                  const double e = ref[k];
                  if (!(std::isfinite(got) && std::fabs(got - e) <= 1e-5 * mag[k] + rel * std::fabs(e) + 1e-30) &&
                      bad++ == 0)
                    ADD_FAILURE() << "y[" << i << ", " << j << "] = " << got << ", reference " << e;
                }
              EXPECT_EQ(bad, 0u);
            }
      }
#endif
}

TEST(KernelsGemmSkinny, EveryVariantIsRowInvariantForEveryN) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  struct Shape {
    int64_t in, out;
    DType yt;  // F32, or BF16/F16 meaning "the input dtype"
  };
  // Awkward shapes, then the Llama-2-7B ones: q/k/v stacked, gate/up stacked, o, down, lm_head (f32 out).
  const Shape shapes[] = {{8, 3, DType::BF16},        {24, 129, DType::F32},     {4104, 127, DType::BF16},
                          {4104, 4097, DType::F32},   {4096, 4096, DType::BF16}, {4096, 12288, DType::BF16},
                          {4096, 22016, DType::BF16}, {11008, 4096, DType::BF16}, {4096, 32000, DType::F32}};
  constexpr int64_t kRows = 32;
  // Sanitizer shapes: the three awkward ones (both output dtypes), not the 7B ones.
  const size_t nshapes = tf::testing::pick<size_t>(std::size(shapes), 3);
  for (DType dt : {DType::BF16, DType::F16})
    for (const Shape& s : std::vector<Shape>(shapes, shapes + nshapes)) {
      const DType yt = s.yt == DType::F32 ? DType::F32 : dt;
      auto xh = uniform(size_t(kRows * s.in), 3 + s.in), wh = uniform(size_t(s.out * s.in), 7 + s.out, 0.05f);
      DeviceBuffer x = upload_as(xh, dt), w = upload_as(wh, dt);
      for (int v = 0; v < kSkinnyVariants; ++v) {
        SCOPED_TRACE(testing::Message() << vname(v) << " " << tf::dtype_name(dt) << " -> " << tf::dtype_name(yt)
                                        << " in=" << s.in << " out=" << s.out);
        std::vector<std::vector<uint32_t>> alone(kRows);  // row i computed by itself (a decode step)
        for (int64_t i = 0; i < kRows; ++i) {
          const Result r = run(x, w, 1, s.in, s.out, dt, yt, v, i);
          ASSERT_TRUE(r.guard_intact);
          for (int64_t j = 0; j < s.out; ++j) ASSERT_TRUE(std::isfinite(r.at(size_t(j), yt))) << "row " << i;
          alone[size_t(i)] = row_bits(r, 0, s.out);
        }
        for (int64_t n = 2; n <= kRows; ++n)
          for (int64_t row0 : {int64_t(0), kRows - n}) {  // the rows at every position of the call
            const Result r = run(x, w, n, s.in, s.out, dt, yt, v, row0);
            ASSERT_TRUE(r.guard_intact) << "n=" << n;
            for (int64_t i = 0; i < n; ++i) {
              const auto got = row_bits(r, i, s.out);
              const auto& want = alone[size_t(row0 + i)];
              const auto at = std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin();
              ASSERT_EQ(at, s.out) << "n=" << n << " row0=" << row0 << " row " << i << ": y[" << i << ", " << at
                                   << "] bits " << std::hex << got[size_t(at)] << " vs " << want[size_t(at)]
                                   << " computed alone";
            }
          }
      }
    }
#endif
}

TEST(KernelsGemmSkinny, BadVariantFailsWithOneLine) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  DeviceBuffer x(16), w(16), y(4);
  SkinnyGemmParams p;
  p.x = x.get(), p.w = w.get(), p.y = y.get(), p.n = 1, p.in = 8, p.out = 1, p.variant = kSkinnyVariants;
  EXPECT_THROW(gemm_skinny(p), std::exception);
#endif
}

// Under PDL the blocks whose weight rows start in the first
// TRIFORCE_PREFETCH_MIB of the matrix prefetch them (pdl.cuh,
// prefetch_blocks): every block when unset, a quarter of L2 with "auto".
TEST(KernelsGemmSkinny, PrefetchBound) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  EXPECT_EQ(prefetch_blocks_within(-1, 16, 8192), std::numeric_limits<unsigned>::max());
  EXPECT_EQ(prefetch_blocks_within(0, 16, 8192), 0u);
  EXPECT_EQ(prefetch_blocks_within(12 << 20, 16, 8192), 96u);    // 7B rows: 128 KB a block
  EXPECT_EQ(prefetch_blocks_within(12 << 20, 16, 1152), 683u);   // SmolLM2 rows: 18 KB, the last one partly in
  EXPECT_EQ(prefetch_blocks_within(1, 16, 8192), 1u);            // the first block starts inside any budget
  const char* e = std::getenv("TRIFORCE_PREFETCH_MIB");
  const std::string env = e ? e : "";
  if (env.empty() || env == "all") {
    EXPECT_EQ(prefetch_blocks(16, 8192), std::numeric_limits<unsigned>::max());
  } else if (env == "auto") {
    int dev = 0, l2 = 0;
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), cudaSuccess);
    EXPECT_EQ(prefetch_blocks(16, 8192), prefetch_blocks_within(int64_t(l2) / 4, 16, 8192));
  }
#endif
}
