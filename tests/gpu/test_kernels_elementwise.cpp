// GPU kernels (ctest label gpu) against the CPU reference ops on the same
// inputs: rmsnorm (+ fused residual), rope, silu_mul, embedding, kv_append.
// Inputs are rounded to the storage dtype on the host first, so the CPU
// reference (f32) and the kernel see identical values; outputs are poisoned
// with NaN before each launch. SKIPPED without CUDA or without a device.
#include <gtest/gtest.h>

#include "require_device.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

#ifdef TRIFORCE_HAVE_CUDA
#include "activation.cuh"
#include "device_buffer.cuh"
#include "embedding.cuh"
#include "kv_append.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#endif

namespace {


using tf::DType;

std::vector<float> randv(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

tf::Tensor host(DType dt, std::vector<int64_t> shape, const void* src) {
  tf::Tensor t = tf::Tensor::cpu(dt, std::move(shape));
  std::memcpy(t.data, src, t.bytes());
  return t;
}

// |got - ref| <= atol + rtol * |ref|, no NaN; reports the first failure.
void expect_close(const std::vector<float>& got, const float* ref, size_t n, DType dt, const char* what,
                  float scale = 1.0f) {
  const float rtol = dt == DType::BF16 ? 1.6e-2f : 2e-3f;
  const float atol = (dt == DType::BF16 ? 1e-2f : 1.5e-3f) * scale;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool ok = std::isfinite(got[i]) && std::fabs(got[i] - ref[i]) <= atol + rtol * std::fabs(ref[i]);
    if (!ok && bad++ == 0)
      ADD_FAILURE() << what << " [" << tf::dtype_name(dt) << "]: element " << i << " got " << got[i] << " want "
                    << ref[i];
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements off";
}

const DType kDtypes[] = {DType::F16, DType::BF16};
const int64_t kRows[] = {1, 3, 127, 129, 4097};

}  // namespace

TEST(KernelsElementwise, AddRmsNorm) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t d : {64, 128, 4096})
      for (int64_t n : kRows) {
        if (d == 4096 && n > 129) continue;
        for (bool fused : {false, true}) {
          SCOPED_TRACE(testing::Message() << "n=" << n << " d=" << d << " fused=" << fused);
          auto x = randv(n * d, 1 + n + d, -2, 2), res = randv(n * d, 7 + n, -2, 2), w = randv(d, 3, 0.5f, 1.5f);
          tf::cuda::round_to(x, dt), tf::cuda::round_to(res, dt), tf::cuda::round_to(w, dt);
          auto dx = tf::cuda::upload_as(x, dt), dr = tf::cuda::upload_as(res, dt), dw = tf::cuda::upload_as(w, dt);
          tf::cuda::DeviceBuffer dout(n * d * 2);
          dout.poison();
          tf::cuda::RmsNormParams p;
          p.residual = fused ? dr.get() : nullptr;
          p.x = dx.get(), p.weight = dw.get(), p.out = dout.get(), p.n = n, p.d = d, p.eps = 1e-5f, p.dtype = dt;
          tf::cuda::rmsnorm(p);
          CUDA_CHECK(cudaDeviceSynchronize());
          tf::Tensor tx = host(DType::F32, {n, d}, x.data()), tw = host(DType::F32, {d}, w.data());
          tf::Tensor tr = host(DType::F32, {n, d}, res.data()), to = tf::Tensor::cpu(DType::F32, {n, d});
          if (fused) tf::ops::add_rmsnorm(tr, tx, tw, to, {1e-5f});
          else tf::ops::rmsnorm(tx, tw, to, {1e-5f});
          expect_close(tf::cuda::download_as(dout, n * d, dt), to.ptr<float>(), n * d, dt, "rmsnorm out");
          if (fused)
            expect_close(tf::cuda::download_as(dr, n * d, dt), tr.ptr<float>(), n * d, dt, "rmsnorm residual");
        }
      }
#endif
}

