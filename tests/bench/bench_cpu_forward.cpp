// The CPU forward of n = 1, 3, 7 tokens (a decode step and verifications of
// gamma + 1 rows) after a context of 8 or 4096 tokens, on the real SmolLM2-135M
// GGUF (scripts/fetch_default_model.sh; TRIFORCE_CACHE overrides the folder, as
// in test_spec_methods). The prefill runs once per context, outside the timing;
// each iteration forwards n tokens and truncates the cache back.
//
//   ./build-cpu/tests/bench_cpu_forward --benchmark_min_time=1 --benchmark_repetitions=5 \
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "model/checkpoint.h"
#include "model/llama.h"
#include "ops/cpu/skinny_cpu.h"

namespace {

std::string model_path() {
  const char* home = std::getenv("HOME");
  const char* cache = std::getenv("TRIFORCE_CACHE");
  return (cache ? std::string(cache) : std::string(home ? home : "") + "/.cache/triforce") +
         "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::vector<int32_t> tokens(int64_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

struct Loaded {
  std::unique_ptr<tf::LlamaModel> model;
  std::map<int64_t, std::unique_ptr<tf::FullKVCache>> caches;  // by context length, prefilled
};

// One model for the process; null when the GGUF is missing.
Loaded* loaded() {
  static std::unique_ptr<Loaded> l = [] {
    std::unique_ptr<Loaded> r;
    if (!std::filesystem::exists(model_path())) return r;
    tf::Checkpoint ck = tf::open_checkpoint(model_path());
    r = std::make_unique<Loaded>();
    r->model = std::make_unique<tf::LlamaModel>(ck.config, tf::LlamaWeights::load(*ck.weights, ck.config));
    return r;
  }();
  return l.get();
}

tf::FullKVCache& prefilled(Loaded& l, int64_t ctx) {
  auto& c = l.caches[ctx];
  if (!c) {
    c = std::make_unique<tf::FullKVCache>(l.model->make_cache(ctx + 64));
    l.model->forward(tokens(ctx, 1, l.model->config().vocab_size), *c, 1);
  }
  return *c;
}

// args: context, n, kernels (1: the skinny kernels, 0: the BLAS path they
// replaced, as TRIFORCE_CPU_KERNELS=blas: the before/after in one process, so
// --benchmark_enable_random_interleaving spreads a shared machine's noise over both)
void BM_CpuForward(benchmark::State& state) {
  Loaded* l = loaded();
  if (!l) {
    state.SkipWithError(("no model at " + model_path()).c_str());
    return;
  }
  const int64_t ctx = state.range(0), n = state.range(1);
  tf::FullKVCache& cache = prefilled(*l, ctx);
  const auto t = tokens(n, 2, l->model->config().vocab_size);
  tf::ops::cpu::force_blas_kernels(state.range(2) == 0);
  for (auto _ : state) {
    tf::Tensor lg = l->model->forward(t, cache);
    benchmark::DoNotOptimize(lg.data);
    cache.truncate(ctx);
  }
  tf::ops::cpu::force_blas_kernels(false);
  state.SetLabel(state.range(2) ? tf::ops::cpu::skinny_isa() : "blas");
}
BENCHMARK(BM_CpuForward)
    ->ArgNames({"ctx", "n", "kernels"})
    ->ArgsProduct({{8, 4096}, {1, 3, 7}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
