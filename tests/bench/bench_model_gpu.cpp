// Whole-model steps of the synthetic shapes on one GPU: the 7B decode step and
// a 7-token verification at contexts 8K..128K, the 7B step on a retrieval
// level's cache (budget 4096 + tail: n = 1, 3 (TriForce's middle level) and
// gamma = 6), the draft step of the llama-68m shape on its StreamingLLM cache
// (16 sinks + 234 window), the SmolLM2-135M step at a short context and at
// 6478 slots, each with CUDA graphs (second argument 1) and eagerly (0); and
// prefill at 8K..128K (BM_Prefill7B, and BM_Prefill8B_GQA at 128K) with the
// prefill attention backend, the chunk size and the GEMM algorithm as
// arguments: tokens, backend (0 ours, 1 cuDNN), chunk, gemm (0 cublasGemmEx,
// 1 cuBLASLt heuristic, 2 cuBLASLt tuned, 3 auto), stacked prefill GEMMs
// (model/prefill_options.h; 0 off, 1 on). A prefill is timed once after one
// untimed prefill of the same length (first_s: that one, which pays cuDNN's
// graph building and the GEMM tuning of new shapes); attn_plan_s is the graph
// building inside the first (0 when warm). Issue 18 set (~3 min):
//   --benchmark_filter='BM_Prefill(7B|8B_GQA)/131072/'
// Target: BM_Prefill7B/131072 prefill_s <= 10.5. The A/B of its switches
// (gemm auto, stacked, chunk 16384; ~2.5 min):
//   --benchmark_filter='BM_Prefill7B/131072/1/(8192/[03]|16384/)'
// The floor of a step is (weight bytes + KV bytes read) / 4.22 TB/s, the
// measured HBM read peak of the H200; of a prefill, the larger of that and
// its matmul FLOPs / 989 TFLOP/s (dense bf16 peak). Every benchmark reports
// x_floor = time / floor. Steps are timed on the host around
// LlamaModel::forward, which ends with the logits' device-to-host copy, so the
// time is the full latency a caller sees (launches included), after warm-up;
// step_ms is the median over the iterations. The counters stacked / rope_kv /
// add_norm show the step fusions in force (TRIFORCE_STACKED_GEMMS,
// TRIFORCE_FUSED_ROPE_KV, TRIFORCE_FUSED_ADD_NORM); persistent shows the
// switch of the persistent whole-step kernel (TRIFORCE_PERSISTENT_STEP) and
// persistent_used whether the timed steps took it (a small model, n <= 8).
// BM_Verify135M and BM_DraftVerify68M are the small models' verification
// shapes (n = 3 and 5 tokens).
// The step benchmarks of issue 17 (BM_Decode7B, BM_RetrievalStep7B,
// BM_DraftStep68M, BM_Step135M, BM_Verify135M, BM_DraftVerify68M) take a last
// argument, a bit mask of the launch switches, whatever the environment says:
// 1 programmatic dependent launch (StepFusions::pdl), 2 the SiLU-mul read by
// the down projection (fused_silu_down), 4 the combine in the attention split
// kernel (fused_combine), 8 the SwiGLU in the gate/up GEMM's epilogue
// (fused_gate_up_silu), 16 RoPE and the KV write in the q/k/v GEMM's epilogue
// (fused_qkv_rope), 32 the norm-prologue GEMMs (fused_norm_gemm; the two
// epilogues then step aside); 0 is the step before them, 7 the first three,
// 25 PDL with both epilogues, 33 PDL with the norm prologue (BM_Step135M also 9
// and 17: PDL with each epilogue). The 7B decode and retrieval steps (graphs) also
// take 8, 16, 24, 28 (both epilogues and the fused combine), 32 (the norm
// prologue, 4096-wide rows since 855364f) and 56 (the prologue with both epilogue
// switches), all without PDL (off for the 7B by default), and 25 (PDL with both
// epilogues: the default's launches with PDL; experiments/h200/prefetch_ab.sh). One run
// prints 0, 1, 2, 4, 7 (and 9, 17, 25, 33 where listed) for every shape (graphs on, ~2-3 minutes):
//   bench_model_gpu --benchmark_filter='BM_(Step135M|DraftStep68M)/[0-9]+/1/|BM_(Verify135M|DraftVerify68M|RetrievalStep7B)/[0-9]+/1/[0-9]+/|BM_Decode7B/8192/1/'
// (13 shapes x 5 masks = 65 benchmarks, plus the epilogue masks).
// Counters pdl, silu_down, combine, gate_up_silu and qkv_rope show the switches in force; overlapped counts the
// launches per timed step that carried the PDL attribute (eager steps only: a
// graph replay launches without the host, so 0 there).
//
// Per-kernel times: the timed iterations (not the model setup or the warm-up)
// run between cudaProfilerStart and cudaProfilerStop, and TRIFORCE_BENCH_STEPS=N
// fixes every benchmark at N iterations, so for example
//   TRIFORCE_BENCH_STEPS=1 ncu --clock-control none --profile-from-start off \
//     --metrics gpu__time_duration.sum --print-summary per-kernel \
//     bench_model_gpu --benchmark_filter='BM_RetrievalStep7B/4099/0/3'
// prints the microseconds of each kernel of one eager 7B retrieval step; with
// TRIFORCE_PERSISTENT_STEP=1 and filter 'BM_Step135M/256/0' the one launch of
// the persistent step (persistent_step_kernel) is the whole step.
// TRIFORCE_KERNEL_TRACE=DIR instead records the timed iterations' kernels with CUPTI, without
// serialising them (graph replays, PDL overlap): DIR/<shape>.csv per benchmark (kernel_trace.h).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "core/device.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "kernel_trace.h"
#include "ops/ops.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_profiler_api.h>