TEST(KernelsElementwise, Rope) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t D : {64, 128})
      for (int64_t n : kRows) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " D=" << D);
        const int64_t half = D / 2, QH = 8, KH = 2, rows = 70000;
        std::vector<float> inv(half);
        for (int64_t i = 0; i < half; ++i) inv[i] = std::pow(500000.0f, -float(2 * i) / float(D));
        std::vector<int32_t> all(rows);
        for (int64_t i = 0; i < rows; ++i) all[i] = int32_t(i);
        tf::Tensor tinv = host(DType::F32, {half}, inv.data()), tall = host(DType::I32, {rows}, all.data());
        tf::Tensor tcos = tf::Tensor::cpu(DType::F32, {rows, half}), tsin = tf::Tensor::cpu(DType::F32, {rows, half});
        tf::ops::rope_cos_sin(tinv, tall, tcos, tsin, {1.0f});
        std::mt19937 g{uint32_t(n)};
        std::vector<int32_t> pos(n);
        for (auto& p : pos) p = int32_t(g() % rows);
        auto q = randv(n * QH * D, 11 + n, -3, 3), k = randv(n * KH * D, 13 + n, -3, 3);
        tf::cuda::round_to(q, dt), tf::cuda::round_to(k, dt);
        auto dq = tf::cuda::upload_as(q, dt), dk = tf::cuda::upload_as(k, dt);
        tf::cuda::DeviceBuffer dcos(tcos.bytes()), dsin(tsin.bytes()), dpos(n * 4);
        dcos.upload(tcos.data, tcos.bytes()), dsin.upload(tsin.data, tsin.bytes()), dpos.upload(pos.data(), n * 4);
        tf::cuda::RopeParams p;
        p.q = dq.get(), p.k = dk.get(), p.cos = dcos.as<float>(), p.sin = dsin.as<float>();
        p.positions = dpos.as<int32_t>(), p.n = n, p.q_heads = QH, p.k_heads = KH, p.head_dim = D;
        p.table_rows = rows, p.dtype = dt;
        tf::cuda::rope(p);
        CUDA_CHECK(cudaDeviceSynchronize());
        tf::Tensor c = tf::Tensor::cpu(DType::F32, {n, half}), s = tf::Tensor::cpu(DType::F32, {n, half});
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < half; ++j) {
            c.ptr<float>()[i * half + j] = tcos.ptr<float>()[pos[i] * half + j];
            s.ptr<float>()[i * half + j] = tsin.ptr<float>()[pos[i] * half + j];
          }
        tf::Tensor tq = host(DType::F32, {n, QH, D}, q.data()), tk = host(DType::F32, {n, KH, D}, k.data());
        tf::ops::rope_apply(tq, c, s);
        tf::ops::rope_apply(tk, c, s);
        expect_close(tf::cuda::download_as(dq, q.size(), dt), tq.ptr<float>(), q.size(), dt, "rope q", 3.0f);
        expect_close(tf::cuda::download_as(dk, k.size(), dt), tk.ptr<float>(), k.size(), dt, "rope k", 3.0f);
      }
#endif
}

TEST(KernelsElementwise, SiluMul) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t n : kRows) {
      const int64_t d = 1408;
      SCOPED_TRACE(testing::Message() << "n=" << n);
      auto g = randv(n * d, 5 + n, -6, 6), u = randv(n * d, 9 + n, -2, 2);
      tf::cuda::round_to(g, dt), tf::cuda::round_to(u, dt);
      auto dg = tf::cuda::upload_as(g, dt), du = tf::cuda::upload_as(u, dt);
      tf::cuda::DeviceBuffer dout(n * d * 2);
      dout.poison();
      tf::cuda::silu_mul({dg.get(), du.get(), dout.get(), n * d, dt});
      CUDA_CHECK(cudaDeviceSynchronize());
      tf::Tensor tg = host(DType::F32, {n, d}, g.data()), tu = host(DType::F32, {n, d}, u.data());
      tf::Tensor to = tf::Tensor::cpu(DType::F32, {n, d});
      tf::ops::silu_mul(tg, tu, to);
      expect_close(tf::cuda::download_as(dout, n * d, dt), to.ptr<float>(), n * d, dt, "silu_mul");
    }
#endif
}

// The prefill form (SiluMulParams::vec8: 16-byte vectors, a grid row per
// token), flat and on the halves of a stacked gate/up output: against the CPU
// reference, bit for bit the scalar kernel (decode's), and nothing written
// past the rows (the buffer's poisoned tail stays NaN). Row lengths that are
// not a multiple of 8 fall back to the scalar kernel and must still be right.
TEST(KernelsElementwise, SiluMulVec8Prefill) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const int64_t shapes[][2] = {{33, 8}, {129, 1408}, {257, 11008}, {40, 1410}, {1000, 264}};
  for (DType dt : kDtypes)
    for (auto [n, d] : shapes)
      for (bool halves : {false, true}) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " d=" << d << " halves=" << halves);
        const int64_t ld = halves ? 2 * d : d;
        auto gu = randv(n * ld, 11 + n + d, -6, 6), u = randv(n * d, 13 + n, -2, 2);
        tf::cuda::round_to(gu, dt), tf::cuda::round_to(u, dt);
        std::vector<float> g(size_t(n * d)), uu(size_t(n * d));
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < d; ++j) {
            g[size_t(i * d + j)] = gu[size_t(i * ld + j)];
            uu[size_t(i * d + j)] = halves ? gu[size_t(i * ld + d + j)] : u[size_t(i * d + j)];
          }
        auto dgu = tf::cuda::upload_as(gu, dt), du = tf::cuda::upload_as(u, dt);
        const int64_t tail = 64;
        tf::cuda::DeviceBuffer vec(size_t(n * d + tail) * 2), scalar(size_t(n * d) * 2);
        tf::cuda::SiluMulParams p;
        p.gate = dgu.get(), p.up = halves ? static_cast<const void*>(dgu.as<uint16_t>() + d) : du.get();
        p.count = n * d, p.dtype = dt, p.cols = d, p.ld = ld;
        vec.poison(), scalar.poison();
        p.out = vec.get(), p.vec8 = true;
        tf::cuda::silu_mul(p);
        p.out = scalar.get(), p.vec8 = false;
        tf::cuda::silu_mul(p);
        CUDA_CHECK(cudaDeviceSynchronize());
        tf::Tensor tg = host(DType::F32, {n, d}, g.data()), tu = host(DType::F32, {n, d}, uu.data());
        tf::Tensor to = tf::Tensor::cpu(DType::F32, {n, d});
        tf::ops::silu_mul(tg, tu, to);
        const std::vector<float> got = tf::cuda::download_as(vec, size_t(n * d + tail), dt);
        expect_close(got, to.ptr<float>(), size_t(n * d), dt, "silu_mul vec8");
        for (int64_t i = n * d; i < n * d + tail; ++i) ASSERT_TRUE(std::isnan(got[size_t(i)])) << "wrote past the rows at " << i;
        std::vector<uint16_t> bv(size_t(n * d)), bs(size_t(n * d));
        vec.download(bv.data(), bv.size() * 2), scalar.download(bs.data(), bs.size() * 2);
        EXPECT_EQ(bv, bs) << "vec8 and scalar differ";
      }
