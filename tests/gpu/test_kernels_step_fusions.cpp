// The fused step ops (ctest label gpu) against the CPU reference ops and, bit
// for bit, against the unfused CUDA ops they replace in LlamaModel's step:
// rope_qkv_to_cache (RoPE of q and k + the K/V cache write) and rope_qkv_split
// from a stacked q/k/v GEMM output or from separate q, k, v; silu_mul_halves
// from a stacked gate/up output; add_rmsnorm with rounded_sum (the closing
// add + the next norm); the stacked q/k/v and gate/up GEMMs themselves; and
// those GEMMs with RoPE + the KV write or the SwiGLU in their epilogue
// against the GEMM then the op, and the same epilogues after the norm
// prologue against norm_linear then the op.
// Shapes: head_dim 64/128, MHA and GQA (9/3 as SmolLM2, 32/8 as Llama 3),
// n = 1..32, f16 and bf16. Every output is poisoned (0xFF: NaN) first; cache
// slots the op must not touch have to stay poisoned. SKIPPED without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/device.h"
#include "kv/full_cache.h"
#include "ops/ops.h"
#include "random_data.h"
#include "require_device.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

using namespace tf;

namespace {

const DType kDtypes[] = {DType::F16, DType::BF16};
const int64_t kSteps[] = {1, 2, 3, 7, 13, 32};

Tensor host_random(std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::cpu(DType::F32, std::move(shape));
  std::vector<float> v(static_cast<size_t>(t.numel()));
  tf::testing::fill_uniform(v, 0, v.size(), seed);
  for (size_t i = 0; i < v.size(); ++i) t.ptr<float>()[i] = scale * v[i];
  return t;
}
Tensor device_i32(const std::vector<int32_t>& v) {
  Tensor h = Tensor::cpu(DType::I32, {int64_t(v.size())});
  std::copy(v.begin(), v.end(), h.ptr<int32_t>());
  Tensor d = empty_tensor(Device::CUDA, DType::I32, h.shape);
  copy_tensor(d, h);
  return d;
}
Tensor device_f32(const Tensor& h) { return to_device_as(h, Device::CUDA, DType::F32); }
void poison(Tensor& t) { ASSERT_EQ(cudaMemset(t.data, 0xFF, t.bytes()), cudaSuccess); }
Tensor poisoned(DType dt, std::vector<int64_t> shape) {
  Tensor t = empty_tensor(Device::CUDA, dt, std::move(shape));
  poison(t);
  return t;
}
std::vector<uint8_t> raw(const Tensor& t) {
  std::vector<uint8_t> b(t.bytes());
  copy_bytes(b.data(), Device::CPU, t.data, t.device, b.size());
  return b;
}
void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.bytes(), b.bytes()) << what;
  EXPECT_TRUE(raw(a) == raw(b)) << what << ": fused and unfused bits differ";
}
// |got - ref| <= atol + rtol |ref| at every element, no NaN (ref f32 host).
void expect_close(const Tensor& got_dev, const float* ref, int64_t count, DType dt, const std::string& what,
                  float scale = 1.0f) {
  const Tensor got = to_host_f32(got_dev);
  ASSERT_EQ(got.numel(), count) << what;
  const float rtol = dt == DType::BF16 ? 1.6e-2f : 2e-3f, atol = (dt == DType::BF16 ? 1e-2f : 1.5e-3f) * scale;
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float g = got.ptr<float>()[i];
    if (!(std::isfinite(g) && std::fabs(g - ref[i]) <= atol + rtol * std::fabs(ref[i])) && bad++ == 0)
      ADD_FAILURE() << what << " [" << dtype_name(dt) << "] element " << i << ": got " << g << " want " << ref[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// f32 cos/sin tables of `rows` positions spread up to 100K (rope_cos_sin, as the model's host rows).
void rope_tables(int64_t rows, int64_t D, Tensor& cos, Tensor& sin) {
  const int64_t half = D / 2;
  Tensor inv = Tensor::cpu(DType::F32, {half}), pos = Tensor::cpu(DType::I32, {rows});
  for (int64_t i = 0; i < half; ++i) inv.ptr<float>()[i] = std::pow(500000.0f, -float(2 * i) / float(D));
  for (int64_t i = 0; i < rows; ++i) pos.ptr<int32_t>()[i] = int32_t((i * 7919) % 100000);
  cos = Tensor::cpu(DType::F32, {rows, half}), sin = Tensor::cpu(DType::F32, {rows, half});
  ops::rope_cos_sin(inv, pos, cos, sin, {1.0f});
}

// Contiguous [n, cols / D, D] copy of columns [c0, c0 + cols) of a host [n, ld] tensor.
Tensor host_columns(const Tensor& t, int64_t c0, int64_t cols, int64_t D) {
  const int64_t n = t.shape[0], ld = t.shape[1];
  Tensor o = Tensor::cpu(DType::F32, {n, cols / D, D});
  for (int64_t i = 0; i < n; ++i) std::copy_n(t.ptr<float>() + i * ld + c0, cols, o.ptr<float>() + i * cols);
  return o;
}

struct HeadShape {
  int64_t H, KH, D;
};
const HeadShape kHeads[] = {{4, 4, 64}, {9, 3, 64}, {8, 2, 128}, {32, 8, 128}};

// A one-layer device cache of `cap` slots, all claimed, K and V poisoned (0xFF: NaN).
FullKVCache poisoned_layer_cache(int64_t KH, int64_t D, int64_t cap, DType dt) {
  FullKVCache c(1, KH, D, cap, Device::CUDA, dt);
  std::vector<int32_t> all(static_cast<size_t>(cap));
  for (int64_t i = 0; i < cap; ++i) all[size_t(i)] = int32_t(i);
  c.append_slots(all.data(), cap);
  Tensor lk = c.layer_k(0), lv = c.layer_v(0);
  poison(lk), poison(lv);
  return c;
}

// An AssertionResult rather than a void helper, so that ASSERT_TRUE at the call site still ends the test at the
// first bad element, as the inline loops did.
::testing::AssertionResult all_finite(const Tensor& device_tensor, const std::string& what) {
  const Tensor h = to_host_f32(device_tensor);
  for (int64_t j = 0; j < h.numel(); ++j)
    if (!std::isfinite(h.ptr<float>()[j]))
      return ::testing::AssertionFailure() << what << " element " << j << ": " << h.ptr<float>()[j];
  return ::testing::AssertionSuccess();
}

struct QkvShape {
  int64_t hidden, H, KH, D;
};

// The RoPE inputs of the fused-epilogue tests: some tokens' table rows past the tables (NaN q/k rows, as the unfused
// kernel gives) and some slots past the cache (never written, so the poison must stay); both_sides sends some of them
// below zero too, covering both ends of the kernels' bounds checks.
struct RopeInputs {
  int64_t table_rows = 40, cap = 0;
  std::vector<int32_t> rows, slots;  // host copies, to tell which tokens the kernels must skip
  Tensor dcos, dsin, drows, dslots;
};
RopeInputs rope_inputs(int64_t n, int64_t D, bool both_sides) {
  RopeInputs r;
  r.cap = 2 * n + 7;
  Tensor cos, sin;
  rope_tables(r.table_rows, D, cos, sin);
  r.rows.resize(static_cast<size_t>(n)), r.slots.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // Every fifth token past the tables, every fourth past the cache.
    const bool odd = i % 2 != 0;
    r.rows[size_t(i)] = i % 5 == 4 ? int32_t(both_sides && odd ? -1 - i : r.table_rows + i)
                                   : int32_t((i * 11 + 3) % r.table_rows);
    // (i % 4 == 3 is always odd: the side of a slot past the cache alternates with i / 4 instead.)
    const bool below = both_sides && (i / 4) % 2 == 0;
    r.slots[size_t(i)] = i % 4 == 3 ? int32_t(below ? -1 - i : r.cap + i) : int32_t(r.cap - 1 - 2 * i);
  }
  r.dcos = device_f32(cos), r.dsin = device_f32(sin), r.drows = device_i32(r.rows), r.dslots = device_i32(r.slots);
  return r;
}

// The bitwise comparison alone would pass on two constant outputs: q rows of in-table tokens must be finite and the
// others NaN. Checks the first `per_row` elements of each [H, D] row of q; an AssertionResult for ASSERT_TRUE.
::testing::AssertionResult q_rows_follow_tables(const Tensor& q, const RopeInputs& r, int64_t per_row) {
  const Tensor hq = to_host_f32(q);
  const int64_t n = hq.shape[0], row = hq.numel() / n;
  for (int64_t i = 0; i < n; ++i) {
    const bool in_table = r.rows[size_t(i)] >= 0 && r.rows[size_t(i)] < r.table_rows;
    for (int64_t j = 0; j < per_row; ++j)
      if (bool(std::isfinite(hq.ptr<float>()[i * row + j])) != in_table)
        return ::testing::AssertionFailure() << "token " << i << " q element " << j << ": "
                                             << hq.ptr<float>()[i * row + j] << (in_table ? ", in" : ", past")
                                             << " the tables";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(KernelsStepFusions, RopeQkvToCacheAndSplitMatchCpuAndUnfused) {
  REQUIRE_DEVICE();
  for (DType dt : kDtypes)
    for (HeadShape s : kHeads)
      for (int64_t n : kSteps)
        for (bool stacked : {true, false}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " H=" << s.H << " KH=" << s.KH << " D=" << s.D
                                            << " n=" << n << " stacked=" << stacked);
          const int64_t H = s.H, KH = s.KH, D = s.D, ld = (H + 2 * KH) * D, table_rows = 40, cap = 2 * n + 7;
          Tensor cos, sin;
          rope_tables(table_rows, D, cos, sin);
          std::vector<int32_t> rows_v(static_cast<size_t>(n)), slots_v(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) rows_v[size_t(i)] = int32_t((i * 11 + 3) % table_rows);
          for (int64_t i = 0; i < n; ++i) slots_v[size_t(i)] = int32_t(cap - 1 - 2 * i);  // distinct, with gaps
          Tensor dcos = device_f32(cos), dsin = device_f32(sin), drows = device_i32(rows_v), dslots = device_i32(slots_v);
          // Inputs as the device sees them (rounded to dt), also on the host in f32.
          Tensor dqkv = to_device_as(host_random({n, ld}, 100 + n + D, 3.0f), Device::CUDA, dt);
          Tensor hqkv = to_host_f32(dqkv);
          Tensor hq = host_columns(hqkv, 0, H * D, D), hk = host_columns(hqkv, H * D, KH * D, D);
          Tensor hv = host_columns(hqkv, (H + KH) * D, KH * D, D);
          Tensor dq = to_device_as(hq, Device::CUDA, dt), dk = to_device_as(hk, Device::CUDA, dt);
          Tensor dv = to_device_as(hv, Device::CUDA, dt);
          const ops::QKVRows in = stacked ? ops::qkv_rows(dqkv, H, KH, D) : ops::qkv_rows(dq, dk, dv);

          // Unfused CUDA: rope_apply_rows in place, then the cache write at the device slots.
          Tensor uq = to_device_as(hq, Device::CUDA, dt), uk = to_device_as(hk, Device::CUDA, dt);
          ops::rope_apply_rows(uq, uk, dcos, dsin, drows);
          FullKVCache ucache = poisoned_layer_cache(KH, D, cap, dt), fcache = poisoned_layer_cache(KH, D, cap, dt);
          ucache.write_at(0, dslots, uk, dv);

          // Fused, to the cache.
          Tensor fq = poisoned(dt, {n, H, D}), fk = fcache.layer_k(0), fv = fcache.layer_v(0);
          ops::rope_qkv_to_cache(in, dcos, dsin, drows, dslots, fq, fk, fv);
          expect_bitwise(fq, uq, "to_cache q");
          expect_bitwise(fk, ucache.layer_k(0), "to_cache K layer (written and untouched slots)");
          expect_bitwise(fv, ucache.layer_v(0), "to_cache V layer");
          // Untouched slots stay poisoned: slot cap - 2 - 2i is never written.
          {
            const std::vector<uint8_t> kb = raw(fk);
            for (int64_t h = 0; h < KH; ++h)
              for (int64_t i = 0; i < n; ++i) {
                const size_t at = size_t((h * cap + (cap - 2 - 2 * i)) * D) * 2;
                for (int64_t j = 0; j < D * 2; ++j) ASSERT_EQ(kb[at + size_t(j)], 0xFF) << "slot " << cap - 2 - 2 * i;
              }
          }
          // Fused, split into contiguous rows.
          Tensor sq = poisoned(dt, {n, H, D}), sk = poisoned(dt, {n, KH, D}), sv = poisoned(dt, {n, KH, D});
          ops::rope_qkv_split(in, dcos, dsin, drows, sq, sk, sv);
          expect_bitwise(sq, uq, "split q");
          expect_bitwise(sk, uk, "split k");
          expect_bitwise(sv, dv, "split v");

          // CPU reference (f32) on the same rounded inputs.
          Tensor rq = Tensor::cpu(DType::F32, {n, H, D}), rk = Tensor::cpu(DType::F32, {n, KH, D});
          Tensor rv = Tensor::cpu(DType::F32, {n, KH, D});
          Tensor hrows = Tensor::cpu(DType::I32, {n});
          std::copy(rows_v.begin(), rows_v.end(), hrows.ptr<int32_t>());
          ops::rope_qkv_split(ops::qkv_rows(hqkv, H, KH, D), cos, sin, hrows, rq, rk, rv);
          expect_close(sq, rq.ptr<float>(), rq.numel(), dt, "q vs CPU", 3.0f);
          expect_close(sk, rk.ptr<float>(), rk.numel(), dt, "k vs CPU", 3.0f);
          expect_close(sv, rv.ptr<float>(), rv.numel(), dt, "v vs CPU", 3.0f);
        }
}

TEST(KernelsStepFusions, SiluMulHalvesMatchesCpuAndUnfused) {
  REQUIRE_DEVICE();
  for (DType dt : kDtypes)
    for (int64_t I : {64, 1536, 11008})
      for (int64_t n : kSteps) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " inter=" << I << " n=" << n);
        Tensor dgu = to_device_as(host_random({n, 2 * I}, 7 + n + I, 6.0f), Device::CUDA, dt);
        Tensor hgu = to_host_f32(dgu);
        Tensor hg = Tensor::cpu(DType::F32, {n, I}), hu = Tensor::cpu(DType::F32, {n, I});
        for (int64_t i = 0; i < n; ++i) {
          std::copy_n(hgu.ptr<float>() + i * 2 * I, I, hg.ptr<float>() + i * I);
          std::copy_n(hgu.ptr<float>() + i * 2 * I + I, I, hu.ptr<float>() + i * I);
        }
        Tensor dg = to_device_as(hg, Device::CUDA, dt), du = to_device_as(hu, Device::CUDA, dt);
        Tensor fused = poisoned(dt, {n, I}), plain = poisoned(dt, {n, I});
        ops::silu_mul_halves(dgu, fused);
        ops::silu_mul(dg, du, plain);
        expect_bitwise(fused, plain, "silu_mul_halves");
        Tensor ref = Tensor::cpu(DType::F32, {n, I});
        ops::silu_mul_halves(hgu, ref);
        expect_close(fused, ref.ptr<float>(), ref.numel(), dt, "silu_mul_halves vs CPU", 6.0f);
      }
}

