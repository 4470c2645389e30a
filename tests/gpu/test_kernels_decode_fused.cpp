// The decode step's fused and vectorized kernels (ctest label gpu): each
// against the CPU reference over awkward shapes, and bit for bit against the
// unfused kernels it replaces in LlamaModel::run_chunk, with outputs poisoned
// with NaN before every launch:
//   rmsnorm (16-byte rows, any row count: row i of an n-row call == the 1-row call),
//   add_rmsnorm with round_residual == add_inplace then rmsnorm,
//   silu_mul on stacked [gate | up] rows == silu_mul on the halves,
//   qkv_rope_kv == rope on q and k then kv_write at device slots,
//   embedding (16-byte rows),
//   the stacked q/k/v and gate/up skinny GEMM == the separate GEMMs, row for row.
// Launches go on the created compute stream, so with TRIFORCE_PDL unset they
// are programmatic dependent launches (as in the model) and with =0 plain ones.
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
#include "elementwise.cuh"
#include "embedding.cuh"
#include "gemm_skinny.cuh"
#include "qkv_rope_kv.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "stream.cuh"
#endif

namespace {

#ifdef TRIFORCE_HAVE_CUDA
using tf::DType;
using namespace tf::cuda;

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

std::vector<uint16_t> raw(const DeviceBuffer& b, size_t count) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> h(count);
  b.download(h.data(), count * 2);
  return h;
}

void stream_sync() { CUDA_CHECK(cudaStreamSynchronize(compute_stream())); }

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
const int64_t kRows[] = {1, 3, 7, 32};
#endif

}  // namespace

// Vector path (d % 8 == 0: 8, 4096, 11008, 16384 with 2 vectors a thread) and
// the scalar path (129): against the CPU, and each row of an n-row call
// bit-identical to that row normalized alone.
TEST(KernelsDecodeFused, RmsNormRowsAndBatchInvariance) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t d : {8, 129, 4096, 11008, 16384})
      for (int64_t n : kRows)
        for (int mode = 0; mode < 3; ++mode) {  // plain, add (fp32 sum), add (rounded residual)
          SCOPED_TRACE(testing::Message() << tf::dtype_name(dt) << " n=" << n << " d=" << d << " mode=" << mode);
          auto x = randv(n * d, 1 + n + d, -2, 2), res = randv(n * d, 7 + n, -2, 2), w = randv(d, 3, 0.5f, 1.5f);
          round_to(x, dt), round_to(res, dt), round_to(w, dt);
          auto dx = upload_as(x, dt), dw = upload_as(w, dt);
          auto run = [&](int64_t row0, int64_t rows, std::vector<uint16_t>& out, std::vector<uint16_t>& resid) {
            std::vector<float> r(res.begin() + row0 * d, res.begin() + (row0 + rows) * d);
            auto dr = upload_as(r, dt);
            DeviceBuffer dout(size_t(rows * d) * 2);
            dout.poison();
            RmsNormParams p;
            p.residual = mode ? dr.get() : nullptr;
            p.x = static_cast<const uint16_t*>(dx.get()) + row0 * d, p.weight = dw.get(), p.out = dout.get();
            p.n = rows, p.d = d, p.eps = 1e-5f, p.dtype = dt, p.round_residual = mode == 2;
            rmsnorm(p, compute_stream());
            stream_sync();
            out = raw(dout, size_t(rows * d));
            resid = raw(dr, size_t(rows * d));
          };
          std::vector<uint16_t> all, all_res;
          run(0, n, all, all_res);
          tf::Tensor tx = host(DType::F32, {n, d}, x.data()), tw = host(DType::F32, {d}, w.data());
          tf::Tensor tr = host(DType::F32, {n, d}, res.data()), to = tf::Tensor::cpu(DType::F32, {n, d});
          if (mode) tf::ops::add_rmsnorm(tr, tx, tw, to, {1e-5f});
          else tf::ops::rmsnorm(tx, tw, to, {1e-5f});
          expect_close(from_half(all, dt), to.ptr<float>(), size_t(n * d), dt, "rmsnorm out");
          if (mode) expect_close(from_half(all_res, dt), tr.ptr<float>(), size_t(n * d), dt, "rmsnorm residual");
          for (int64_t i : {int64_t(0), n / 2, n - 1}) {
            std::vector<uint16_t> one, one_res;
            run(i, 1, one, one_res);
            ASSERT_TRUE(std::equal(one.begin(), one.end(), all.begin() + i * d)) << "row " << i;
          }
        }
#endif
}

