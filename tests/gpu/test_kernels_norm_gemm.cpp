// The skinny GEMM with the RMSNorm of its input in the prologue
// (kernels/gemm_skinny_norm.cuh; ctest label gpu):
//  - bit for bit the two launches it replaces: the norm kernel (plain, or
//    with the residual add, the fp32 or the stored sum normalized) and then
//    the skinny GEMM of the same variant, for y and for the stored sum;
//  - against a double-precision host reference (the norm of the rounded
//    inputs, rounded to the dtype as the device stores it, then the product);
//  - batch invariance: row i of an n-row call is the one-row call on row i;
//  - outputs poisoned (NaN) first, with a poisoned guard after y and after the
//    stored sum that no call may write; a refused shape says why.
// Shapes: in 8, 64, 576, 1000, 2048, 4096 (a 7B's rows: a 512-thread norm on a
// narrower GEMM block; n <= 24 there); out 1, 17, 960 (and 33); n 1..32 sampled;
// f16 and bf16; both tensor-core variants. SKIPPED without CUDA or a device.
#include <gtest/gtest.h>

#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#ifdef TRIFORCE_HAVE_CUDA
#include "device_buffer.cuh"
#include "gemm_skinny.cuh"
#include "gemm_skinny_norm.cuh"
#include "rmsnorm.cuh"
#endif