#include "attention_prefill.cuh"
#include "attention_prefill_cudnn.cuh"
#include "gemm.cuh"
#include "persistent_step.cuh"
#endif

using namespace tf;

namespace {

constexpr double kPeakBytesPerS = 4.22e12;
constexpr double kPeakFlopsPerS = 989e12;

// The profiled region: the timed iterations only (ncu --profile-from-start off,
// and TRIFORCE_KERNEL_TRACE's table, kernel_trace.h).
void profile_begin() {
#ifdef TRIFORCE_HAVE_CUDA
  bench::kernel_trace_begin();
  cudaProfilerStart();
#endif
}
// label: the benchmark's shape, naming the trace's file (State's own name
// accessor differs between Google Benchmark versions).
void profile_end(const benchmark::State& state, const std::string& label) {
#ifdef TRIFORCE_HAVE_CUDA
  device_synchronize();
  cudaProfilerStop();
  bench::kernel_trace_end(label, long(state.iterations()));
#else
  (void)state;
  (void)label;
#endif
}

// TRIFORCE_BENCH_STEPS=N: every benchmark runs exactly N iterations (a cheap profile).
void fixed_steps(benchmark::internal::Benchmark* b) {
  const char* s = std::getenv("TRIFORCE_BENCH_STEPS");
  if (s && std::atoi(s) > 0) b->Iterations(std::atoi(s));
}
constexpr int64_t kMaxContext = 131072 + 64;

struct Loaded {
  ModelConfig cfg;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<FullKVCache> cache;                     // the full context (made on first use)
  std::map<int64_t, std::unique_ptr<FullKVCache>> small;  // a retrieval or streaming level's cache, by capacity
};

// The model of `name` with prefill chunks of `chunk` tokens.
Loaded& get(const std::string& name, int64_t chunk = 2048) {
  static std::map<std::pair<std::string, int64_t>, Loaded> models;
  const auto key = std::make_pair(name, chunk);
  auto it = models.find(key);
  if (it != models.end()) return it->second;
  // Only one model resident at a time (a 7B with a 128K cache is ~82 GB).
  models.clear();
  Loaded& l = models[key];
  l.cfg = synthetic_config(name);
  l.model = std::make_unique<LlamaModel>(l.cfg, synthetic_weights(l.cfg, Device::CUDA, DType::BF16), chunk);
  return l;
}

FullKVCache& full_cache(Loaded& l) {
  if (!l.cache) {
    const int64_t full = std::min<int64_t>(kMaxContext, l.cfg.max_position_embeddings + 64);
    l.cache = std::make_unique<FullKVCache>(l.model->make_cache(full));
  }
  return *l.cache;
}

FullKVCache& cache_of(Loaded& l, int64_t capacity) {
  if (capacity <= 0) return full_cache(l);
  auto& c = l.small[capacity];
  if (!c) c = std::make_unique<FullKVCache>(l.model->make_cache(capacity));
  return *c;
}

double weight_bytes(const ModelConfig& c) { return double(c.param_count()) * 2.0; }
double kv_bytes(const ModelConfig& c, int64_t ctx) { return 2.0 * c.num_layers * c.kv_dim() * 2.0 * double(ctx); }

void fusion_counters(benchmark::State& state, const LlamaModel& m) {
  state.counters["stacked"] = m.step_fusions().stacked_gemms;
  state.counters["rope_kv"] = m.step_fusions().fused_rope_kv;
  state.counters["add_norm"] = m.step_fusions().fused_add_norm;
  state.counters["persistent"] = m.step_fusions().persistent_step;
  state.counters["pdl"] = m.step_fusions().pdl;
  state.counters["silu_down"] = m.step_fusions().fused_silu_down;
  state.counters["combine"] = m.step_fusions().fused_combine;
  state.counters["gate_up_silu"] = m.step_fusions().fused_gate_up_silu;
  state.counters["qkv_rope"] = m.step_fusions().fused_qkv_rope;
  state.counters["norm_gemm"] = m.step_fusions().fused_norm_gemm;
  state.counters["direct"] = m.step_fusions().direct_single_split;
}

// The launch switches as the bit mask state.range(mask_at) says (-1: the
// process defaults for this model's size): 1 pdl, 2 fused_silu_down, 4 fused_combine,
// 8 fused_gate_up_silu, 16 fused_qkv_rope, 32 fused_norm_gemm.
void set_launch_switches(benchmark::State& state, LlamaModel& m, int mask_at) {
  StepFusions f = m.step_fusions();
  const StepFusions d = step_fusions_for(m.config().hidden_size);
  const int64_t mask = mask_at >= 0 ? state.range(mask_at)
                                    : (d.pdl ? 1 : 0) | (d.fused_silu_down ? 2 : 0) | (d.fused_combine ? 4 : 0) |
                                          (d.fused_gate_up_silu ? 8 : 0) | (d.fused_qkv_rope ? 16 : 0) |
                                          (d.fused_norm_gemm ? 32 : 0);
  const bool pdl = (mask & 1) != 0, silu_down = (mask & 2) != 0, combine = (mask & 4) != 0;
  const bool gate_up_silu = (mask & 8) != 0, qkv_rope = (mask & 16) != 0, norm_gemm = (mask & 32) != 0;
  if (f.pdl == pdl && f.fused_silu_down == silu_down && f.fused_combine == combine &&
      f.fused_gate_up_silu == gate_up_silu && f.fused_qkv_rope == qkv_rope && f.fused_norm_gemm == norm_gemm)
    return;
  f.pdl = pdl, f.fused_silu_down = silu_down, f.fused_combine = combine;
  f.fused_gate_up_silu = gate_up_silu, f.fused_qkv_rope = qkv_rope, f.fused_norm_gemm = norm_gemm;
  m.set_step_fusions(f);  // drops the recorded graphs: they launch what the old switches chose
}

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
// (0: the full-context cache), the launch switches as state.range(mask_at)
// says (-1: the process defaults).
void step(benchmark::State& state, const std::string& name, int64_t n_tokens, int64_t capacity = 0,
          int mask_at = -1) {
  Loaded& l = get(name);
  const int64_t ctx = state.range(0);
  const bool graphs = state.range(1) != 0;
  l.model->set_cuda_graphs(graphs);
  set_launch_switches(state, *l.model, mask_at);
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
  const int64_t persistent_before = l.model->persistent_steps();
  const int64_t overlapped_before = ops::step_overlapped_launches();
  profile_begin();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    l.model->forward(toks, pos, cache, n_tokens);
    const auto t1 = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(dt);
    times.push_back(dt);
    cache.truncate(ctx - n_tokens);
  }
  profile_end(state, name + "_ctx" + std::to_string(ctx) + "_n" + std::to_string(n_tokens) +
                         (graphs ? "_graphs" : "_eager") + "_mask" +
                         std::to_string(mask_at >= 0 ? state.range(mask_at) : -1));
  std::sort(times.begin(), times.end());
  const double floor_s = (weight_bytes(l.cfg) + kv_bytes(l.cfg, ctx)) / kPeakBytesPerS;
  const double median_s = times.empty() ? 0.0 : times[times.size() / 2];
  state.counters["floor_ms"] = floor_s * 1e3;
  state.counters["step_ms"] = median_s * 1e3;
  state.counters["x_floor"] = median_s / floor_s;  // 1.0 = at the bandwidth floor
  state.counters["graphs"] = graphs ? 1 : 0;
  state.counters["replays"] = double(l.model->step_graphs().replays());
  state.counters["persistent_used"] = l.model->persistent_steps() > persistent_before ? 1 : 0;
  // Graph replays launch without the host: count the overlapped launches of the
  // eager steps (and of the captures) per timed step.
  state.counters["overlapped"] =
      double(ops::step_overlapped_launches() - overlapped_before) / double(std::max<int64_t>(1, state.iterations()));
  fusion_counters(state, *l.model);
  state.SetLabel(name + " n=" + std::to_string(n_tokens) + (graphs ? " graphs" : " eager") +
                 (l.model->step_fusions().pdl ? " pdl" : "") + (l.model->step_fusions().fused_silu_down ? " silu_down" : "") +
                 (l.model->step_fusions().fused_combine ? " combine" : "") +
                 (l.model->step_fusions().fused_gate_up_silu ? " gate_up_silu" : "") +
                 (l.model->step_fusions().fused_qkv_rope ? " qkv_rope" : "") +
                 (l.model->step_fusions().fused_norm_gemm ? " norm_gemm" : ""));
}

