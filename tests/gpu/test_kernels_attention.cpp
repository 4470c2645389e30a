// Split-KV decode/verify attention kernel (ctest label gpu) against
// tf::ops::attention on host f32 copies of the same (dtype-rounded) inputs:
// KV lengths 1..65537, head_dim 64/128, MHA and GQA, f16 and bf16, 1..32
// query tokens causal by position. The output and the split workspace
// (partials and ticket counters) are poisoned with NaN before launch, and the
// cache slots past the length hold NaN, so a read outside [0, length) or a
// missing write shows up. Fixed-size splits give the same bits whatever
// number of them one CTA streams and however far the grid reaches past the
// length; repeated calls and a CUDA graph replay show the tickets reset.
// SKIPPED without CUDA or without a device.
#include <gtest/gtest.h>

#include "random_data.h"
#include "require_device.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

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
  int64_t split_slots = 0;    // > 0: fixed-size splits (as the model calls it)
  int spc = 0;                // with split_slots: forced splits per CTA (0: whole waves)
  int64_t grid = 0;           // > 0: max_length, a grid sized for more slots than L (<= L + 13)
  int repeats = 1;            // calls on one workspace; each must give the first call's bits
  bool graph = false;         // also capture the call in a CUDA graph and replay it twice
};

#ifdef TRIFORCE_HAVE_CUDA
using tf::testing::fill_uniform;

std::vector<uint32_t> bits_of(const std::vector<float>& x) {
  std::vector<uint32_t> b(x.size());
  std::memcpy(b.data(), x.data(), x.size() * sizeof(float));
  return b;
}

// Checks one configuration against the CPU reference; returns the output.
std::vector<float> run_case(const Case& c) {
  SCOPED_TRACE(testing::Message() << "L=" << c.L << " D=" << c.D << " H=" << c.H << " KH=" << c.KH << " n=" << c.n
                                  << " " << tf::dtype_name(c.dt) << " splits=" << c.splits
                                  << " positions=" << c.positions << " split_slots=" << c.split_slots
                                  << " spc=" << c.spc << " grid=" << c.grid);
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
  p.num_splits = c.splits, p.dtype = c.dt;
  p.split_slots = c.split_slots, p.splits_per_cta = c.spc, p.max_length = c.grid;
  tf::cuda::DeviceBuffer ws(tf::cuda::attention_decode_workspace_bytes(p));
  p.workspace = ws.as<float>();
  ws.poison();
  dout.poison();
  tf::cuda::attention_decode(p);
  CUDA_CHECK(cudaDeviceSynchronize());
  auto got = tf::cuda::download_as(dout, q.size(), c.dt);
  // Later calls reuse the workspace as the first left it (tickets back at
  // zero, so no memset) with the partials still poisoned.
  for (int r = 1; r < c.repeats; ++r) {
    SCOPED_TRACE(testing::Message() << "repeat " << r);
    const size_t counter_bytes = size_t(p.n * p.num_heads) * 4;  // the workspace's tail
    CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes() - counter_bytes));
    dout.poison();
    p.counters_zeroed = true;
    tf::cuda::attention_decode(p);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(bits_of(tf::cuda::download_as(dout, q.size(), c.dt)), bits_of(got));
  }
  if (c.graph) {
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    p.counters_zeroed = false;  // the memset (if any) is part of the graph
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    tf::cuda::attention_decode(p, st);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    ws.poison();
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(testing::Message() << "graph replay " << r);
      dout.poison();
      CUDA_CHECK(cudaDeviceSynchronize());  // the poison (legacy stream) lands before the non-blocking stream runs
      CUDA_CHECK(cudaGraphLaunch(exec, st));
      CUDA_CHECK(cudaStreamSynchronize(st));
      EXPECT_EQ(bits_of(tf::cuda::download_as(dout, q.size(), c.dt)), bits_of(got));
    }
    // The cache shrinks under the recorded grid (as a graph bucket serves
    // several lengths): the replay gives the bits of an eager call at that length.
    const int32_t shorter = int32_t(std::max<int64_t>(c.n, c.L / 2));
    std::vector<int32_t> pos2(c.n);
    for (int64_t i = 0; i < c.n; ++i) pos2[i] = int32_t(shorter - c.n + i);
    dlen.upload(&shorter, 4);
    dpos.upload(pos2.data(), c.n * 4);
    dout.poison();
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    const auto replayed = tf::cuda::download_as(dout, q.size(), c.dt);
    dout.poison();
    tf::cuda::attention_decode(p);
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto eager = tf::cuda::download_as(dout, q.size(), c.dt);
    size_t nonfinite = 0;
    for (float x : replayed) nonfinite += !std::isfinite(x);
    EXPECT_EQ(nonfinite, 0u) << "replay at length " << shorter;
    EXPECT_EQ(bits_of(replayed), bits_of(eager)) << "replay at length " << shorter;
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(st));
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
  return got;
}
#endif

}  // namespace