// The down projection that reads silu(gate) * up in its input load
// (linear_silu_mul_halves, StepFusions::fused_silu_down) against
// silu_mul_halves then linear, bit for bit: bf16/f16 and f32 outputs, inter
// not a multiple of the 128-column k-block, out not a multiple of the 16-row
// tile, every n of the three tile counts.
TEST(KernelsStepFusions, SiluMulDownGemmEqualsSiluMulThenLinear) {
  REQUIRE_DEVICE();
  for (DType dt : kDtypes)
    for (auto [I, out] : {std::pair<int64_t, int64_t>{1536, 576}, {200, 37}, {2816, 1024}, {11008, 4096}})
      for (int64_t n : {1, 2, 7, 8, 9, 16, 17, 32})
        for (DType ydt : {dt, DType::F32}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " inter=" << I << " out=" << out << " n=" << n
                                            << " y " << dtype_name(ydt));
          Tensor gu = to_device_as(host_random({n, 2 * I}, 41 + n + I, 6.0f), Device::CUDA, dt);
          Tensor w = to_device_as(host_random({out, I}, 43 + out, 0.05f), Device::CUDA, dt);
          Tensor act = poisoned(dt, {n, I}), plain = poisoned(ydt, {n, out}), fused = poisoned(ydt, {n, out});
          ops::silu_mul_halves(gu, act);
          ops::linear(act, w, plain);
          Tensor unused = poisoned(dt, {n, I});  // the scratch, untouched when the kernel fuses
          ops::linear_silu_mul_halves(gu, w, fused, unused);
          expect_bitwise(fused, plain, "silu-down GEMM");
          const std::vector<uint8_t> u = raw(unused);
          EXPECT_TRUE(std::all_of(u.begin(), u.end(), [](uint8_t b) { return b == 0xFF; }))
              << "the fused path wrote its fallback scratch";
          ASSERT_TRUE(all_finite(fused, "silu-down GEMM"));
        }
}