// A drafter's T = 0 proposal of k tokens, per draft token: k forward_greedy calls (chain 0) or one
// forward_greedy_chain (chain 1: the host stages every step ahead and waits once). Graphs on, default launches.
void greedy_chain(benchmark::State& state, const std::string& name, int64_t capacity) {
  Loaded& l = get(name);
  const int64_t ctx = state.range(0), k = state.range(1);
  const bool chain = state.range(2) != 0;
  l.model->set_cuda_graphs(true);
  l.model->set_step_fusions(step_fusions_for(l.cfg.hidden_size));
  FullKVCache& cache = cache_of(l, capacity);
  set_length(cache, ctx);
  setenv("TRIFORCE_GREEDY_CHAIN", chain ? "1" : "0", 1);
  std::vector<int32_t> ids, one;
  auto propose = [&] {
    if (chain) {
      l.model->forward_greedy_chain({17}, {ctx}, cache, k, ids);
    } else {
      int32_t t = 17;
      for (int64_t i = 0; i < k; ++i) {
        l.model->forward_greedy({t}, {ctx + i}, cache, 1, one);
        t = one[0];
      }
    }
    cache.truncate(ctx);
  };
  for (int i = 0; i < 5; ++i) propose();  // warm-up: every step's graph recorded
  const int64_t chains_before = l.model->greedy_chains();
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    propose();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(dt);
    times.push_back(dt / double(k));
  }
  unsetenv("TRIFORCE_GREEDY_CHAIN");
  std::sort(times.begin(), times.end());
  state.counters["ms_per_token"] = times.empty() ? 0.0 : times[times.size() / 2] * 1e3;
  state.counters["chained"] = l.model->greedy_chains() > chains_before ? 1 : 0;
  state.SetLabel(name + " k=" + std::to_string(k) + (chain ? " chained" : " k calls"));
}

