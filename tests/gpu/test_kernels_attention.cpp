// Split-KV decode/verify attention kernel (ctest label gpu) against
// tf::ops::attention on host f32 copies of the same (dtype-rounded) inputs:
// KV lengths 1..65537, head_dim 64/128, MHA and GQA, f16 and bf16, 1..32
// query tokens causal by position. The output and the split workspace are
// poisoned with NaN before launch, and the cache slots past the length hold
// NaN, so a read outside [0, length) or a missing write shows up. Every case
// also runs with the combine done by the last split block of each KV head
// (combine_in_split), twice (the arrival counters must reset), and has to give
// the combine kernel's bits; a grid of one split writes the rows itself
// (direct_single_split, the default) and must give the bits of the combine
// kernel launched after it.
// SKIPPED without CUDA or without a device.
#include <gtest/gtest.h>

#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "ops/ops.h"

#ifdef TRIFORCE_HAVE_CUDA
#include "attention_decode.cuh"
#include "device_buffer.cuh"
#endif

namespace {

using tf::DType;

struct Case {
  int64_t L, D, H, KH, n;
  DType dt;
  int splits = 0;             // 0: auto
  bool positions = true;      // false: q_positions = nullptr (every query sees all slots)
  int warps = 0;              // split CTA warps: 0 the process default, 4, or 8 (head_dim 64)
};

// The split widths a head dim has: every one is checked against the CPU.
std::vector<int> widths(int64_t D) { return D == 64 ? std::vector<int>{4, 8} : std::vector<int>{4}; }

#ifdef TRIFORCE_HAVE_CUDA
using tf::testing::fill_uniform;

void run_case(const Case& c) {
  SCOPED_TRACE(testing::Message() << "L=" << c.L << " D=" << c.D << " H=" << c.H << " KH=" << c.KH << " n=" << c.n
                                  << " " << tf::dtype_name(c.dt) << " splits=" << c.splits
                                  << " positions=" << c.positions << " warps=" << c.warps);
  const int64_t cap = c.L + 13, D = c.D;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> k(c.KH * cap * D, nan), v(c.KH * cap * D, nan), q(c.n * c.H * D);
  for (int64_t h = 0; h < c.KH; ++h) {
    fill_uniform(k, h * cap * D, (h * cap + c.L) * D, 100 + h);
    fill_uniform(v, h * cap * D, (h * cap + c.L) * D, 200 + h);
  }
  fill_uniform(q, 0, q.size(), 7 + c.n);
  for (auto& x : q) x *= 2.0f;  // sharper softmax
  tf::cuda::round_to(k, c.dt), tf::cuda::round_to(v, c.dt), tf::cuda::round_to(q, c.dt);
  std::vector<int32_t> pos(c.n);
  for (int64_t i = 0; i < c.n; ++i) pos[i] = c.positions ? int32_t(c.L - c.n + i) : int32_t(c.L - 1);

  auto dk = tf::cuda::upload_as(k, c.dt), dv = tf::cuda::upload_as(v, c.dt), dq = tf::cuda::upload_as(q, c.dt);
  tf::cuda::DeviceBuffer dout(q.size() * 2), dpos(c.n * 4), dlen(4);
  dpos.upload(pos.data(), c.n * 4);
  const int32_t L32 = int32_t(c.L);
  dlen.upload(&L32, 4);
  tf::cuda::AttentionDecodeParams p;
  p.q = dq.get(), p.k_cache = dk.get(), p.v_cache = dv.get(), p.out = dout.get();
  p.kv_length = dlen.as<int32_t>(), p.q_positions = c.positions ? dpos.as<int32_t>() : nullptr;
  p.n = c.n, p.num_heads = c.H, p.num_kv_heads = c.KH, p.head_dim = D, p.capacity = cap;
  p.num_splits = c.splits, p.dtype = c.dt, p.split_warps = c.warps;
  tf::cuda::DeviceBuffer ws(tf::cuda::attention_decode_workspace_bytes(p));
  p.workspace = ws.as<float>();
  ws.poison();
  dout.poison();
  const int64_t direct_before = tf::cuda::attention_decode_direct_launches();
  tf::cuda::attention_decode(p);
  EXPECT_EQ(tf::cuda::attention_decode_direct_launches() - direct_before,
            tf::cuda::attention_decode_num_splits(p) == 1 ? 1 : 0) << "one split writes its rows, more combine";
  CUDA_CHECK(cudaDeviceSynchronize());
  auto got = tf::cuda::download_as(dout, q.size(), c.dt);
  const size_t out_bytes = q.size() * 2;
  std::vector<uint8_t> plain_bits(out_bytes), fused_bits(out_bytes);
  dout.download(plain_bits.data(), out_bytes);
  {  // the combine launched even for one split: the bits the one-split direct write must give
    tf::cuda::AttentionDecodeParams pc = p;
    pc.direct_single_split = false;
    const int64_t direct_before = tf::cuda::attention_decode_direct_launches();
    ws.poison();
    dout.poison();
    tf::cuda::attention_decode(pc);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(tf::cuda::attention_decode_direct_launches(), direct_before) << "direct write while switched off";
    dout.download(fused_bits.data(), out_bytes);
    EXPECT_TRUE(fused_bits == plain_bits) << tf::cuda::attention_decode_num_splits(p)
                                          << " split(s), the default path vs the combine kernel always launched";
  }
  for (int rep = 0; rep < 2; ++rep) {
    tf::cuda::AttentionDecodeParams pi = p;
    pi.combine_in_split = true;
    ws.poison();
    dout.poison();
    tf::cuda::attention_decode(pi);
    CUDA_CHECK(cudaDeviceSynchronize());
    dout.download(fused_bits.data(), out_bytes);
    EXPECT_TRUE(fused_bits == plain_bits) << "combine in the split kernel, call " << rep;
  }

  tf::Tensor tq = tf::Tensor::cpu(DType::F32, {c.n, c.H, D}), tp = tf::Tensor::cpu(DType::I32, {c.n});
  std::memcpy(tq.data, q.data(), tq.bytes());
  std::memcpy(tp.data, pos.data(), tp.bytes());
  tf::Tensor to = tf::Tensor::cpu(DType::F32, {c.n, c.H, D});
  tf::ops::KVView kv;
  kv.k = k.data(), kv.v = v.data(), kv.length = c.L, kv.head_stride = cap * D, kv.token_stride = D;
  kv.num_kv_heads = c.KH, kv.head_dim = D;
  tf::ops::AttentionParams ap;
  ap.num_heads = c.H, ap.num_kv_heads = c.KH, ap.head_dim = D;
  tf::ops::attention(tq, tp, kv, to, ap);

  const float rtol = c.dt == DType::BF16 ? 1.6e-2f : 2e-3f, atol = c.dt == DType::BF16 ? 8e-3f : 1e-3f;
  size_t bad = 0;
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float r = to.ptr<float>()[i];
    const float e = std::fabs(got[i] - r);
    if (std::isfinite(got[i])) max_err = std::max<double>(max_err, e);
    if (!(std::isfinite(got[i]) && e <= atol + rtol * std::fabs(r)) && bad++ == 0)
      ADD_FAILURE() << "element " << i << " (token " << i / (c.H * D) << ", head " << (i / D) % c.H << ", dim "
                    << i % D << ") got " << got[i] << " want " << r;
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << got.size() << " off; max |err| " << max_err;
}
#endif

}  // namespace