// The n of the skinny GEMM's three tile counts and their edges.
const int64_t kEpilogueSteps[] = {1, 3, 8, 9, 16, 17, 32};

bool untouched(const Tensor& t) {
  const std::vector<uint8_t> b = raw(t);
  return std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0xFF; });
}

// The gate/up GEMM with the SwiGLU in its epilogue (linear_gate_up_silu,
// StepFusions::fused_gate_up_silu) against the GEMM into [gate | up] then
// silu_mul_halves, bit for bit: inter a multiple of 8 but not of 16 (the
// tiles pair gate row j with up row j, 8 a tile), hidden not a multiple of the
// k-block, every tile count.
TEST(KernelsStepFusions, GateUpSiluEpilogueEqualsGemmThenSiluMul) {
  REQUIRE_DEVICE();
  for (DType dt : kDtypes)
    for (auto [hidden, I] : {std::pair<int64_t, int64_t>{576, 1536}, {200, 24}, {768, 3072}, {1024, 2824}})
      for (int64_t n : kEpilogueSteps) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " hidden=" << hidden << " inter=" << I << " n=" << n);
        Tensor x = to_device_as(host_random({n, hidden}, 51 + n + hidden, 2.0f), Device::CUDA, dt);
        Tensor w = to_device_as(host_random({2 * I, hidden}, 53 + I, 0.08f), Device::CUDA, dt);
        Tensor gu = poisoned(dt, {n, 2 * I}), plain = poisoned(dt, {n, I});
        ops::linear(x, w, gu);
        ops::silu_mul_halves(gu, plain);
        Tensor fused = poisoned(dt, {n, I}), scratch = poisoned(dt, {n, 2 * I});
        ops::linear_gate_up_silu(x, w, fused, scratch);
        expect_bitwise(fused, plain, "gate/up GEMM + SwiGLU");
        EXPECT_TRUE(untouched(scratch)) << "the fused path wrote its fallback scratch";
        ASSERT_TRUE(all_finite(fused, "gate/up GEMM + SwiGLU"));
      }
}