void prefill(benchmark::State& state, const std::string& name) {
  const int64_t n = state.range(0), chunk = state.range(2);
#ifdef TRIFORCE_HAVE_CUDA
  const bool cudnn = state.range(1) != 0;
  if (cudnn && !cuda::cudnn_attention_available()) {
    state.SkipWithError(("cuDNN unavailable: " + cuda::cudnn_attention_version()).c_str());
    return;
  }
  cuda::set_prefill_attention_backend(cudnn ? cuda::PrefillBackend::Cudnn : cuda::PrefillBackend::Ours);
  const cuda::GemmAlgo algo = state.range(3) == 3   ? cuda::GemmAlgo::Auto
                              : state.range(3) == 2 ? cuda::GemmAlgo::Tuned
                              : state.range(3) == 1 ? cuda::GemmAlgo::Lt
                                                    : cuda::GemmAlgo::Cublas;
  cuda::set_gemm_algo(algo);
  state.SetLabel(name + " attention " + (cudnn ? "cudnn" : "ours") + " chunk " + std::to_string(chunk) + " gemm " +
                 cuda::gemm_algo_name(algo) + (state.range(4) ? " stacked" : ""));
#endif
  Loaded& l = get(name, chunk);
  l.model->set_prefill_options(PrefillOptions{state.range(4) != 0});
  std::vector<int32_t> toks(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) toks[size_t(i)] = int32_t((i * 7919) % l.cfg.vocab_size);
  FullKVCache& cache = full_cache(l);
  double plan_s = 0;
  {  // the untimed first prefill of this length
#ifdef TRIFORCE_HAVE_CUDA
    const double plan0 = cuda::cudnn_attention_stats().plan_seconds;
#endif
    cache.truncate(0);
    const auto t0 = std::chrono::steady_clock::now();
    l.model->forward(toks, cache, 1);
    state.counters["first_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#ifdef TRIFORCE_HAVE_CUDA
    plan_s = cuda::cudnn_attention_stats().plan_seconds - plan0;
#endif
  }
  state.counters["attn_plan_s"] = plan_s;
  double total = 0;
  profile_begin();
  for (auto _ : state) {
    cache.truncate(0);
    const auto t0 = std::chrono::steady_clock::now();
    l.model->forward(toks, cache, 1);
    const auto t1 = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(dt);
    total += dt;
  }
  profile_end(state, name + "_prefill" + std::to_string(n) + "_chunk" + std::to_string(chunk) + "_attn" +
                         std::to_string(state.range(1)) + "_gemm" + std::to_string(state.range(3)) + "_stacked" +
                         std::to_string(state.range(4)));
  const double mean_s = total / double(state.iterations());
  // matmul FLOPs: 2 per weight per token, plus causal attention QK^T and PV
  // (2 * 2 * n^2 / 2 * heads * head_dim per layer).
  const ModelConfig& c = l.cfg;
  const double flops = 2.0 * double(c.param_count()) * double(n) +
                       2.0 * double(n) * double(n) * double(c.num_heads) * double(c.head_dim) * double(c.num_layers);
  const double floor_s = std::max((weight_bytes(c) + kv_bytes(c, n)) / kPeakBytesPerS, flops / kPeakFlopsPerS);
  state.counters["prefill_s"] = mean_s;
  state.counters["tokens_per_s"] = double(n) / mean_s;
  state.counters["floor_s"] = floor_s;
  state.counters["x_floor"] = mean_s / floor_s;
  fusion_counters(state, *l.model);
#ifdef TRIFORCE_HAVE_CUDA
  cuda::set_prefill_attention_backend(cuda::PrefillBackend::Auto);
  cuda::set_gemm_algo(cuda::GemmAlgo::Cublas);
#endif
}

// The persistent step's phases (TRIFORCE_PERSISTENT_STEP's kernel, forced on
// here): block 0's clock after each grid barrier, summed per phase kind over
// the layers (us_qkv, us_attn, ...: a phase's work plus the barrier after it),
// of the last of the timed eager steps. Not a latency benchmark (the stamps
// cost a little); it says where the step's time goes.
void phases(benchmark::State& state, const std::string& name, int64_t n_tokens, int64_t capacity = 0) {
#ifdef TRIFORCE_HAVE_CUDA
  Loaded& l = get(name);
  const StepFusions saved = l.model->step_fusions();
  StepFusions f = saved;
  f.persistent_step = true;
  l.model->set_step_fusions(f);
  l.model->set_cuda_graphs(false);
  const int64_t ctx = state.range(0);
  FullKVCache& cache = cache_of(l, capacity);
  set_length(cache, ctx - n_tokens);
  std::vector<int32_t> toks(static_cast<size_t>(n_tokens), 17);
  std::vector<int64_t> pos(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) pos[size_t(i)] = ctx - n_tokens + i;
  for (int i = 0; i < 3; ++i) {
    l.model->forward(toks, pos, cache, n_tokens);
    cache.truncate(ctx - n_tokens);
  }
  cuda::set_persistent_step_profiling(true);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    l.model->forward(toks, pos, cache, n_tokens);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cache.truncate(ctx - n_tokens);
  }
  cuda::set_persistent_step_profiling(false);
  for (const auto& ph : cuda::persistent_step_profile()) state.counters[std::string("us_") + ph.name] = ph.us;
  state.counters["grid"] = cuda::persistent_step_last_grid();
  state.counters["fused_attn"] = cuda::persistent_step_fused_attention();
  state.counters["persistent_used"] = l.model->persistent_steps() > 0 ? 1 : 0;
  l.model->set_step_fusions(saved);
  state.SetLabel(name + " n=" + std::to_string(n_tokens) + " persistent phases");
#else
  state.SkipWithError("built without CUDA");
#endif
}

