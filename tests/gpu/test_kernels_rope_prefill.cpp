// The prefill form of RoPE + K/V move (RopeQkvParams::vec8: 16-byte vectors,
// kernels/rope.cu), ctest label gpu. For the q/k/v rows of one stacked GEMM
// output (row-strided) and for three contiguous tensors, to a KV cache layer
// at shuffled slots and to contiguous rows: bit for bit the kernel every step
// runs (vec8 off), and against the CPU reference (ops::rope_apply on the same
// dtype-rounded inputs). Awkward shapes: 33..1000 tokens, GQA 9/3 at head_dim
// 64, 32/8 and 4/4 at 128, head_dim 48 (half not a multiple of 8: the
// fallback); one token's slot past the cache (nothing written: its rows stay
// poisoned) and one token's table row out of range (NaN in both kernels).
// Outputs are poisoned (NaN) before each launch. SKIPPED without a device.
#include <gtest/gtest.h>

#include "require_device.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

#ifdef TRIFORCE_HAVE_CUDA
#include "device_buffer.cuh"
#include "rope.cuh"
#endif

namespace {

using tf::DType;

#ifdef TRIFORCE_HAVE_CUDA
std::vector<float> randv(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

std::vector<uint16_t> bits(const tf::cuda::DeviceBuffer& b) {
  std::vector<uint16_t> h(b.bytes() / 2);
  b.download(h.data(), b.bytes());
  return h;
}

struct Shape {
  int64_t n, qh, kh, d;
};
#endif

}  // namespace

TEST(KernelsRopePrefill, Vec8MatchesStepKernelAndCpu) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const Shape shapes[] = {{33, 9, 3, 64}, {129, 32, 8, 128}, {1000, 4, 4, 128}, {77, 9, 3, 48}};
  for (DType dt : {DType::BF16, DType::F16})
    for (const Shape& sh : shapes)
      for (bool stacked : {false, true})
        for (bool to_cache : {false, true}) {
          const int64_t n = sh.n, QH = sh.qh, KH = sh.kh, D = sh.d, half = D / 2, table = n + 40, cap = n + 17;
          SCOPED_TRACE(testing::Message() << tf::dtype_name(dt) << " n=" << n << " heads " << QH << "/" << KH
                                          << " D=" << D << " stacked=" << stacked << " to_cache=" << to_cache);
          // tables: row i at angle i * inv_freq (as the host computes them)
          std::vector<float> cs(static_cast<size_t>(table * half)), sn(static_cast<size_t>(table * half));
          for (int64_t i = 0; i < table; ++i)
            for (int64_t j = 0; j < half; ++j) {
              const double a = double(i) * std::pow(10000.0, -2.0 * double(j) / double(D));
              cs[size_t(i * half + j)] = float(std::cos(a)), sn[size_t(i * half + j)] = float(std::sin(a));
            }
          std::mt19937 g{uint32_t(n + D)};
          std::vector<int32_t> rows(static_cast<size_t>(n)), slots(static_cast<size_t>(n));
          for (auto& r : rows) r = int32_t(g() % table);
          std::vector<int32_t> perm(static_cast<size_t>(cap));
          for (int64_t i = 0; i < cap; ++i) perm[size_t(i)] = int32_t(i);
          std::shuffle(perm.begin(), perm.end(), g);
          for (int64_t i = 0; i < n; ++i) slots[size_t(i)] = perm[size_t(i)];
          const int64_t bad_slot = n / 2, bad_row = n / 3;
          slots[size_t(bad_slot)] = int32_t(cap + 5);
          rows[size_t(bad_row)] = -1;
          // inputs: one [n, (QH + 2KH) D] buffer, q | k | v columns (stacked) or three blocks
          const int64_t W = (QH + 2 * KH) * D;
          std::vector<float> in = randv(size_t(n * W), uint32_t(7 + n));
          tf::cuda::round_to(in, dt);
          tf::cuda::DeviceBuffer dcos(cs.size() * 4), dsin(sn.size() * 4), drows(size_t(n) * 4), dslots(size_t(n) * 4);
          dcos.upload(cs.data(), cs.size() * 4), dsin.upload(sn.data(), sn.size() * 4);
          drows.upload(rows.data(), rows.size() * 4), dslots.upload(slots.data(), slots.size() * 4);
          auto at = [&](int64_t t, int64_t col) -> size_t {  // element of token t, column col of q|k|v
            if (stacked) return size_t(t * W + col);
            const int64_t qw = QH * D, kw = KH * D;
            if (col < qw) return size_t(t * qw + col);
            if (col < qw + kw) return size_t(n * qw + t * kw + col - qw);
            return size_t(n * (qw + kw) + t * kw + col - qw - kw);
          };
          std::vector<float> host_in(in.size());  // the same values, in the layout `at` reads
          for (int64_t t = 0; t < n; ++t)
            for (int64_t c = 0; c < W; ++c) host_in[at(t, c)] = in[size_t(t * W + c)];
          host_in.swap(in);
          auto din = tf::cuda::upload_as(in, dt);
          const uint16_t* base = din.as<uint16_t>();
          const int64_t out_rows = to_cache ? cap : n;
          tf::cuda::DeviceBuffer q_out[2] = {tf::cuda::DeviceBuffer(size_t(n * QH * D) * 2),
                                             tf::cuda::DeviceBuffer(size_t(n * QH * D) * 2)};
          tf::cuda::DeviceBuffer k_out[2] = {tf::cuda::DeviceBuffer(size_t(out_rows * KH * D) * 2),
                                             tf::cuda::DeviceBuffer(size_t(out_rows * KH * D) * 2)};
          tf::cuda::DeviceBuffer v_out[2] = {tf::cuda::DeviceBuffer(size_t(out_rows * KH * D) * 2),
                                             tf::cuda::DeviceBuffer(size_t(out_rows * KH * D) * 2)};
          for (int vec = 0; vec < 2; ++vec) {
            q_out[vec].poison(), k_out[vec].poison(), v_out[vec].poison();
            tf::cuda::RopeQkvParams p;
            p.q = base + at(0, 0), p.k = base + at(0, QH * D), p.v = base + at(0, (QH + KH) * D);
            p.q_ld = stacked ? W : QH * D, p.k_ld = p.v_ld = stacked ? W : KH * D;
            p.q_out = q_out[vec].get(), p.k_out = k_out[vec].get(), p.v_out = v_out[vec].get();
            if (to_cache) {  // [KH, cap, D] at slots
              p.out_head_stride = cap * D, p.out_slot_stride = D, p.slots = dslots.as<int32_t>(), p.slot_limit = cap;
            } else {  // [n, KH, D]
              p.out_head_stride = D, p.out_slot_stride = KH * D, p.slot_limit = n;
            }
            p.cos = dcos.as<float>(), p.sin = dsin.as<float>(), p.rows = drows.as<int32_t>(), p.table_rows = table;
            p.n = n, p.q_heads = QH, p.kv_heads = KH, p.head_dim = D, p.dtype = dt, p.vec8 = vec == 1;
            tf::cuda::rope_qkv(p);
          }
          CUDA_CHECK(cudaDeviceSynchronize());
          EXPECT_EQ(bits(q_out[1]), bits(q_out[0])) << "q differs from the step kernel";
          EXPECT_EQ(bits(k_out[1]), bits(k_out[0])) << "k differs from the step kernel";
          EXPECT_EQ(bits(v_out[1]), bits(v_out[0])) << "v differs from the step kernel";
          // CPU reference: rope_apply on [n, heads, D] with each token's table row
          tf::Tensor c = tf::Tensor::cpu(DType::F32, {n, half}), s = tf::Tensor::cpu(DType::F32, {n, half});
          for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < half; ++j) {
              const int32_t r = std::max(rows[size_t(t)], 0);
              c.ptr<float>()[t * half + j] = cs[size_t(r * half + j)], s.ptr<float>()[t * half + j] = sn[size_t(r * half + j)];
            }
          tf::Tensor tq = tf::Tensor::cpu(DType::F32, {n, QH, D}), tk = tf::Tensor::cpu(DType::F32, {n, KH, D});
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t e = 0; e < QH * D; ++e) tq.ptr<float>()[t * QH * D + e] = in[at(t, e)];
            for (int64_t e = 0; e < KH * D; ++e) tk.ptr<float>()[t * KH * D + e] = in[at(t, QH * D + e)];
          }
          tf::ops::rope_apply(tq, c, s);
          tf::ops::rope_apply(tk, c, s);
          const std::vector<float> gq = tf::cuda::download_as(q_out[1], size_t(n * QH * D), dt);
          const std::vector<float> gk = tf::cuda::download_as(k_out[1], size_t(out_rows * KH * D), dt);
          const std::vector<float> gv = tf::cuda::download_as(v_out[1], size_t(out_rows * KH * D), dt);
          const float rtol = dt == DType::BF16 ? 1.6e-2f : 2e-3f, atol = (dt == DType::BF16 ? 1e-2f : 1.5e-3f) * 3;
          size_t bad = 0;
          auto close = [&](float got, float want) {
            return std::isfinite(got) && std::fabs(got - want) <= atol + rtol * std::fabs(want);
          };
          std::vector<bool> written(size_t(out_rows), false);
          for (int64_t t = 0; t < n; ++t) {
            const int64_t slot = to_cache ? slots[size_t(t)] : t;
            const bool slot_ok = slot >= 0 && slot < out_rows;
            if (slot_ok) written[size_t(slot)] = true;
            for (int64_t h = 0; h < QH; ++h)
              for (int64_t e = 0; e < D; ++e) {
                const float got = gq[size_t((t * QH + h) * D + e)];
                if (t == bad_row) bad += !std::isnan(got);
                else bad += !close(got, tq.ptr<float>()[(t * QH + h) * D + e]);
              }
            if (!slot_ok) continue;
            for (int64_t h = 0; h < KH; ++h)
              for (int64_t e = 0; e < D; ++e) {
                const size_t o = size_t(to_cache ? (h * cap + slot) * D + e : (slot * KH + h) * D + e);
                if (t == bad_row) bad += !std::isnan(gk[o]);
                else bad += !close(gk[o], tk.ptr<float>()[(t * KH + h) * D + e]);
                bad += gv[o] != in[at(t, (QH + KH) * D + h * D + e)];  // v moves unchanged
              }
          }
          EXPECT_EQ(bad, 0u) << bad << " elements off the CPU reference";
          size_t touched = 0;  // slots no token owns (and the one past the cache) stay poisoned
          for (int64_t r = 0; r < out_rows; ++r)
            if (!written[size_t(r)])
              for (int64_t h = 0; h < KH; ++h)
                for (int64_t e = 0; e < D; ++e) {
                  const size_t o = size_t(to_cache ? (h * cap + r) * D + e : (r * KH + h) * D + e);
                  touched += !std::isnan(gk[o]) || !std::isnan(gv[o]);
                }
          EXPECT_EQ(touched, 0u) << "wrote rows no token owns";
        }
#endif
}