// The q/k/v GEMM with RoPE and the KV write in its epilogue
// (linear_rope_qkv_to_cache, StepFusions::fused_qkv_rope) against the GEMM
// into the stacked output then rope_qkv_to_cache, bit for bit, q and both
// whole cache layers: head_dim 64 and 128, GQA 1, 3 and 4, tokens whose table
// row is outside the tables (NaN rows, as the unfused kernel gives) and whose
// slot is outside the cache (never written: the poison must stay).
TEST(KernelsStepFusions, QkvRopeEpilogueEqualsGemmThenRopeToCache) {
  REQUIRE_DEVICE();
  for (DType dt : kDtypes)
    for (QkvShape sh : {QkvShape{576, 9, 3, 64}, {768, 12, 12, 64}, {200, 8, 2, 128}, {1024, 12, 4, 128}})
      for (int64_t n : kEpilogueSteps) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " hidden=" << sh.hidden << " H=" << sh.H
                                          << " KH=" << sh.KH << " D=" << sh.D << " n=" << n);
        const int64_t H = sh.H, KH = sh.KH, D = sh.D, ld = (H + 2 * KH) * D;
        const RopeInputs r = rope_inputs(n, D, /*both_sides=*/true);
        Tensor x = to_device_as(host_random({n, sh.hidden}, 61 + n + sh.hidden, 2.0f), Device::CUDA, dt);
        Tensor w = to_device_as(host_random({ld, sh.hidden}, 63 + ld, 0.08f), Device::CUDA, dt);

        FullKVCache ucache = poisoned_layer_cache(KH, D, r.cap, dt), fcache = poisoned_layer_cache(KH, D, r.cap, dt);
        Tensor qkv = poisoned(dt, {n, ld}), uq = poisoned(dt, {n, H, D});
        ops::linear(x, w, qkv);
        {
          Tensor uk = ucache.layer_k(0), uv = ucache.layer_v(0);
          ops::rope_qkv_to_cache(ops::qkv_rows(qkv, H, KH, D), r.dcos, r.dsin, r.drows, r.dslots, uq, uk, uv);
        }
        Tensor fq = poisoned(dt, {n, H, D}), scratch = poisoned(dt, {n, ld});
        Tensor fk = fcache.layer_k(0), fv = fcache.layer_v(0);
        ops::linear_rope_qkv_to_cache(x, w, r.dcos, r.dsin, r.drows, r.dslots, fq, fk, fv, scratch);
        expect_bitwise(fq, uq, "q");
        expect_bitwise(fk, ucache.layer_k(0), "K layer (written and untouched slots)");
        expect_bitwise(fv, ucache.layer_v(0), "V layer (written and untouched slots)");
        EXPECT_TRUE(untouched(scratch)) << "the fused path wrote its fallback scratch";
        ASSERT_TRUE(q_rows_follow_tables(fq, r, H * D));
        // The reference itself: out-of-cache slots unwritten.
        const Tensor hv = to_host_f32(fv);
        int64_t written = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int32_t slot = r.slots[size_t(i)];
          if (slot < 0 || slot >= r.cap) continue;
          ++written;
          for (int64_t h = 0; h < KH; ++h)
            for (int64_t j = 0; j < D; ++j)
              ASSERT_TRUE(std::isfinite(hv.ptr<float>()[(h * r.cap + slot) * D + j])) << "token " << i << " v";
        }
        int64_t poisoned_slots = 0;  // every slot no token names keeps the 0xFF poison (NaN)
        for (int64_t slot = 0; slot < r.cap; ++slot)
          poisoned_slots += std::isnan(hv.ptr<float>()[slot * D]) ? 1 : 0;
        EXPECT_EQ(poisoned_slots, r.cap - written);
      }
}

