// ops::softmax_top_p on CUDA tensors (ctest label gpu) against its CPU body
// and against an exact reference (double sums over the (s, index) order):
// vocab 1, 3, 127, 129, 4097, 65537, 128256; top_p 0.1, 0.5, 0.9, 0.99, 1;
// T 0.5, 1, 2; min_tokens_to_keep 1 and 100; rows normal, flat (every token
// tied), peaked, and quantized (many ties at the cut). Checked per row:
//  - the kept set is a suffix of the ascending (s, index) order, so among
//    equal s the lower index goes first, as the CPU's stable sort does;
//  - its size equals the exact reference's, and the CPU's, except where the
//    cumulative mass at the differing positions is within 1e-6 of 1 - top_p;
//  - probabilities: finite, 0 exactly where dropped, within 2e-6 of
//    exp(s - max) / sum over the kept set, within 1e-5 of the CPU's where the
//    sets agree; the output is poisoned with NaN before each launch.
// Also: in place (probs aliasing logits) and run-to-run bit identity.
#include <gtest/gtest.h>

#include "require_device.h"
#include "sanitizer_shapes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "ops/ops.h"

#ifdef TRIFORCE_HAVE_CUDA
#include "softmax_top_p.cuh"
#endif

namespace {

using tf::Device;
using tf::DType;
using tf::Tensor;

const int64_t kVocabs[] = {1, 3, 127, 129, 4097, 65537, 128256};
constexpr int64_t kRows = 4;  // normal, flat, peaked, quantized
constexpr double kCutTol = 1e-6;

std::vector<float> make_rows(int64_t V, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(size_t(kRows * V));
  for (int64_t j = 0; j < V; ++j) {
    x[size_t(0 * V + j)] = 3.0f * d(g);
    x[size_t(1 * V + j)] = 0.5f;
    x[size_t(2 * V + j)] = d(g);
    x[size_t(3 * V + j)] = std::round(4.0f * d(g)) / 2.0f;
  }
  x[size_t(2 * V + int64_t(g() % uint32_t(V)))] = 12.0f;
  return x;
}

Tensor upload(const std::vector<float>& h, int64_t n, int64_t V) {
  Tensor t = tf::empty_tensor(Device::CUDA, DType::F32, {n, V});
  tf::copy_bytes(t.data, Device::CUDA, h.data(), Device::CPU, h.size() * 4);
  return t;
}
std::vector<float> download(const Tensor& t) {
  std::vector<float> h(size_t(t.numel()));
  tf::copy_bytes(h.data(), Device::CPU, t.data, Device::CUDA, h.size() * 4);
  return h;
}
void poison(Tensor& t) {
  std::vector<uint32_t> nan(size_t(t.numel()), 0xFFFFFFFFu);
  tf::copy_bytes(t.data, Device::CUDA, nan.data(), Device::CPU, nan.size() * 4);
}

// Number of dropped tokens implied by `p` (kept = p > 0), after checking that
// the kept set is a suffix of `order`. Tokens whose exp(s - max) underflows
// to 0 in fp32 look dropped either way and are not held to the suffix rule.
int64_t dropped_prefix(const float* p, const std::vector<int32_t>& order, const std::vector<double>& e,
                       const std::string& who, bool& ok) {
  const int64_t V = int64_t(order.size());
  int64_t first_kept = V;
  for (int64_t k = 0; k < V; ++k)
    if (p[order[size_t(k)]] > 0.0f) {
      first_kept = k;
      break;
    }
  for (int64_t k = first_kept; k < V; ++k) {
    const int32_t j = order[size_t(k)];
    if (!(p[j] > 0.0f) && float(e[size_t(j)]) > 0.0f) {
      ADD_FAILURE() << who << ": token " << j << " (order position " << k << ") dropped after kept position "
                    << first_kept << ": the kept set is not a suffix of the (s, index) order";
      ok = false;
      return first_kept;
    }
  }
  return first_kept;
}

void check_row(const float* l, int64_t V, float T, float top_p, int64_t min_keep, const float* dev,
               const float* cpu, const std::string& ctx) {
  SCOPED_TRACE(ctx);
  std::vector<float> s(static_cast<size_t>(V));
  for (int64_t j = 0; j < V; ++j) s[size_t(j)] = l[j] / T;
  const float m = *std::max_element(s.begin(), s.end());
  std::vector<double> e(static_cast<size_t>(V));
  // s - max in fp32, as both bodies subtract (it rounds when s is far below the max); exp in double.
  for (int64_t j = 0; j < V; ++j) e[size_t(j)] = std::exp(double(s[size_t(j)] - m));
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return s[size_t(a)] < s[size_t(b)] || (s[size_t(a)] == s[size_t(b)] && a < b);
  });
  double tot = 0;
  for (int32_t j : order) tot += e[size_t(j)];
  std::vector<double> cum(static_cast<size_t>(V));
  double c = 0;
  for (int64_t k = 0; k < V; ++k) cum[size_t(k)] = (c += e[size_t(order[size_t(k)])] / tot);
  const double thresh = double(float(1.0 - double(top_p)));
  const int64_t limit = V - std::min<int64_t>(V, std::max<int64_t>(1, min_keep));
  int64_t exact = 0;
  if (top_p < 1.0f)
    while (exact < limit && cum[size_t(exact)] <= thresh) ++exact;

  for (int64_t j = 0; j < V; ++j)
    ASSERT_TRUE(std::isfinite(dev[j]) && dev[j] >= 0.0f) << "probs[" << j << "] = " << dev[j];
  bool ok = true;
  const int64_t d_dev = dropped_prefix(dev, order, e, "cuda", ok);
  const int64_t d_cpu = dropped_prefix(cpu, order, e, "cpu", ok);
  if (!ok) return;
  // (Underflowed tokens that read as dropped sit at cumulative mass ~0, which only a
  // top_p of 1 - 0 reaches, inside the tolerance.)
  auto agree = [&](int64_t d, const char* who) {
    for (int64_t k = std::min(d, exact); k < std::max(d, exact); ++k)
      if (std::fabs(cum[size_t(k)] - thresh) > kCutTol) {
        ADD_FAILURE() << who << " drops " << d << " tokens, the exact reference " << exact
                      << "; order position " << k << " has cumulative mass " << cum[size_t(k)]
                      << ", not within " << kCutTol << " of 1 - top_p = " << thresh;
        return;
      }
  };
  agree(d_dev, "cuda");
  agree(d_cpu, "cpu");

  double kept_sum = 0;
  for (int64_t j = 0; j < V; ++j)
    if (dev[j] > 0.0f) kept_sum += e[size_t(j)];
  size_t bad = 0;
  double total = 0;
  for (int64_t j = 0; j < V; ++j) {
    total += dev[j];
    const double ref = dev[j] > 0.0f ? e[size_t(j)] / kept_sum : 0.0;
    if (!(std::fabs(dev[j] - ref) <= 2e-6 * ref + 1e-37) && bad++ == 0)
      ADD_FAILURE() << "probs[" << j << "] = " << dev[j] << ", exp(s - max) / kept sum = " << ref;
    if (d_dev == d_cpu && !(std::fabs(dev[j] - cpu[j]) <= 1e-5f * cpu[j] + 1e-37f) && bad++ == 0)
      ADD_FAILURE() << "probs[" << j << "] = " << dev[j] << ", cpu " << cpu[j];
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_NEAR(total, 1.0, 1e-5);
}

}  // namespace