// One grid barrier of the persistent kernel alone (a grid of range(0) blocks per
// SM; range(1): 0 the step's arrival-counter barrier, 1 the first, generation design).
void BM_PersistentBarrier(benchmark::State& state) {
#ifdef TRIFORCE_HAVE_CUDA
  double us = 0;
  for (auto _ : state) {
    us = cuda::persistent_barrier_us(10000, int(state.range(0)), state.range(1) == 1);
    state.SetIterationTime(us * 1e-6);
  }
  state.counters["barrier_us"] = us;
#else
  state.SkipWithError("built without CUDA");
#endif
}

// The retrieval level's cache: budget 4096 + gamma 6 slots (+1 for the bonus token).
constexpr int64_t kRetrievalBudget = 4096, kGamma = 6;
// The draft's StreamingLLM cache: 16 sinks + 234 window (+ gamma for the block).
constexpr int64_t kDraftCache = 16 + 234;

void BM_Decode7B(benchmark::State& s) { step(s, "synthetic:llama2-7b-128k", 1, 0, 2); }
void BM_RetrievalStep7B(benchmark::State& s) {
  step(s, "synthetic:llama2-7b-128k", s.range(2), kRetrievalBudget + kGamma + 1, 3);
}
void BM_DraftStep68M(benchmark::State& s) { step(s, "synthetic:llama-68m", 1, kDraftCache + kGamma, 2); }
void BM_Verify7_7B(benchmark::State& s) { step(s, "synthetic:llama2-7b-128k", 7); }
void BM_Prefill7B(benchmark::State& s) { prefill(s, "synthetic:llama2-7b-128k"); }
void BM_Prefill8B_GQA(benchmark::State& s) { prefill(s, "synthetic:llama3.1-8b"); }
void BM_Decode8B_GQA(benchmark::State& s) { step(s, "synthetic:llama3.1-8b", 1); }
// SmolLM2-135M, the default model's shape: a step at a short context and at
// 6478 slots (the long default prompt).
void BM_Step135M(benchmark::State& s) { step(s, "synthetic:smollm2-135m", 1, 0, 2); }
// Their verification shapes: n = state.range(2) tokens (3: TriForce's middle
// level verifying the draft's 2; 5: a longer block).
void BM_Verify135M(benchmark::State& s) { step(s, "synthetic:smollm2-135m", s.range(2), 0, 3); }
void BM_DraftVerify68M(benchmark::State& s) {
  step(s, "synthetic:llama-68m", s.range(2), kDraftCache + kGamma, 3);
}
void BM_Phases135M(benchmark::State& s) { phases(s, "synthetic:smollm2-135m", s.range(1)); }
void BM_GreedyChain68M(benchmark::State& s) { greedy_chain(s, "synthetic:llama-68m", kDraftCache + 32); }
void BM_GreedyChain135M(benchmark::State& s) { greedy_chain(s, "synthetic:smollm2-135m", 0); }
void BM_Phases68M(benchmark::State& s) { phases(s, "synthetic:llama-68m", s.range(1), kDraftCache + kGamma); }

}  // namespace