// The norm-prologue GEMMs with the fused epilogues
// (norm_linear_gate_up_silu, norm_linear_rope_qkv_to_cache: the norm, the
// GEMM and the SwiGLU or RoPE + the KV write in one launch) against
// norm_linear then the op, bit for bit, the output and the stored sum:
// without the residual add (a step's first layer), with it (the fp32 sum
// normalized, and the stored sum as the closing add does), at hidden 576 to
// 4096 (a 7B's rows, n <= 24 there: the prologue's shared-memory bound, which
// the fused kernels share) and every tile count.
const int64_t kNormModes = 3;  // 0: no add; 1: + add, fp32 sum normalized; 2: + add, stored sum normalized

struct NormInputs {
  Tensor residual, add, norm_w;
  ops::RmsNormParams np;
};
NormInputs norm_inputs(int64_t n, int64_t hidden, DType dt, int mode, uint64_t seed) {
  NormInputs a;
  a.residual = to_device_as(host_random({n, hidden}, seed, 3.0f), Device::CUDA, dt);
  a.add = to_device_as(host_random({n, hidden}, seed + 1, 1.0f), Device::CUDA, dt);
  Tensor w = host_random({hidden}, seed + 2, 0.5f);
  for (int64_t c = 0; c < hidden; ++c) w.ptr<float>()[c] += 1.0f;
  a.norm_w = to_device_as(w, Device::CUDA, dt);
  a.np.eps = 1e-5f;
  a.np.rounded_sum = mode == 2;
  return a;
}

