// CPU reference op benchmarks (Google Benchmark). The CPU path is the spec, not
// the fast path; these numbers say how long the reference tests take and where
// the CPU forward spends its time.
#include <benchmark/benchmark.h>

#include <random>

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

// One decode query (9 heads / 3 KV heads, head_dim 64) over a KV of `len` tokens.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t len = state.range(0), heads = 9, kvh = 3, hd = 64;
  auto k = random_tensor({kvh, len, hd}, 3), v = random_tensor({kvh, len, hd}, 4);
  auto q = random_tensor({1, heads, hd}, 5);
  auto qpos = tf::Tensor::cpu(tf::DType::I32, {1});
  qpos.ptr<int32_t>()[0] = int32_t(len - 1);
  auto out = tf::Tensor::cpu(tf::DType::F32, {1, heads, hd});
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
BENCHMARK(BM_AttentionDecode)->Arg(1024)->Arg(8192)->Arg(65536);

}  // namespace

BENCHMARK_MAIN();