TEST(KernelsSoftmaxTopP, MatchesCpuAndExactReference) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (int64_t V : kVocabs) {
    const auto x = make_rows(V, uint32_t(V));
    Tensor hl = Tensor::cpu(DType::F32, {kRows, V}), hp = Tensor::cpu(DType::F32, {kRows, V});
    std::memcpy(hl.data, x.data(), hl.bytes());
    Tensor dl = upload(x, kRows, V), dp = tf::empty_tensor(Device::CUDA, DType::F32, {kRows, V});
    // Sanitizer shapes: every vocabulary, fewer temperature x top-p pairs.
    for (float T : tf::testing::grid<float>({0.5f, 1.0f, 2.0f}, {0.5f, 2.0f}))
      for (float top_p : tf::testing::grid<float>({0.1f, 0.5f, 0.9f, 0.99f, 1.0f}, {0.1f, 0.99f, 1.0f}))
        for (int64_t mk : {1, 100}) {
          const tf::ops::SoftmaxParams sp{T, top_p, mk};
          poison(dp);
          tf::ops::softmax_top_p(dl, dp, sp);
          const auto got = download(dp);
          tf::ops::softmax_top_p(hl, hp, sp);
          for (int64_t r = 0; r < kRows; ++r)
            check_row(x.data() + r * V, V, T, top_p, mk, got.data() + r * V, hp.ptr<float>() + r * V,
                      "V=" + std::to_string(V) + " T=" + std::to_string(T) + " top_p=" + std::to_string(top_p) +
                          " min_keep=" + std::to_string(mk) + " row " + std::to_string(r));
        }
  }
#endif
}

TEST(KernelsSoftmaxTopP, InPlaceAndRepeatableBitForBit) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (int64_t V : {int64_t(4097), int64_t(128256)}) {
    const auto x = make_rows(V, 99);
    const tf::ops::SoftmaxParams sp{0.8f, 0.9f, 1};
    Tensor dl = upload(x, kRows, V), dp = tf::empty_tensor(Device::CUDA, DType::F32, {kRows, V});
    poison(dp);
    tf::ops::softmax_top_p(dl, dp, sp);
    const auto first = download(dp);
    poison(dp);
    tf::ops::softmax_top_p(dl, dp, sp);
    const auto second = download(dp);
    tf::ops::softmax_top_p(dl, dl, sp);  // probs aliasing logits
    const auto in_place = download(dl);
    ASSERT_EQ(std::memcmp(first.data(), second.data(), first.size() * 4), 0) << "V=" << V << ": two runs differ";
    ASSERT_EQ(std::memcmp(first.data(), in_place.data(), first.size() * 4), 0) << "V=" << V << ": in place differs";
  }
#endif
}

TEST(KernelsSoftmaxTopP, RejectsBadParamsWithOneLine) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  Tensor dl = upload(std::vector<float>(8, 0.0f), 2, 4), dp = tf::empty_tensor(Device::CUDA, DType::F32, {2, 4});
  EXPECT_THROW(tf::ops::softmax_top_p(dl, dp, {0.0f, 0.9f, 1}), tf::Error);
  EXPECT_THROW(tf::ops::softmax_top_p(dl, dp, {1.0f, 0.0f, 1}), tf::Error);
  Tensor hp = Tensor::cpu(DType::F32, {2, 4});
  EXPECT_THROW(tf::ops::softmax_top_p(dl, hp, {1.0f, 0.9f, 1}), tf::Error);  // mixed devices
  tf::cuda::SoftmaxTopPParams p;
  p.logits = dl.ptr<float>(), p.probs = dp.ptr<float>(), p.n = 1, p.vocab = tf::cuda::kSoftmaxTopPMaxVocab + 1;
  EXPECT_THROW(tf::cuda::softmax_top_p(p), tf::Error);
#endif
}