TEST(KernelsStepFusions, NormGateUpSiluEqualsNormGemmThenSiluMul) {
  REQUIRE_DEVICE();
  for (DType dt : kDtypes)
    for (auto [hidden, I] : {std::pair<int64_t, int64_t>{576, 1536}, {200, 24}, {768, 3072}, {4096, 1000}})
      for (int64_t n : kEpilogueSteps)
        for (int mode = 0; mode < kNormModes; ++mode) {
          if (hidden == 4096 && n > 24) continue;
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " hidden=" << hidden << " inter=" << I << " n=" << n
                                            << " mode=" << mode);
          const NormInputs a = norm_inputs(n, hidden, dt, mode, 71 + n + hidden);
          Tensor w = to_device_as(host_random({2 * I, hidden}, 73 + I, 0.08f), Device::CUDA, dt);
          const Tensor* add = mode ? &a.add : nullptr;
          Tensor gu = poisoned(dt, {n, 2 * I}), plain = poisoned(dt, {n, I}), usum = poisoned(dt, {n, hidden});
          ASSERT_TRUE(ops::norm_linear(a.residual, add, mode ? &usum : nullptr, a.norm_w, a.np, w, gu));
          ops::silu_mul_halves(gu, plain);
          Tensor fused = poisoned(dt, {n, I}), fsum = poisoned(dt, {n, hidden});
          ASSERT_TRUE(ops::norm_linear_gate_up_silu(a.residual, add, mode ? &fsum : nullptr, a.norm_w, a.np, w, fused));
          expect_bitwise(fused, plain, "norm + gate/up GEMM + SwiGLU");
          expect_bitwise(fsum, usum, "the stored sum");
          if (!mode) EXPECT_TRUE(untouched(fsum)) << "no add: nothing stored";
          ASSERT_TRUE(all_finite(fused, "norm + gate/up GEMM + SwiGLU"));
        }
}