// Arguments: context, graphs (1) or eager (0)[, tokens][, launch switches: 1 pdl | 2 silu_down | 4 combine | 8 gate_up_silu | 16 qkv_rope | 32 norm_gemm].
BENCHMARK(BM_Decode7B)->ArgsProduct({{8192, 32768, 131072}, {1, 0}, {0, 1, 2, 4, 7, 8, 16, 24, 25, 28, 32, 56}})->UseManualTime()->Unit(benchmark::kMillisecond)->Apply(fixed_steps);
BENCHMARK(BM_Verify7_7B)->ArgsProduct({{8192, 131072}, {1, 0}})->UseManualTime()->Unit(benchmark::kMillisecond)->Apply(fixed_steps);
// Context = what the step's attention reads: the budget plus the step's tokens.
BENCHMARK(BM_RetrievalStep7B)
    ->ArgsProduct({{kRetrievalBudget + 1}, {1}, {1}, {0, 1, 2, 4, 7, 8, 16, 24, 25, 28, 32, 56}})
    ->ArgsProduct({{kRetrievalBudget + 1}, {0}, {1}, {0, 1, 2, 4, 7}})
    ->ArgsProduct({{kRetrievalBudget + 3}, {1}, {3}, {0, 1, 2, 4, 7}})
    ->ArgsProduct({{kRetrievalBudget + 3}, {0}, {3}, {0, 1, 2, 4, 7}})
    ->ArgsProduct({{kRetrievalBudget + kGamma}, {1}, {kGamma}, {0, 1, 2, 4, 7, 8, 16, 24, 28}})
    ->ArgsProduct({{kRetrievalBudget + kGamma}, {0}, {kGamma}, {0, 1, 2, 4, 7}})
    ->UseManualTime()->Unit(benchmark::kMillisecond)->Apply(fixed_steps);