// Every short length x head_dim x MHA/GQA x dtype x {decode, 3- and 7-token verify}.
TEST(KernelsAttention, ShortLengths) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (int64_t L : {1, 3, 127, 129, 4097})
    for (int64_t D : {64, 128})
      for (auto hk : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}})
        for (DType dt : {DType::F16, DType::BF16})
          for (int64_t n : {1, 3, 7}) run_case({L, D, hk.first, hk.second, n, dt});
#endif
}

// Wide verify batches (32 tokens, up to 256 query rows per kv head), forced
// split counts, and queries without positions.
TEST(KernelsAttention, VerifyAndSplits) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : {DType::F16, DType::BF16}) {
    run_case({4097, 128, 32, 8, 32, dt});
    run_case({4097, 64, 32, 32, 32, dt});
    run_case({4097, 128, 64, 8, 32, dt});
    run_case({129, 128, 32, 8, 32, dt});
    run_case({3, 128, 32, 8, 32, dt});  // most queries see nothing: zero rows
    run_case({4097, 128, 32, 8, 1, dt, 1});
    run_case({4097, 128, 32, 8, 7, dt, 7});
    run_case({4097, 128, 32, 8, 4, dt, 129});
    run_case({127, 64, 16, 4, 5, dt, 0, false});
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
  run_case({65537, 64, 8, 8, 1, DType::BF16});
  run_case({65537, 64, 8, 8, 5, DType::F16});
#endif
}

// Fixed-size splits (the model's batch-invariant mode) streamed 1, 3, 4 or a
// wave-filling number per CTA, with grids reaching past the length: each
// matches the reference and all give the bits of one split per CTA. 64-slot
// splits at 4097 make 65 splits (the last CTA of 3 or 4 gets a short range).
TEST(KernelsAttention, SplitsPerCtaSameBits) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : {DType::F16, DType::BF16})
    for (auto hk : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}})
      for (int64_t D : {64, 128})
        for (int64_t L : {129, 4097})
          for (int64_t n : {1, 7}) {
            Case base{L, D, hk.first, hk.second, n, dt};
            base.split_slots = 64, base.spc = 1;
            const auto ref = bits_of(run_case(base));
            for (int spc : {3, 4, 0})
              for (int64_t grid : {int64_t(0), L + 13}) {
                Case c = base;
                c.spc = spc, c.grid = grid;
                EXPECT_EQ(bits_of(run_case(c)), ref) << "spc=" << spc << " grid=" << grid;
              }
          }
#endif
}

// The model's 512-slot splits at 65537 (129 splits): the automatic choice
// streams several per CTA; the bits equal one split per CTA.
TEST(KernelsAttention, LongContextFixedSplits) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (int64_t n : {1, 3}) {
    Case c{65537, 64, 8, 8, n, DType::BF16};
    c.split_slots = 512;
    const auto automatic = bits_of(run_case(c));
    c.spc = 1;
    EXPECT_EQ(bits_of(run_case(c)), automatic);
  }
#endif
}

// Back-to-back calls on one workspace (the tickets reset themselves) and a
// graph replay, for a one-split grid, the automatic one-wave split, forced
// splits and fixed splits streamed several per CTA.
TEST(KernelsAttention, RepeatedCallsAndGraphReplay) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (DType dt : {DType::F16, DType::BF16}) {
    Case c{4097, 128, 32, 8, 3, dt};
    c.repeats = 3, c.graph = true;
    run_case(c);  // automatic splits
    c.splits = 1;
    run_case(c);
    c.splits = 7;
    run_case(c);
    Case f{4097, 128, 32, 32, 1, dt};
    f.split_slots = 512, f.spc = 3, f.grid = 4097 + 13, f.repeats = 3, f.graph = true;
    run_case(f);
    f.n = 32, f.H = 32, f.KH = 8, f.spc = 0;
    run_case(f);
  }
#endif
}