TEST(KernelsStepFusions, NormQkvRopeEqualsNormGemmThenRopeToCache) {
  REQUIRE_DEVICE();
  for (DType dt : kDtypes)
    for (QkvShape sh : {QkvShape{576, 9, 3, 64}, {200, 8, 2, 128}, {1024, 12, 4, 128}, {4096, 4, 2, 128}})
      for (int64_t n : kEpilogueSteps)
        for (int mode = 0; mode < kNormModes; ++mode) {
          if (sh.hidden == 4096 && n > 24) continue;
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " hidden=" << sh.hidden << " H=" << sh.H
                                            << " KH=" << sh.KH << " D=" << sh.D << " n=" << n << " mode=" << mode);
          const int64_t H = sh.H, KH = sh.KH, D = sh.D, ld = (H + 2 * KH) * D;
          const RopeInputs r = rope_inputs(n, D, /*both_sides=*/false);
          const NormInputs a = norm_inputs(n, sh.hidden, dt, mode, 81 + n + sh.hidden);
          Tensor w = to_device_as(host_random({ld, sh.hidden}, 83 + ld, 0.08f), Device::CUDA, dt);
          const Tensor* add = mode ? &a.add : nullptr;

          FullKVCache ucache = poisoned_layer_cache(KH, D, r.cap, dt), fcache = poisoned_layer_cache(KH, D, r.cap, dt);
          Tensor qkv = poisoned(dt, {n, ld}), uq = poisoned(dt, {n, H, D}), usum = poisoned(dt, {n, sh.hidden});
          ASSERT_TRUE(ops::norm_linear(a.residual, add, mode ? &usum : nullptr, a.norm_w, a.np, w, qkv));
          {
            Tensor uk = ucache.layer_k(0), uv = ucache.layer_v(0);
            ops::rope_qkv_to_cache(ops::qkv_rows(qkv, H, KH, D), r.dcos, r.dsin, r.drows, r.dslots, uq, uk, uv);
          }
          Tensor fq = poisoned(dt, {n, H, D}), fsum = poisoned(dt, {n, sh.hidden});
          Tensor fk = fcache.layer_k(0), fv = fcache.layer_v(0);
          ASSERT_TRUE(ops::norm_linear_rope_qkv_to_cache(a.residual, add, mode ? &fsum : nullptr, a.norm_w, a.np, w,
                                                         r.dcos, r.dsin, r.drows, r.dslots, fq, fk, fv));
          expect_bitwise(fq, uq, "q");
          expect_bitwise(fk, ucache.layer_k(0), "K layer (written and untouched slots)");
          expect_bitwise(fv, ucache.layer_v(0), "V layer (written and untouched slots)");
          expect_bitwise(fsum, usum, "the stored sum");
          ASSERT_TRUE(q_rows_follow_tables(fq, r, 1));
        }
}