namespace {

#ifdef TRIFORCE_HAVE_CUDA
using tf::DType;
using namespace tf::cuda;

constexpr int64_t kGuard = 64;  // poisoned elements after an output that no call may write
constexpr float kEps = 1e-5f;

std::vector<float> uniform(size_t n, uint64_t seed, float scale, float offset = 0.0f) {
  std::vector<float> v(n);
  tf::testing::fill_uniform(v, 0, n, seed);
  for (auto& x : v) x = offset + scale * x;
  return v;
}

struct Inputs {
  int64_t n, in, out;
  DType dt;
  std::vector<float> residual, add, norm_w, w;  // rounded to dt
  DeviceBuffer d_residual, d_add, d_norm_w, d_w;
};

Inputs make_inputs(int64_t n, int64_t in, int64_t out, DType dt, uint64_t seed) {
  Inputs a{n, in, out, dt, {}, {}, {}, {}, {}, {}, {}, {}};
  a.residual = uniform(size_t(n * in), seed, 3.0f);
  a.add = uniform(size_t(n * in), seed + 1, 1.0f);
  a.norm_w = uniform(size_t(in), seed + 2, 0.5f, 1.0f);
  a.w = uniform(size_t(out * in), seed + 3, 0.1f);
  for (auto* v : {&a.residual, &a.add, &a.norm_w, &a.w}) round_to(*v, dt);
  a.d_residual = upload_as(a.residual, dt), a.d_add = upload_as(a.add, dt);
  a.d_norm_w = upload_as(a.norm_w, dt), a.d_w = upload_as(a.w, dt);
  return a;
}

struct Outputs {
  std::vector<uint16_t> y, sum;  // raw bits
  bool guards_intact = true;
};

std::vector<uint16_t> take(const DeviceBuffer& b, size_t count, bool& guard) {
  std::vector<uint16_t> r(count + kGuard);
  b.download(r.data(), r.size() * 2);
  for (size_t k = count; k < r.size(); ++k) guard &= r[k] == 0xFFFFu;
  r.resize(count);
  return r;
}

// mode 0: rmsnorm(residual); 1: residual + add, fp32 sum normalized; 2: the stored sum normalized.
Outputs run_fused(const Inputs& a, int mode, int variant, int64_t row0 = 0, int64_t n = -1) {
  if (n < 0) n = a.n;
  const size_t off = size_t(row0 * a.in) * 2;
  DeviceBuffer y(size_t(n * a.out + kGuard) * 2), sum(size_t(n * a.in + kGuard) * 2);
  y.poison(), sum.poison();
  SkinnyNormGemmParams p;
  p.residual = static_cast<const uint8_t*>(a.d_residual.get()) + off;
  p.add = mode ? static_cast<const uint8_t*>(a.d_add.get()) + off : nullptr;
  p.sum_out = mode ? sum.get() : nullptr;
  p.norm_weight = a.d_norm_w.get(), p.eps = kEps, p.rounded_sum = mode == 2;
  p.w = a.d_w.get(), p.y = y.get(), p.n = n, p.in = a.in, p.out = a.out, p.dtype = a.dt, p.variant = variant;
  gemm_skinny_norm(p);
  CUDA_CHECK(cudaDeviceSynchronize());
  Outputs o;
  o.y = take(y, size_t(n * a.out), o.guards_intact);
  if (mode) o.sum = take(sum, size_t(n * a.in), o.guards_intact);
  else take(sum, 0, o.guards_intact);  // no sum stored: its buffer keeps its poison
  return o;
}

// The step's two launches: the norm kernel (residual updated in place, as the model's add_rmsnorm), the GEMM.
Outputs run_unfused(const Inputs& a, int mode, int variant) {
  const int64_t n = a.n;
  DeviceBuffer residual(size_t(n * a.in) * 2), xn(size_t(n * a.in) * 2), y(size_t(n * a.out + kGuard) * 2);
  CUDA_CHECK(cudaMemcpy(residual.get(), a.d_residual.get(), size_t(n * a.in) * 2, cudaMemcpyDeviceToDevice));
  xn.poison(), y.poison();
  RmsNormParams r;
  if (mode) r.residual = residual.get(), r.x = a.d_add.get();
  else r.x = residual.get();
  r.weight = a.d_norm_w.get(), r.out = xn.get(), r.n = n, r.d = a.in, r.eps = kEps, r.dtype = a.dt;
  r.rounded_sum = mode == 2;
  rmsnorm(r);
  SkinnyGemmParams g;
  g.x = xn.get(), g.w = a.d_w.get(), g.y = y.get(), g.n = n, g.in = a.in, g.out = a.out, g.dtype = a.dt;
  g.y_dtype = a.dt, g.variant = variant;
  gemm_skinny(g);
  CUDA_CHECK(cudaDeviceSynchronize());
  Outputs o;
  o.y = take(y, size_t(n * a.out), o.guards_intact);
  if (mode) {
    o.sum.resize(size_t(n * a.in));
    residual.download(o.sum.data(), o.sum.size() * 2);
  }
  return o;
}

// y of the host reference: the normalized row rounded to dt (the GEMM's input), then the product in double.
std::vector<double> reference(const Inputs& a, int mode) {
  std::vector<double> y(size_t(a.n * a.out));
  std::vector<float> s(size_t(a.in)), xn(size_t(a.in));
  for (int64_t i = 0; i < a.n; ++i) {
    double ss = 0.0;
    for (int64_t c = 0; c < a.in; ++c) {
      float v = a.residual[size_t(i * a.in + c)];
      if (mode) v += a.add[size_t(i * a.in + c)];
      if (mode == 2) v = from_half_bits(to_half_bits(v, a.dt), a.dt);
      s[size_t(c)] = v;
      ss += double(v) * double(v);
    }
    const double r = 1.0 / std::sqrt(ss / double(a.in) + double(kEps));
    for (int64_t c = 0; c < a.in; ++c)
      xn[size_t(c)] = from_half_bits(to_half_bits(float(a.norm_w[size_t(c)] * (s[size_t(c)] * r)), a.dt), a.dt);
    for (int64_t j = 0; j < a.out; ++j) {
      double acc = 0.0;
      for (int64_t c = 0; c < a.in; ++c) acc += double(xn[size_t(c)]) * double(a.w[size_t(j * a.in + c)]);
      y[size_t(i * a.out + j)] = acc;
    }
  }
  return y;
}

struct Shape {
  int64_t in, out;
};

#endif

}  // namespace