#endif
}

TEST(KernelsElementwise, Embedding) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t n : kRows) {
      const int64_t V = 1000, d = 576;
      auto table = randv(V * d, 17, -1, 1);
      tf::cuda::round_to(table, dt);
      std::mt19937 g{uint32_t(n)};
      std::vector<int32_t> tok(n);
      for (auto& t : tok) t = int32_t(g() % V);
      auto dtab = tf::cuda::upload_as(table, dt);
      tf::cuda::DeviceBuffer dtok(n * 4), dout(n * d * 2);
      dtok.upload(tok.data(), n * 4);
      dout.poison();
      tf::cuda::embedding({dtab.get(), dtok.as<int32_t>(), dout.get(), n, V, d, dt});
      CUDA_CHECK(cudaDeviceSynchronize());
      tf::Tensor tt = host(DType::F32, {V, d}, table.data()), ti = host(DType::I32, {n}, tok.data());
      tf::Tensor to = tf::Tensor::cpu(DType::F32, {n, d});
      tf::ops::embedding(tt, ti, to);
      auto got = tf::cuda::download_as(dout, n * d, dt);
      size_t bad = 0;
      for (int64_t i = 0; i < n * d; ++i) bad += !(got[i] == to.ptr<float>()[i]);
      EXPECT_EQ(bad, 0u) << "embedding n=" << n << " " << tf::dtype_name(dt);
    }
#endif
}

TEST(KernelsElementwise, KvAppend) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t D : {64, 128})
      for (int64_t n : {1, 3, 32, 127, 129}) {
        const int64_t KH = 4, cap = 4097 + 200;
        for (int32_t L0 : {0, 1, 127, 4097}) {
          SCOPED_TRACE(testing::Message() << "n=" << n << " D=" << D << " L0=" << L0);
          auto kc = randv(KH * cap * D, 21, -1, 1), vc = randv(KH * cap * D, 22, -1, 1);
          auto kn = randv(n * KH * D, 23 + n, -1, 1), vn = randv(n * KH * D, 24 + n, -1, 1);
          auto hkc = tf::cuda::to_half(kc, dt), hvc = tf::cuda::to_half(vc, dt);
          auto hkn = tf::cuda::to_half(kn, dt), hvn = tf::cuda::to_half(vn, dt);
          tf::cuda::DeviceBuffer dkc(hkc.size() * 2), dvc(hvc.size() * 2), dkn(hkn.size() * 2),
              dvn(hvn.size() * 2), dlen(4);
          dkc.upload(hkc.data(), dkc.bytes()), dvc.upload(hvc.data(), dvc.bytes());
          dkn.upload(hkn.data(), dkn.bytes()), dvn.upload(hvn.data(), dvn.bytes());
          dlen.upload(&L0, 4);
          tf::cuda::KvAppendParams p;
          p.k_cache = dkc.get(), p.v_cache = dvc.get(), p.k_new = dkn.get(), p.v_new = dvn.get();
          p.length = dlen.as<int32_t>(), p.n = n, p.kv_heads = KH, p.head_dim = D, p.capacity = cap, p.dtype = dt;
          tf::cuda::kv_append(p);
          CUDA_CHECK(cudaDeviceSynchronize());
          int32_t L1 = -1;
          dlen.download(&L1, 4);
          EXPECT_EQ(L1, L0 + n);
          std::vector<uint16_t> gk(hkc.size()), gv(hvc.size());
          dkc.download(gk.data(), dkc.bytes()), dvc.download(gv.data(), dvc.bytes());
          size_t bad = 0;
          for (int64_t h = 0; h < KH; ++h)
            for (int64_t s = 0; s < cap; ++s)
              for (int64_t j = 0; j < D; ++j) {
                const int64_t c = (h * cap + s) * D + j;
                const bool fresh = s >= L0 && s < L0 + n;
                const int64_t src = ((s - L0) * KH + h) * D + j;
                bad += gk[c] != (fresh ? hkn[src] : hkc[c]);
                bad += gv[c] != (fresh ? hvn[src] : hvc[c]);
              }
          EXPECT_EQ(bad, 0u);
        }
      }
#endif
}