TEST(KernelsStepFusions, AddRmsNormRoundedSumIsAddThenNorm) {
  REQUIRE_DEVICE();
  for (DType dt : kDtypes)
    for (int64_t d : {64, 576, 768, 4096, 5120})
      for (int64_t n : {1, 3, 7, 32, 129}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " d=" << d << " n=" << n);
        Tensor hx = host_random({n, d}, 3 + n + d, 4.0f), hr = host_random({n, d}, 5 + n + d, 4.0f);
        Tensor hw = host_random({d}, 9 + d, 0.5f);
        for (int64_t i = 0; i < d; ++i) hw.ptr<float>()[i] += 1.0f;
        Tensor dx = to_device_as(hx, Device::CUDA, dt), dw = to_device_as(hw, Device::CUDA, dt);
        Tensor r1 = to_device_as(hr, Device::CUDA, dt), r2 = to_device_as(hr, Device::CUDA, dt);
        Tensor o1 = poisoned(dt, {n, d}), o2 = poisoned(dt, {n, d});
        ops::RmsNormParams p{1e-5f};
        p.rounded_sum = true;
        ops::add_rmsnorm(r1, dx, dw, o1, p);
        ops::add_inplace(r2, dx);
        ops::rmsnorm(r2, dw, o2, {1e-5f});
        expect_bitwise(r1, r2, "residual");
        expect_bitwise(o1, o2, "norm of the stored sum");
        // CPU: the sum of the rounded inputs, normalized after rounding it as the device stores it.
        Tensor cx = to_host_f32(dx), cw = to_host_f32(dw), cr = to_host_f32(to_device_as(hr, Device::CUDA, dt));
        ops::add_inplace(cr, cx);
        Tensor cr_rounded = to_host_f32(to_device_as(cr, Device::CUDA, dt)), co = Tensor::cpu(DType::F32, {n, d});
        ops::rmsnorm(cr_rounded, cw, co, {1e-5f});
        expect_close(r1, cr.ptr<float>(), cr.numel(), dt, "residual vs CPU", 8.0f);
        expect_close(o1, co.ptr<float>(), co.numel(), dt, "norm vs CPU", 4.0f);
      }
}

TEST(KernelsStepFusions, StackedGemmColumnsEqualSeparateGemms) {
  REQUIRE_DEVICE();
  struct Shape {
    int64_t hidden, H, KH, D, inter;
  };
  for (DType dt : kDtypes)
    for (Shape s : {Shape{576, 9, 3, 64, 1536}, Shape{1024, 8, 2, 128, 2816}})
      for (int64_t n : {1, 2, 3, 5, 7, 8, 13, 16, 31, 32}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " hidden=" << s.hidden << " n=" << n);
        const int64_t rq = s.H * s.D, rk = s.KH * s.D, I = s.inter;
        // Stacked weights and their row views, as weights_device uploads them.
        Tensor wqkv = to_device_as(host_random({rq + 2 * rk, s.hidden}, 21 + s.hidden, 0.05f), Device::CUDA, dt);
        Tensor wgu = to_device_as(host_random({2 * I, s.hidden}, 23 + s.hidden, 0.05f), Device::CUDA, dt);
        auto rows_of = [](const Tensor& w, int64_t r0, int64_t r1) { return ops::slice_rows(w, r0, r1); };
        Tensor x = to_device_as(host_random({n, s.hidden}, 31 + n, 2.0f), Device::CUDA, dt);
        Tensor qkv = poisoned(dt, {n, rq + 2 * rk}), gu = poisoned(dt, {n, 2 * I});
        ops::linear(x, wqkv, qkv);
        ops::linear(x, wgu, gu);
        const int64_t ld = rq + 2 * rk;
        const std::vector<std::pair<int64_t, int64_t>> pieces = {{0, rq}, {rq, rq + rk}, {rq + rk, ld}};
        const std::vector<uint8_t> stacked = raw(qkv), stacked_gu = raw(gu);
        for (auto [c0, c1] : pieces) {
          Tensor y = poisoned(dt, {n, c1 - c0});
          ops::linear(x, rows_of(wqkv, c0, c1), y);
          const std::vector<uint8_t> sep = raw(y);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(std::memcmp(stacked.data() + size_t(i * ld + c0) * 2, sep.data() + size_t(i * (c1 - c0)) * 2,
                                  size_t(c1 - c0) * 2), 0)
                << "q/k/v columns [" << c0 << ", " << c1 << ") row " << i;
        }
        for (int64_t half = 0; half < 2; ++half) {
          Tensor y = poisoned(dt, {n, I});
          ops::linear(x, rows_of(wgu, half * I, (half + 1) * I), y);
          const std::vector<uint8_t> sep = raw(y);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(std::memcmp(stacked_gu.data() + size_t(i * 2 * I + half * I) * 2, sep.data() + size_t(i * I) * 2,
                                  size_t(I) * 2), 0)
                << (half ? "up" : "gate") << " row " << i;
        }
        ASSERT_TRUE(all_finite(qkv, "qkv"));
      }
}

#endif  // TRIFORCE_HAVE_CUDA