// The layer-boundary fusion: add_rmsnorm(round_residual) == add_inplace + rmsnorm, bit for bit.
TEST(KernelsDecodeFused, AddRmsNormRoundedEqualsAddThenNorm) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t d : {64, 129, 4096, 8192})
      for (int64_t n : kRows) {
        SCOPED_TRACE(testing::Message() << tf::dtype_name(dt) << " n=" << n << " d=" << d);
        auto x = randv(n * d, 5 + n + d, -4, 4), res = randv(n * d, 9 + n, -4, 4), w = randv(d, 4, 0.5f, 1.5f);
        round_to(x, dt), round_to(res, dt), round_to(w, dt);
        auto dx = upload_as(x, dt), dw = upload_as(w, dt), dr1 = upload_as(res, dt), dr2 = upload_as(res, dt);
        DeviceBuffer o1(size_t(n * d) * 2), o2(size_t(n * d) * 2);
        o1.poison(), o2.poison();
        RmsNormParams p;
        p.residual = dr1.get(), p.x = dx.get(), p.weight = dw.get(), p.out = o1.get();
        p.n = n, p.d = d, p.eps = 1e-5f, p.dtype = dt, p.round_residual = true;
        rmsnorm(p, compute_stream());
        AddParams a;
        a.residual = dr2.get(), a.x = dx.get(), a.count = n * d, a.dtype = dt;
        add_inplace(a, compute_stream());
        RmsNormParams q;
        q.x = dr2.get(), q.weight = dw.get(), q.out = o2.get(), q.n = n, q.d = d, q.eps = 1e-5f, q.dtype = dt;
        rmsnorm(q, compute_stream());
        stream_sync();
        const auto r1 = raw(dr1, size_t(n * d)), r2 = raw(dr2, size_t(n * d));
        const auto y1 = raw(o1, size_t(n * d)), y2 = raw(o2, size_t(n * d));
        ASSERT_EQ(r1, r2) << "residual";
        ASSERT_EQ(y1, y2) << "normalized";
        for (float v : from_half(y1, dt)) ASSERT_TRUE(std::isfinite(v));
      }
#endif
}

TEST(KernelsDecodeFused, SiluMulHalvesEqualsSiluMul) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t c : {1, 129, 4096, 11008})
      for (int64_t n : kRows) {
        SCOPED_TRACE(testing::Message() << tf::dtype_name(dt) << " n=" << n << " cols=" << c);
        auto gu = randv(n * 2 * c, 21 + n + c, -6, 6);
        round_to(gu, dt);
        std::vector<float> g(n * c), u(n * c);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < c; ++j) g[i * c + j] = gu[i * 2 * c + j], u[i * c + j] = gu[i * 2 * c + c + j];
        auto dgu = upload_as(gu, dt), dg = upload_as(g, dt), du = upload_as(u, dt);
        DeviceBuffer o1(size_t(n * c) * 2), o2(size_t(n * c) * 2);
        o1.poison(), o2.poison();
        SiluMulParams a;
        a.gate = dgu.get(), a.out = o1.get(), a.count = n * c, a.halves = c, a.dtype = dt;
        silu_mul(a, compute_stream());
        SiluMulParams b;
        b.gate = dg.get(), b.up = du.get(), b.out = o2.get(), b.count = n * c, b.dtype = dt;
        silu_mul(b, compute_stream());
        stream_sync();
        const auto y1 = raw(o1, size_t(n * c));
        ASSERT_EQ(y1, raw(o2, size_t(n * c)));
        tf::Tensor tg = host(DType::F32, {n, c}, g.data()), tu = host(DType::F32, {n, c}, u.data());
        tf::Tensor to = tf::Tensor::cpu(DType::F32, {n, c});
        tf::ops::silu_mul(tg, tu, to);
        expect_close(from_half(y1, dt), to.ptr<float>(), size_t(n * c), dt, "silu_mul_halves", 6.0f);
        // the op on stacked CPU rows is the same reference
        tf::Tensor tgu = host(DType::F32, {n, 2 * c}, gu.data()), th = tf::Tensor::cpu(DType::F32, {n, c});
        tf::ops::silu_mul_halves(tgu, th);
        ASSERT_EQ(0, std::memcmp(th.data, to.data, to.bytes()));
      }
#endif
}

