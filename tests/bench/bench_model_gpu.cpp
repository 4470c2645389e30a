// Whole-model steps of the synthetic shapes on one GPU: the 7B decode step and
// a 7-token verification at contexts 8K..128K, the 7B step on a retrieval
// level's cache (budget 4096 + gamma 6: n = 1 and n = gamma), the draft step of
// the llama-68m shape on its StreamingLLM cache (16 sinks + 234 window), each
// with CUDA graphs (second argument 1) and eagerly (0); and prefill at 8K..128K.
// The floor of a step is (weight bytes + KV bytes read) / 4.22 TB/s, the
// measured HBM read peak of the H200. Steps are timed on the host around
// LlamaModel::forward, which ends with the logits' device-to-host copy, so the
// time is the full latency a caller sees (launches included), after warm-up;
// step_ms is the median over the iterations.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "core/device.h"
#include "model/llama.h"
#include "model/weights_device.h"

using namespace tf;

namespace {

constexpr double kPeakBytesPerS = 4.22e12;
constexpr int64_t kMaxContext = 131072 + 64;

struct Loaded {
  ModelConfig cfg;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<FullKVCache> cache;                     // kMaxContext slots
  std::map<int64_t, std::unique_ptr<FullKVCache>> small;  // a retrieval or streaming level's cache, by capacity
};

Loaded& get(const std::string& name) {
  static std::map<std::string, Loaded> models;
  auto it = models.find(name);
  if (it != models.end()) return it->second;
  // Only one model resident at a time (a 7B with a 128K cache is ~82 GB).
  models.clear();
  Loaded& l = models[name];
  l.cfg = synthetic_config(name);
  l.model = std::make_unique<LlamaModel>(l.cfg, synthetic_weights(l.cfg, Device::CUDA, DType::BF16), 2048);
  const int64_t full = std::min<int64_t>(kMaxContext, l.cfg.max_position_embeddings + 64);
  l.cache = std::make_unique<FullKVCache>(l.model->make_cache(full));
  return l;
}

FullKVCache& cache_of(Loaded& l, int64_t capacity) {
  if (capacity <= 0) return *l.cache;
  auto& c = l.small[capacity];
  if (!c) c = std::make_unique<FullKVCache>(l.model->make_cache(capacity));
  return *c;
}

double weight_bytes(const ModelConfig& c) { return double(c.param_count()) * 2.0; }
double kv_bytes(const ModelConfig& c, int64_t ctx) { return 2.0 * c.num_layers * c.kv_dim() * 2.0 * double(ctx); }

// Claim `len` slots (positions 0..len-1) without computing them: a step's cost
// does not depend on the cached values.
void set_length(FullKVCache& cache, int64_t len) {
  cache.truncate(0);
  std::vector<int32_t> pos(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) pos[size_t(i)] = int32_t(i);
  cache.append_slots(pos.data(), len);
}

// A step of n_tokens at context state.range(0) (the KV length the step ends
// at), graphs on when state.range(1) != 0, on a cache of `capacity` slots
// (0: the full-context cache).
void step(benchmark::State& state, const std::string& name, int64_t n_tokens, int64_t capacity = 0) {
  Loaded& l = get(name);
  const int64_t ctx = state.range(0);
  const bool graphs = state.range(1) != 0;
  l.model->set_cuda_graphs(graphs);
  FullKVCache& cache = cache_of(l, capacity);
  set_length(cache, ctx - n_tokens);
  std::vector<int32_t> toks(static_cast<size_t>(n_tokens), 17);
  std::vector<int64_t> pos(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) pos[size_t(i)] = ctx - n_tokens + i;
  for (int i = 0; i < 5; ++i) {  // warm-up (a graph is recorded on the second call)
    l.model->forward(toks, pos, cache, n_tokens);
    cache.truncate(ctx - n_tokens);
  }
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    l.model->forward(toks, pos, cache, n_tokens);
    const auto t1 = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(dt);
    times.push_back(dt);
    cache.truncate(ctx - n_tokens);
  }
  std::sort(times.begin(), times.end());
  const double floor_s = (weight_bytes(l.cfg) + kv_bytes(l.cfg, ctx)) / kPeakBytesPerS;
  const double median_s = times.empty() ? 0.0 : times[times.size() / 2];
  state.counters["floor_ms"] = floor_s * 1e3;
  state.counters["step_ms"] = median_s * 1e3;
  state.counters["x_floor"] = median_s / floor_s;  // 1.0 = at the bandwidth floor
  state.counters["graphs"] = graphs ? 1 : 0;
  state.counters["replays"] = double(l.model->step_graphs().replays());
  state.SetLabel(name + " n=" + std::to_string(n_tokens) + (graphs ? " graphs" : " eager"));
}

void prefill(benchmark::State& state, const std::string& name) {
  Loaded& l = get(name);
  const int64_t n = state.range(0);
  std::vector<int32_t> toks(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) toks[size_t(i)] = int32_t((i * 7919) % l.cfg.vocab_size);
  double total = 0;
  for (auto _ : state) {
    l.cache->truncate(0);
    const auto t0 = std::chrono::steady_clock::now();
    l.model->forward(toks, *l.cache, 1);
    const auto t1 = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(dt);
    total += dt;
  }
  const double mean_s = total / double(state.iterations());
  state.counters["prefill_s"] = mean_s;
  state.counters["tokens_per_s"] = double(n) / mean_s;
  state.SetLabel(name);
}

// The retrieval level's cache: budget 4096 + gamma 6 slots (+1 for the bonus token).
constexpr int64_t kRetrievalBudget = 4096, kGamma = 6;
// The draft's StreamingLLM cache: 16 sinks + 234 window (+ gamma for the block).
constexpr int64_t kDraftCache = 16 + 234;

void BM_Decode7B(benchmark::State& s) { step(s, "synthetic:llama2-7b-128k", 1); }
void BM_RetrievalStep7B(benchmark::State& s) {
  step(s, "synthetic:llama2-7b-128k", s.range(2), kRetrievalBudget + kGamma + 1);
}
void BM_DraftStep68M(benchmark::State& s) { step(s, "synthetic:llama-68m", 1, kDraftCache + kGamma); }
void BM_Verify7_7B(benchmark::State& s) { step(s, "synthetic:llama2-7b-128k", 7); }
void BM_Prefill7B(benchmark::State& s) { prefill(s, "synthetic:llama2-7b-128k"); }
void BM_Decode8B_GQA(benchmark::State& s) { step(s, "synthetic:llama3.1-8b", 1); }

}  // namespace

// Arguments: context, graphs (1) or eager (0)[, tokens].
BENCHMARK(BM_Decode7B)->ArgsProduct({{8192, 32768, 131072}, {1, 0}})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Verify7_7B)->ArgsProduct({{8192, 131072}, {1, 0}})->UseManualTime()->Unit(benchmark::kMillisecond);
// Context = what the step's attention reads: the budget plus the step's tokens.
BENCHMARK(BM_RetrievalStep7B)
    ->Args({kRetrievalBudget + 1, 1, 1})->Args({kRetrievalBudget + 1, 0, 1})
    ->Args({kRetrievalBudget + kGamma, 1, kGamma})->Args({kRetrievalBudget + kGamma, 0, kGamma})
    ->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Prefill7B)->Arg(8192)->Arg(32768)->Arg(131072)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_Decode8B_GQA)->ArgsProduct({{32768, 131072}, {1, 0}})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DraftStep68M)->ArgsProduct({{kDraftCache}, {1, 0}})->UseManualTime()->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