// Arguments: tokens, attention backend (0 ours, 1 cuDNN), chunk, gemm (0 cublas, 1 lt, 2 tuned, 3 auto),
// stacked prefill GEMMs (TRIFORCE_PREFILL_STACKED: 0 off, 1 on).
BENCHMARK(BM_Prefill7B)
    ->Args({8192, 0, 2048, 0, 0})->Args({32768, 0, 2048, 0, 0})->Args({32768, 1, 2048, 0, 0})->Args({32768, 1, 8192, 0, 0})
    ->Args({131072, 0, 2048, 0, 0})->Args({131072, 1, 2048, 0, 0})->Args({131072, 1, 8192, 0, 0})
    ->Args({131072, 1, 8192, 2, 0})->Args({131072, 0, 8192, 2, 0})
    // issue 18's A/B: each switch alone, then all, at chunk 8192 and 16384
    ->Args({131072, 1, 8192, 3, 0})->Args({131072, 1, 8192, 0, 1})->Args({131072, 1, 8192, 3, 1})
    ->Args({131072, 1, 16384, 0, 0})->Args({131072, 1, 16384, 3, 1})
    ->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_Prefill8B_GQA)
    ->Args({131072, 0, 2048, 0, 0})->Args({131072, 1, 2048, 0, 0})->Args({131072, 1, 8192, 0, 0})
    ->Args({131072, 1, 8192, 2, 0})->Args({131072, 1, 8192, 3, 1})
    ->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_Decode8B_GQA)->ArgsProduct({{32768, 131072}, {1, 0}})->UseManualTime()->Unit(benchmark::kMillisecond)->Apply(fixed_steps);
BENCHMARK(BM_DraftStep68M)->ArgsProduct({{kDraftCache}, {1, 0}, {0, 1, 2, 4, 7, 25, 33, 57}})->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(fixed_steps);
BENCHMARK(BM_Step135M)->ArgsProduct({{256, 6478}, {1, 0}, {0, 1, 2, 4, 7, 9, 17, 25, 33, 57}})->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(fixed_steps);
BENCHMARK(BM_Verify135M)->ArgsProduct({{256, 6478}, {1, 0}, {3, 5}, {0, 1, 2, 4, 7, 25, 33, 57}})->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(fixed_steps);
BENCHMARK(BM_DraftVerify68M)->ArgsProduct({{kDraftCache}, {1, 0}, {3, 5}, {0, 1, 2, 4, 7, 25, 33, 57}})->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(fixed_steps);
// Arguments: context, tokens.
// Arguments: context, k (draft tokens a proposal), chained (1) or k calls (0).
BENCHMARK(BM_GreedyChain68M)->ArgsProduct({{kDraftCache}, {4, 8}, {0, 1}})->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(fixed_steps);
BENCHMARK(BM_GreedyChain135M)->ArgsProduct({{256, 6478}, {4}, {0, 1}})->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(fixed_steps);
BENCHMARK(BM_Phases135M)->ArgsProduct({{256, 6478}, {1, 5}})->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(20);
BENCHMARK(BM_Phases68M)->ArgsProduct({{kDraftCache}, {1, 5}})->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(20);
BENCHMARK(BM_PersistentBarrier)->ArgsProduct({{1, 2}, {0, 1}})->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(3);

BENCHMARK_MAIN();
