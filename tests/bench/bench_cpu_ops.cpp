// CPU reference op benchmarks (Google Benchmark). The CPU path is the spec, not
// the fast path; these numbers say how long the reference tests take and where
// the CPU forward spends its time.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <random>
#include <vector>

#include "ops/cpu/skinny_cpu.h"
#include "ops/ops.h"

namespace {

tf::Tensor random_tensor(std::vector<int64_t> shape, uint32_t seed) {
  tf::Tensor t = tf::Tensor::cpu(tf::DType::F32, std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(rng);
  return t;
}

// y[n, out] = x[n, in] W^T at the SmolLM2 MLP shape (576 -> 1536).
void BM_Linear(benchmark::State& state) {
  const int64_t n = state.range(0), in = 576, out = 1536;
  auto x = random_tensor({n, in}, 1), w = random_tensor({out, in}, 2);
  auto y = tf::Tensor::cpu(tf::DType::F32, {n, out});
  for (auto _ : state) {
    tf::ops::linear(x, w, y);
    benchmark::DoNotOptimize(y.data);
  }
  state.SetBytesProcessed(state.iterations() * out * in * 4);
  state.counters["FLOP/s"] =
      benchmark::Counter(double(2 * n * in * out) * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Linear)->Arg(1)->Arg(8)->Arg(128);

// The decode / verification linear at SmolLM2-135M's shapes (out x in: q and
// o 576x576, k and v 192x576, gate and up 1536x576, down 576x1536, the tied
// lm_head 49152x576) for 1..8 rows: ops::linear (the skinny kernel) against
// OpenBLAS sgemv (one call per row) and sgemm (one call) in the same binary.
// cold 1: each call reads another copy of the weights, 96 MB of copies in all
// (3x this L3), so the weights come from memory as in a decode step, where the
// 540 MB model streams through; cold 0: one copy, warm in L2/L3 after the first
// call. Bytes are the weights read once.
enum class LinearImpl { kOps, kSgemv, kSgemm };
template <LinearImpl impl>
void BM_SkinnyLinear(benchmark::State& state) {
  const int64_t out = state.range(0), in = state.range(1), n = state.range(2);
  const int64_t copies = state.range(3) ? std::max<int64_t>(1, (int64_t(96) << 20) / (out * in * 4)) : 1;
  auto x = random_tensor({n, in}, 1);
  std::vector<tf::Tensor> ws;
  ws.push_back(random_tensor({out, in}, 2));
  for (int64_t c = 1; c < copies; ++c) {  // same values, other memory
    ws.push_back(tf::Tensor::cpu(tf::DType::F32, {out, in}));
    std::copy_n(ws[0].ptr<float>(), out * in, ws.back().ptr<float>());
  }
  auto y = tf::Tensor::cpu(tf::DType::F32, {n, out});
  const float* X = x.ptr<float>();
  float* Y = y.ptr<float>();
  int64_t c = 0;
  for (auto _ : state) {
    const tf::Tensor& w = ws[size_t(c)];
    c = c + 1 == copies ? 0 : c + 1;
    const float* W = w.ptr<float>();
    if (impl == LinearImpl::kOps) {
      tf::ops::linear(x, w, y);
    } else if (impl == LinearImpl::kSgemv) {
      for (int64_t r = 0; r < n; ++r)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, int(out), int(in), 1.0f, W, int(in), X + r * in, 1, 0.0f,
                    Y + r * out, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(out), int(in), 1.0f, X, int(in), W, int(in),
                  0.0f, Y, int(out));
    }
    benchmark::DoNotOptimize(Y);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * out * in * 4);
  state.SetLabel(impl == LinearImpl::kOps ? tf::ops::cpu::skinny_isa() : "");
}
void skinny_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"out", "in", "rows", "cold"});
  for (int64_t cold : {1, 0})
    for (auto [o, i] : std::vector<std::pair<int64_t, int64_t>>{
             {576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {49152, 576}})
      for (int64_t n : {1, 2, 3, 4, 8})
        if (cold || o != 49152) b->Args({o, i, n, cold});  // the lm_head (113 MB) is cold anyway
}
BENCHMARK(BM_SkinnyLinear<LinearImpl::kOps>)->Name("BM_SkinnyLinear/ops")->Apply(skinny_shapes)->UseRealTime();
BENCHMARK(BM_SkinnyLinear<LinearImpl::kSgemv>)->Name("BM_SkinnyLinear/sgemv")->Apply(skinny_shapes)->UseRealTime();
BENCHMARK(BM_SkinnyLinear<LinearImpl::kSgemm>)->Name("BM_SkinnyLinear/sgemm")->Apply(skinny_shapes)->UseRealTime();

// `n` queries at the newest positions of a KV of `len` tokens, SmolLM2's heads
// (9 / 3 KV heads, head_dim 64), timed through ops::attention.
void run_attention(benchmark::State& state, int64_t len, int64_t n) {
  const int64_t heads = 9, kvh = 3, hd = 64;
  auto k = random_tensor({kvh, len, hd}, 3), v = random_tensor({kvh, len, hd}, 4);
  auto q = random_tensor({n, heads, hd}, 5);
  auto qpos = tf::Tensor::cpu(tf::DType::I32, {n});
  for (int64_t i = 0; i < n; ++i) qpos.ptr<int32_t>()[i] = int32_t(len - n + i);
  auto out = tf::Tensor::cpu(tf::DType::F32, {n, heads, hd});
  tf::ops::KVView view;
  view.k = k.ptr<float>();
  view.v = v.ptr<float>();
  view.length = len;
  view.head_stride = len * hd;
  view.token_stride = hd;
  view.num_kv_heads = kvh;
  view.head_dim = hd;
  tf::ops::AttentionParams p;
  p.num_heads = heads;
  p.num_kv_heads = kvh;
  p.head_dim = hd;
  for (auto _ : state) {
    tf::ops::attention(q, qpos, view, out, p);
    benchmark::DoNotOptimize(out.data);
  }
  state.SetBytesProcessed(state.iterations() * 2 * kvh * len * hd * 4);
}

// One decode query over a KV of `len` tokens.
void BM_AttentionDecode(benchmark::State& state) { run_attention(state, state.range(0), 1); }
BENCHMARK(BM_AttentionDecode)->Arg(1024)->Arg(8192)->Arg(65536);

// A verification's attention: `rows` queries; kernels 1: the skinny kernel,
// 0: the BLAS attention it replaced.
void BM_AttentionRows(benchmark::State& state) {
  tf::ops::cpu::force_blas_kernels(state.range(2) == 0);
  run_attention(state, state.range(0), state.range(1));
  tf::ops::cpu::force_blas_kernels(false);
  state.SetLabel(state.range(2) ? tf::ops::cpu::skinny_isa() : "blas");
}
BENCHMARK(BM_AttentionRows)
    ->ArgNames({"len", "rows", "kernels"})
    ->ArgsProduct({{8, 4096}, {1, 3, 7}, {0, 1}})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
