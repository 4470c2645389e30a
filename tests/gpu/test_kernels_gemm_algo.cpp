// The prefill linears under every algorithm choice of kernels/gemm.cuh
// (cublasGemmEx, each cuBLASLt heuristic candidate, the tuned one, auto's pick) against a
// CPU reference in double precision on the same dtype-rounded inputs: awkward
// shapes (rows, in and out off every tile multiple), f16 and bf16, y in the
// input dtype or f32, one case with operands 2 bytes off a 16-byte boundary
// (cuBLASLt is told the alignment). y is poisoned with NaN before every run.
// Also: the policy switch dispatches to the choice it names (bit-identical),
// tuned and auto keep one choice per shape, and a bad TRIFORCE_GEMM_ALGO names the
// variable. SKIPPED without CUDA or without a device.
#include <gtest/gtest.h>

#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

#ifdef TRIFORCE_HAVE_CUDA
#include "device_buffer.cuh"
#include "gemm.cuh"
#endif

namespace {

using tf::DType;

#ifdef TRIFORCE_HAVE_CUDA
using tf::testing::fill_uniform;

struct Case {
  int64_t n, in, out;
  DType dt, yt;
  int64_t misalign = 0;  // elements by which x, w and y start past their buffers' (aligned) starts
};

struct Data {
  std::vector<float> x, w, ref;
  tf::cuda::DeviceBuffer dx, dw, dy;
};

Data make(const Case& c) {
  Data d;
  const int64_t pad = c.misalign;
  d.x.assign(size_t(pad + c.n * c.in), 0.0f), d.w.assign(size_t(pad + c.out * c.in), 0.0f);
  fill_uniform(d.x, size_t(pad), d.x.size(), 11 + c.n), fill_uniform(d.w, size_t(pad), d.w.size(), 23 + c.out);
  tf::cuda::round_to(d.x, c.dt), tf::cuda::round_to(d.w, c.dt);
  d.dx = tf::cuda::upload_as(d.x, c.dt), d.dw = tf::cuda::upload_as(d.w, c.dt);
  d.dy = tf::cuda::DeviceBuffer(size_t(pad + c.n * c.out) * tf::dtype_size(c.yt));
  d.ref.resize(size_t(c.n * c.out));
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t o = 0; o < c.out; ++o) {
      double acc = 0;
      const float* xr = d.x.data() + pad + i * c.in;
      const float* wr = d.w.data() + pad + o * c.in;
      for (int64_t k = 0; k < c.in; ++k) acc += double(xr[k]) * wr[k];
      d.ref[size_t(i * c.out + o)] = float(acc);
    }
  return d;
}

tf::cuda::GemmParams params(const Case& c, Data& d) {
  tf::cuda::GemmParams p;
  const size_t e = tf::dtype_size(c.dt), ey = tf::dtype_size(c.yt);
  p.x = static_cast<const char*>(d.dx.get()) + c.misalign * e;
  p.w = static_cast<const char*>(d.dw.get()) + c.misalign * e;
  p.y = static_cast<char*>(d.dy.get()) + c.misalign * ey;
  p.n = c.n, p.in = c.in, p.out = c.out, p.dtype = c.dt, p.y_dtype = c.yt;
  return p;
}

std::vector<float> result(const Case& c, Data& d) {
  const auto all = tf::cuda::download_as(d.dy, size_t(c.misalign + c.n * c.out), c.yt);
  return std::vector<float>(all.begin() + c.misalign, all.end());
}

void check_against_cpu(const Case& c, Data& d, int choice) {
  SCOPED_TRACE(testing::Message() << "n=" << c.n << " in=" << c.in << " out=" << c.out << " " << tf::dtype_name(c.dt)
                                  << " -> " << tf::dtype_name(c.yt) << " misalign " << c.misalign << " choice "
                                  << choice);
  d.dy.poison();
  tf::cuda::gemm_choice(params(c, d), choice);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = result(c, d);
  // fp32 accumulation; the output rounding dominates a half y.
  const float rtol = c.yt == DType::F32 ? 1e-5f : c.yt == DType::BF16 ? 8e-3f : 1e-3f;
  const float atol = 2e-4f * std::sqrt(float(c.in));
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = got[i], r = d.ref[i];
    if (!(std::isfinite(g) && std::fabs(g - r) <= atol + rtol * std::fabs(r)) && bad++ == 0)
      ADD_FAILURE() << "first mismatch at row " << i / size_t(c.out) << " col " << i % size_t(c.out) << ": got " << g
                    << " want " << r;
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << got.size() << " elements off";
}