// One kernel for q/k RoPE + the K/V cache write, from the stacked q/k/v rows,
// against rope + kv_write on the split q, k, v (bits) and the CPU (tolerance).
// Slots are scattered, one is out of range (dropped by both), table rows
// include one out of range (NaN rows in both).
TEST(KernelsDecodeFused, QkvRopeKvEqualsRopeThenWrite) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t D : {64, 128})
      for (auto [QH, KH] : {std::pair<int64_t, int64_t>{32, 32}, {12, 3}, {4, 1}})
        for (int64_t n : kRows) {
          SCOPED_TRACE(testing::Message() << tf::dtype_name(dt) << " D=" << D << " H=" << QH << "/" << KH
                                          << " n=" << n);
          const int64_t half = D / 2, cap = 129, W = (QH + 2 * KH) * D;
          auto qkv = randv(n * W, 31 + n + D, -3, 3);
          round_to(qkv, dt);
          auto cs = randv(n * half, 41 + n, -1, 1), sn = randv(n * half, 43 + n, -1, 1);
          std::vector<int32_t> rows(n), slots(n);
          for (int64_t i = 0; i < n; ++i) rows[i] = int32_t(n - 1 - i), slots[i] = int32_t((i * 37 + 5) % cap);
          if (n > 2) slots[1] = int32_t(cap);  // dropped
          auto cache0 = randv(KH * cap * D, 51, -1, 1);
          round_to(cache0, dt);
          DeviceBuffer dcos(cs.size() * 4), dsin(sn.size() * 4), drows(n * 4), dslots(n * 4);
          dcos.upload(cs.data(), cs.size() * 4), dsin.upload(sn.data(), sn.size() * 4);
          drows.upload(rows.data(), n * 4), dslots.upload(slots.data(), n * 4);
          // fused
          auto dqkv = upload_as(qkv, dt), k1 = upload_as(cache0, dt), v1 = upload_as(cache0, dt);
          DeviceBuffer q1(size_t(n * QH * D) * 2);
          q1.poison();
          QkvRopeKvParams f;
          f.qkv = dqkv.get(), f.q_out = q1.get(), f.k_cache = k1.get(), f.v_cache = v1.get();
          f.cos = dcos.as<float>(), f.sin = dsin.as<float>(), f.rows = drows.as<int32_t>(), f.slots = dslots.as<int32_t>();
          f.n = n, f.q_heads = QH, f.kv_heads = KH, f.head_dim = D, f.capacity = cap, f.table_rows = n, f.dtype = dt;
          qkv_rope_kv(f, compute_stream());
          // unfused: split on the host, rope in place, kv_write
          std::vector<float> q(n * QH * D), k(n * KH * D), v(n * KH * D);
          for (int64_t i = 0; i < n; ++i) {
            std::copy_n(qkv.begin() + i * W, QH * D, q.begin() + i * QH * D);
            std::copy_n(qkv.begin() + i * W + QH * D, KH * D, k.begin() + i * KH * D);
            std::copy_n(qkv.begin() + i * W + (QH + KH) * D, KH * D, v.begin() + i * KH * D);
          }
          auto q2 = upload_as(q, dt), kn = upload_as(k, dt), vn = upload_as(v, dt);
          auto k2 = upload_as(cache0, dt), v2 = upload_as(cache0, dt);
          RopeParams r;
          r.q = q2.get(), r.k = kn.get(), r.cos = dcos.as<float>(), r.sin = dsin.as<float>();
          r.positions = drows.as<int32_t>(), r.n = n, r.q_heads = QH, r.k_heads = KH, r.head_dim = D;
          r.table_rows = n, r.dtype = dt;
          rope(r, compute_stream());
          KvWriteParams w;
          w.k_cache = k2.get(), w.v_cache = v2.get(), w.k_new = kn.get(), w.v_new = vn.get(), w.slots = dslots.as<int32_t>();
          w.n = n, w.kv_heads = KH, w.head_dim = D, w.capacity = cap, w.dtype = dt;
          kv_write(w, compute_stream());
          stream_sync();
          const auto fq = raw(q1, q.size());
          ASSERT_EQ(fq, raw(q2, q.size())) << "q";
          ASSERT_EQ(raw(k1, cache0.size()), raw(k2, cache0.size())) << "k cache";
          ASSERT_EQ(raw(v1, cache0.size()), raw(v2, cache0.size())) << "v cache";
          // CPU reference for q
          std::vector<float> c(n * half), s(n * half);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < half; ++j) c[i * half + j] = cs[rows[i] * half + j], s[i * half + j] = sn[rows[i] * half + j];
          tf::Tensor tq = host(DType::F32, {n, QH, D}, q.data());
          tf::Tensor tc = host(DType::F32, {n, half}, c.data()), ts = host(DType::F32, {n, half}, s.data());
          tf::ops::rope_apply(tq, tc, ts);
          expect_close(from_half(fq, dt), tq.ptr<float>(), q.size(), dt, "qkv_rope_kv q", 3.0f);
          // an out-of-range table row gives NaN q rows, in both kernels alike
          if (n == 3) {
            std::vector<int32_t> bad = rows;
            bad[2] = int32_t(n);
            drows.upload(bad.data(), n * 4);
            q1.poison();
            qkv_rope_kv(f, compute_stream());
            stream_sync();
            const auto nq = from_half(raw(q1, q.size()), dt);
            EXPECT_TRUE(std::isnan(nq[2 * QH * D])) << "row with table row out of range";
            EXPECT_TRUE(std::isfinite(nq[0]));
          }
        }