TEST(KernelsNormGemm, BitIdenticalToNormThenGemmAndCloseToReference) {
#ifndef TRIFORCE_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  REQUIRE_DEVICE();
  const std::vector<Shape> shapes = tf::testing::pick<std::vector<Shape>>(
      {{8, 1}, {64, 17}, {576, 960}, {1000, 33}, {2048, 17}, {4096, 33}}, {{8, 1}, {576, 33}, {4096, 17}});
  const std::vector<int64_t> ns = tf::testing::pick<std::vector<int64_t>>({1, 2, 3, 8, 9, 17, 32}, {1, 9});
  int64_t checked = 0;
  for (DType dt : {DType::F16, DType::BF16})
    for (int variant : {int(SkinnyVariant::mma_k8u4), int(SkinnyVariant::mma_k4u8)})
      for (Shape s : shapes)
        for (int64_t n : ns) {
          if (const char* why = gemm_skinny_norm_unsupported(n, s.in, dt, variant)) {
            ASSERT_TRUE(s.in == 4096 && n > 24) << "in " << s.in << " n " << n << " refused: " << why;
            continue;  // the shared-memory bound: RefusedShapesSayWhy
          }
          const Inputs a = make_inputs(n, s.in, s.out, dt, uint64_t(7 * n + s.in + s.out));
          for (int mode : {0, 1, 2}) {
            const std::string what = std::string(dt == DType::F16 ? "f16" : "bf16") + " variant " +
                                     std::to_string(variant) + " in " + std::to_string(s.in) + " out " +
                                     std::to_string(s.out) + " n " + std::to_string(n) + " mode " + std::to_string(mode);
            const Outputs f = run_fused(a, mode, variant), u = run_unfused(a, mode, variant);
            ASSERT_TRUE(f.guards_intact && u.guards_intact) << what << ": a guard after an output was written";
            ASSERT_EQ(f.y, u.y) << what << ": y differs from the norm kernel + skinny GEMM";
            ASSERT_EQ(f.sum, u.sum) << what << ": the stored sum differs from the norm kernel's";
            const std::vector<double> ref = reference(a, mode);
            const double rtol = dt == DType::BF16 ? 2e-2 : 4e-3;
            for (size_t k = 0; k < ref.size(); ++k) {
              const float got = from_half_bits(f.y[k], dt);
              ASSERT_TRUE(std::isfinite(got)) << what << " element " << k;
              // The input row is rounded identically; what differs is the product's fp32 accumulation.
              const double tol = rtol * (std::fabs(ref[k]) + 0.05 * std::sqrt(double(s.in)));
              ASSERT_LE(std::fabs(double(got) - ref[k]), tol) << what << " element " << k << " want " << ref[k];
            }
            ++checked;
          }
        }
  EXPECT_GT(checked, 0);
#endif
}

TEST(KernelsNormGemm, RowsDoNotDependOnTheBatch) {
#ifndef TRIFORCE_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  REQUIRE_DEVICE();
  for (DType dt : {DType::F16, DType::BF16})
    for (Shape s : {Shape{576, 960}, Shape{768, 3072}, Shape{4096, 40}}) {
      const Inputs a = make_inputs(32, s.in, s.out, dt, 99 + uint64_t(s.in));
      for (int mode : {0, 1, 2})
        for (int64_t n : {32, 24, 7, 3}) {
          if (gemm_skinny_norm_unsupported(n, s.in, dt)) continue;
          const Outputs all = run_fused(a, mode, -1, 0, n);
          for (int64_t i = 0; i < n; ++i) {
            const Outputs one = run_fused(a, mode, -1, i, 1);
            ASSERT_EQ(std::memcmp(one.y.data(), all.y.data() + size_t(i * s.out), size_t(s.out) * 2), 0)
                << "mode " << mode << " n " << n << ": row " << i << " differs from its one-row call";
            if (mode) {
              ASSERT_EQ(std::memcmp(one.sum.data(), all.sum.data() + size_t(i * s.in), size_t(s.in) * 2), 0)
                  << "mode " << mode << " n " << n << ": stored sum row " << i << " differs";
            }
          }
        }
    }
#endif
}

TEST(KernelsNormGemm, RefusedShapesSayWhy) {
#ifndef TRIFORCE_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  EXPECT_STREQ(gemm_skinny_norm_unsupported(33, 576, DType::BF16), "rows outside 1..32");
  EXPECT_STREQ(gemm_skinny_norm_unsupported(1, 16392, DType::BF16), "row length is not a multiple of 8 up to 16384");
  EXPECT_STREQ(gemm_skinny_norm_unsupported(1, 580, DType::BF16), "row length is not a multiple of 8 up to 16384");
  EXPECT_STREQ(gemm_skinny_norm_unsupported(25, 4096, DType::BF16), "rows x (row length + 8) x 2 bytes exceed 200 KB");
  EXPECT_EQ(gemm_skinny_norm_unsupported(24, 4096, DType::BF16), nullptr);
  EXPECT_EQ(gemm_skinny_norm_unsupported(1, 16384, DType::BF16), nullptr);
  EXPECT_STREQ(gemm_skinny_norm_unsupported(1, 576, DType::F32), "dtype is not f16/bf16");
  EXPECT_STREQ(gemm_skinny_norm_unsupported(1, 576, DType::BF16, int(SkinnyVariant::simt)),
               "the skinny variant is not tensor-core");
  EXPECT_EQ(gemm_skinny_norm_unsupported(32, 2048, DType::F16), nullptr);
#endif
}