const Case kCases[] = {
    {33, 72, 40, DType::BF16, DType::BF16},        {100, 4096, 1024, DType::BF16, DType::BF16},
    {257, 1000, 3000, DType::F16, DType::F16},     {129, 4096, 1001, DType::BF16, DType::F32},
    {1100, 512, 2056, DType::F16, DType::F32},     {77, 264, 136, DType::BF16, DType::BF16, 1},
};
#endif

}  // namespace

TEST(KernelsGemmAlgo, EveryChoiceMatchesCpu) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (const Case& c : kCases) {
    // Sanitizer shapes: the two largest cases go (the others keep each dtype, f32 output and alignment 1).
    if (tf::testing::sanitizer_shapes() && (&c == &kCases[1] || &c == &kCases[4])) continue;
    Data d = make(c);
    const int candidates = tf::cuda::gemm_lt_candidates(params(c, d));
    EXPECT_GT(candidates, 0) << "cuBLASLt offers no algorithm for n=" << c.n << " in=" << c.in << " out=" << c.out;
    check_against_cpu(c, d, tf::cuda::kGemmChoiceCublas);
    check_against_cpu(c, d, tf::cuda::kGemmChoiceTuned);
    check_against_cpu(c, d, tf::cuda::kGemmChoiceAuto);
    for (int i = 0; i < candidates; ++i) check_against_cpu(c, d, i);
    EXPECT_THROW(tf::cuda::gemm_choice(params(c, d), candidates), tf::Error) << "a candidate past the list";
  }
#endif
}

// gemm() under each policy is bit for bit the choice the policy names, and tuned stays on one
// candidate for a shape.
TEST(KernelsGemmAlgo, PolicyDispatch) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  using tf::cuda::GemmAlgo;
  EXPECT_EQ(tf::cuda::parse_gemm_algo("cublas"), GemmAlgo::Cublas);
  EXPECT_EQ(tf::cuda::parse_gemm_algo("lt"), GemmAlgo::Lt);
  EXPECT_EQ(tf::cuda::parse_gemm_algo("tuned"), GemmAlgo::Tuned);
  EXPECT_EQ(tf::cuda::parse_gemm_algo("auto"), GemmAlgo::Auto);
  try {
    tf::cuda::parse_gemm_algo("fastest");
    ADD_FAILURE() << "a bad value parsed";
  } catch (const tf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TRIFORCE_GEMM_ALGO=fastest"), std::string::npos) << e.what();
  }
  const Case c{300, 1024, 1536, DType::BF16, DType::BF16};
  Data d = make(c);
  const auto p = params(c, d);
  auto bits = [&](auto run) {
    d.dy.poison();
    run();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> b(size_t(c.n * c.out));
    d.dy.download(b.data(), b.size() * 2);
    return b;
  };
  const int tuned = tf::cuda::gemm_tuned_candidate(p);
  ASSERT_GE(tuned, 0);
  EXPECT_EQ(tf::cuda::gemm_tuned_candidate(p), tuned) << "tuned changed its mind";
  const int picked = tf::cuda::gemm_auto_choice(p);
  ASSERT_TRUE(picked == tf::cuda::kGemmChoiceCublas || (picked >= 0 && picked < tf::cuda::gemm_lt_candidates(p)))
      << "auto picked " << picked;
  EXPECT_EQ(tf::cuda::gemm_auto_choice(p), picked) << "auto changed its mind";
  const GemmAlgo before = tf::cuda::gemm_algo();
  const std::pair<GemmAlgo, int> cases[] = {{GemmAlgo::Cublas, tf::cuda::kGemmChoiceCublas},
                                            {GemmAlgo::Lt, 0},
                                            {GemmAlgo::Tuned, tuned},
                                            {GemmAlgo::Auto, picked}};
  for (auto [algo, choice] : cases) {
    tf::cuda::set_gemm_algo(algo);
    EXPECT_EQ(bits([&] { tf::cuda::gemm(p); }), bits([&] { tf::cuda::gemm_choice(p, choice); }))
        << tf::cuda::gemm_algo_name(algo);
  }
  tf::cuda::set_gemm_algo(before);
#endif
}