#endif
}

TEST(KernelsDecodeFused, EmbeddingRows) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : kDtypes)
    for (int64_t d : {8, 129, 4096})
      for (int64_t n : kRows) {
        SCOPED_TRACE(testing::Message() << tf::dtype_name(dt) << " n=" << n << " d=" << d);
        const int64_t vocab = 1000;
        auto table = randv(vocab * d, 61 + d, -1, 1);
        round_to(table, dt);
        std::vector<int32_t> tok(n);
        for (int64_t i = 0; i < n; ++i) tok[i] = int32_t((i * 389 + 17) % vocab);
        if (n == 7) tok[3] = int32_t(vocab);  // out of range: a NaN row
        auto dtab = upload_as(table, dt);
        DeviceBuffer dtok(n * 4), dout(size_t(n * d) * 2);
        dtok.upload(tok.data(), n * 4);
        dout.poison();
        EmbeddingParams p;
        p.table = dtab.get(), p.tokens = dtok.as<int32_t>(), p.out = dout.get(), p.n = n, p.vocab = vocab, p.d = d;
        p.dtype = dt;
        embedding(p, compute_stream());
        stream_sync();
        const auto out = from_half(raw(dout, size_t(n * d)), dt);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < d; ++j) {
            const float got = out[i * d + j];
            if (tok[i] >= vocab) ASSERT_TRUE(std::isnan(got)) << "row " << i;
            else ASSERT_EQ(got, table[tok[i] * d + j]) << "row " << i << " col " << j;
          }
      }
#endif
}

// The stacked-weight GEMM the model runs for every call of <= 32 tokens: its
// rows for each stacked piece are bit-identical to the piece's own GEMM, for
// every variant (a 16-row block of the stacked matrix can straddle two pieces
// when a piece's row count is not a multiple of 16, as with 129).
TEST(KernelsDecodeFused, StackedSkinnyGemmEqualsSeparate) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> shapes = {
      {4096, {4096, 1024, 1024}}, {1024, {129, 40, 40}}, {4096, {11008, 11008}}};
  for (DType dt : kDtypes)
    for (const auto& [in, pieces] : shapes) {
      int64_t out = 0;
      for (int64_t r : pieces) out += r;
      auto w = randv(out * in, 71 + uint32_t(in), -0.05f, 0.05f);
      round_to(w, dt);
      auto dw = upload_as(w, dt);
      for (int v = 0; v < kSkinnyVariants; ++v)
        for (int64_t n : kRows) {
          SCOPED_TRACE(testing::Message() << tf::dtype_name(dt) << " " << skinny_variant_name(SkinnyVariant(v))
                                          << " in=" << in << " first piece " << pieces[0] << " n=" << n);
          auto x = randv(n * in, 73 + n, -1, 1);
          round_to(x, dt);
          auto dx = upload_as(x, dt);
          DeviceBuffer ys(size_t(n * out) * 2);
          ys.poison();
          SkinnyGemmParams p;
          p.x = dx.get(), p.w = dw.get(), p.y = ys.get(), p.n = n, p.in = in, p.out = out, p.dtype = dt, p.y_dtype = dt;
          p.variant = v;
          gemm_skinny(p, compute_stream());
          stream_sync();
          const auto stacked = raw(ys, size_t(n * out));
          int64_t r0 = 0;
          for (int64_t rows : pieces) {
            DeviceBuffer y1(size_t(n * rows) * 2);
            y1.poison();
            SkinnyGemmParams q = p;
            q.w = static_cast<const uint16_t*>(dw.get()) + r0 * in, q.y = y1.get(), q.out = rows;
            gemm_skinny(q, compute_stream());
            stream_sync();
            const auto sep = raw(y1, size_t(n * rows));
            for (int64_t i = 0; i < n; ++i)
              ASSERT_TRUE(std::equal(sep.begin() + i * rows, sep.begin() + (i + 1) * rows,
                                     stacked.begin() + i * out + r0))
                  << "piece at row " << r0 << ", token " << i;
            r0 += rows;
          }
          for (float y : from_half(stacked, dt)) ASSERT_TRUE(std::isfinite(y));
        }
    }
#endif
}