// Every short length x head_dim x MHA/GQA x dtype x {decode, 3- and 7-token verify}.
TEST(KernelsAttention, ShortLengths) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  // Sanitizer shapes: 4097 cut to 1300 (three 512-slot splits).
  for (int64_t L : tf::testing::grid<int64_t>({1, 3, 127, 129, 4097}, {1, 3, 129, 1300}))
    for (int64_t D : {64, 128})
      for (auto hk : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}})
        for (DType dt : {DType::F16, DType::BF16})
          for (int64_t n : {1, 3, 7})
            for (int w : widths(D)) run_case({L, D, hk.first, hk.second, n, dt, 0, true, w});
#endif
}

// Wide verify batches (32 tokens, up to 256 query rows per kv head), forced
// split counts, and queries without positions.
TEST(KernelsAttention, VerifyAndSplits) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const int64_t L = tf::testing::pick<int64_t>(4097, 1300);  // the forced split counts keep 4097
  for (DType dt : {DType::F16, DType::BF16}) {
    run_case({L, 128, 32, 8, 32, dt});
    for (int w : widths(64)) run_case({L, 64, 32, 32, 32, dt, 0, true, w});
    run_case({L, 128, 64, 8, 32, dt});
    run_case({129, 128, 32, 8, 32, dt});
    run_case({3, 128, 32, 8, 32, dt});  // most queries see nothing: zero rows
    run_case({4097, 128, 32, 8, 1, dt, 1});
    run_case({4097, 128, 32, 8, 7, dt, 7});
    run_case({4097, 128, 32, 8, 4, dt, 129});
    for (int w : widths(64)) run_case({127, 64, 16, 4, 5, dt, 0, false, w});
    for (int w : widths(64)) run_case({1300, 64, 12, 3, 5, dt, 3, true, w});  // forced splits of 448 slots: a partial wide tile
  }
#endif
}

TEST(KernelsAttention, LongContext65537) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : {DType::F16, DType::BF16}) {
    run_case({65537, 128, 32, 8, 1, dt});
    run_case({65537, 128, 32, 8, 32, dt});
  }
  for (int w : widths(64)) {
    run_case({65537, 64, 8, 8, 1, DType::BF16, 0, true, w});
    run_case({65537, 64, 8, 8, 5, DType::F16, 0, true, w});
  }
#endif
}

// The wide split tile exists only at head_dim 64: anything else is refused
// with one line naming the field, before a launch.
TEST(KernelsAttention, RefusesASplitWidthTheHeadDimLacks) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  tf::cuda::DeviceBuffer buf(1 << 16), len(4);
  tf::cuda::AttentionDecodeParams p;
  p.q = buf.get(), p.k_cache = buf.get(), p.v_cache = buf.get(), p.out = buf.get(), p.workspace = buf.as<float>();
  p.kv_length = len.as<int32_t>(), p.num_heads = 8, p.num_kv_heads = 8, p.capacity = 16, p.split_slots = 512;
  for (auto [D, w] : {std::pair<int64_t, int>{128, 8}, {64, 6}, {64, 16}}) {
    p.head_dim = D, p.split_warps = w;
    try {
      tf::cuda::attention_decode(p);
      ADD_FAILURE() << "split_warps " << w << " at head_dim " << D << " was taken";
    } catch (const tf::Error& e) {
      EXPECT_NE(std::string(e.what()).find("split_warps " + std::to_string(w)), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(tf::cuda::attention_decode_split_warps(128), 4);
  const int w64 = tf::cuda::attention_decode_split_warps(64);
  EXPECT_TRUE(w64 == 4 || w64 == 8) << w64;
#endif
}
