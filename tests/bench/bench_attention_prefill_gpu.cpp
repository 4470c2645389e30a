// Causal prefill attention on the GPU (Google Benchmark, manual CUDA-event
// time after warm-up): one layer's attention over a whole prompt of n tokens
// (queries = all n slots of the KV), in ms and TFLOPS of matrix work (the
// causal QK^T and PV products, attention_prefill_flops: 2·2·H·D·L²/2 for a
// whole prompt), and as a fraction of the H200's dense fp16/bf16 peak of 989
// TFLOPS. TFLOPS and frac_of_peak use the median iteration (ms_median).
// Shapes: Llama-2-7B (32 heads, MHA) and Llama-3.1-8B (32/8 GQA), head_dim
// 128, f16 and bf16, on every backend side by side: config 6 = mma.sync
// (kPrefillMma), 7 = wgmma with 2 K/V stages (kPrefillWgmma), 8 = wgmma with 3
// stages, 9 = cuDNN's fused attention (kPrefillCudnn), 10 = our default kernel
// (kPrefillOurs); 1..5 mma.sync tile variants.
// BM_AttentionPrefill args: length, kv heads, bf16?, config (attention_prefill_config).
// BM_AttentionPrefillChunked runs what the model's prefill runs for one layer:
// the prompt in chunks of C queries, each after every earlier chunk's keys
// (n = C, kv_length = C, 2C, ..., L), with counters for cuDNN's graph building
// on a cold cache (plan_s_cold: the warm-up's first pass; graphs: how many).
// Args: length, kv heads, config (kPrefillOurs or kPrefillCudnn), chunk.
// BM_AttentionPrefillCudnnConfigs times every engine configuration cuDNN lists for
// the chunk shapes (attention_prefill_cudnn_candidates: the heuristics' list and
// the single-knob variations of its first entry) on the same chunked layer, after
// the default path (the heuristics' choice, dynamic shapes), and checks each
// one's output against the default's (bf16 tolerance). It prints one line per
// configuration ("cudnn_config <len> <kv heads> <chunk> <tag> <ms> <TFLOPS> <max_abs_diff>")
// and the best one's tag as the label: the value to try as TRIFORCE_CUDNN_ATTN_CONFIG.
// Args: length, kv heads, chunk.
// The issue-18 set in about a minute: --benchmark_filter='BM_AttentionPrefill(Chunked)?/[0-9]+/(32|8)/(1/)?(9|10)(/|$)'
#include <benchmark/benchmark.h>

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include "bench_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention_prefill.cuh"
#include "attention_prefill_cudnn.cuh"
#include "device_buffer.cuh"

namespace {

constexpr double kPeakFlops = 989e12;  // H200 dense fp16/bf16 tensor peak (datasheet)

// Random 16-bit values in [-1, 1) of dtype t: one 16 MB random block, repeated over the buffer
// (drawing gigabytes on the host would take longer than the benchmark).
void fill_random(tf::cuda::DeviceBuffer& b, tf::DType t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> h(std::min<size_t>(b.bytes() / 2, size_t(8) << 20));
  for (auto& x : h) x = tf::cuda::to_half_bits(u(rng), t);
  auto* dst = static_cast<char*>(b.get());
  for (size_t at = 0; at < b.bytes(); at += h.size() * 2) {
    const size_t n = std::min(h.size() * 2, b.bytes() - at);
    cudaMemcpy(dst + at, h.data(), n, cudaMemcpyHostToDevice);
  }
}

using tf::bench::have_device;

const char* config_name(int config) {
  return config == tf::cuda::kPrefillWgmma    ? "wgmma"
         : config == tf::cuda::kPrefillWgmma3 ? "wgmma 3 stages"
         : config == tf::cuda::kPrefillMma    ? "mma"
         : config == tf::cuda::kPrefillCudnn  ? "cudnn"
         : config == tf::cuda::kPrefillOurs   ? "ours"
                                              : "mma variant";
}

bool config_available(benchmark::State& state, int config, int64_t hd) {
  if ((config == tf::cuda::kPrefillWgmma || config == tf::cuda::kPrefillWgmma3) &&
      !tf::cuda::attention_prefill_wgmma_available(hd)) {
    state.SkipWithError("wgmma kernel unavailable (needs an sm_90 device and a build with CUDA arch 90)");
    return false;
  }
  if (config == tf::cuda::kPrefillCudnn && !tf::cuda::cudnn_attention_available()) {
    state.SkipWithError(("cuDNN unavailable: " + tf::cuda::cudnn_attention_version()).c_str());
    return false;
  }
  return true;
}

// Times run() per iteration with CUDA events; TFLOPS from the median iteration.
template <class F>
void time_iterations(benchmark::State& state, double flops, F run) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> ms;
  for (auto _ : state) {
    cudaEventRecord(e0);
    run();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    state.SetIterationTime(double(t) / 1e3);
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  const double med = ms.empty() ? 0.0 : ms[ms.size() / 2];
  state.counters["ms_median"] = med;
  state.counters["TFLOPS"] = med > 0 ? flops / (med / 1e3) / 1e12 : 0.0;
  state.counters["frac_of_peak"] = med > 0 ? flops / (med / 1e3) / kPeakFlops : 0.0;
}

void BM_AttentionPrefill(benchmark::State& state) {
  if (!have_device(state)) return;
  const int64_t n = state.range(0), kv_heads = state.range(1);
  const auto dt = state.range(2) ? tf::DType::BF16 : tf::DType::F16;
  const int config = int(state.range(3));
  const int64_t heads = 32, hd = 128;
  const size_t kv_bytes = size_t(kv_heads * n * hd * 2), q_bytes = size_t(n * heads * hd * 2);
  tf::cuda::DeviceBuffer k(kv_bytes), v(kv_bytes), q(q_bytes), out(q_bytes);
  fill_random(k, dt, 1), fill_random(v, dt, 2), fill_random(q, dt, 3);

  tf::cuda::AttentionPrefillParams p;
  p.q = q.get();
  p.k_cache = k.get();
  p.v_cache = v.get();
  p.out = out.get();
  p.n = n;
  p.kv_length = n;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = hd;
  p.capacity = n;
  p.dtype = dt;

  if (!config_available(state, config, hd)) return;
  state.SetLabel(config_name(config));
  for (int i = 0; i < 2; ++i) tf::cuda::attention_prefill_config(p, config);  // warm-up (cuDNN plans here)
  cudaDeviceSynchronize();
  const double flops = tf::cuda::attention_prefill_flops(p);
  time_iterations(state, flops, [&] { tf::cuda::attention_prefill_config(p, config); });
}

// The chunked calls of one layer of a len-token prefill (bf16, 32 heads of 128): n = chunk queries each
// after every earlier chunk's keys (kv_length = chunk, 2 chunk, ..., len), and their causal FLOPs.
std::vector<tf::cuda::AttentionPrefillParams> chunk_calls(const tf::cuda::DeviceBuffer& q,
                                                           const tf::cuda::DeviceBuffer& k,
                                                           const tf::cuda::DeviceBuffer& v, tf::cuda::DeviceBuffer& out,
                                                           int64_t len, int64_t kv_heads, int64_t chunk,
                                                           double* flops) {
  std::vector<tf::cuda::AttentionPrefillParams> calls;
  *flops = 0;
  for (int64_t end = std::min(chunk, len);; end = std::min(end + chunk, len)) {
    tf::cuda::AttentionPrefillParams p;
    p.q = q.get(), p.k_cache = k.get(), p.v_cache = v.get(), p.out = out.get();
    p.n = end - (calls.empty() ? 0 : calls.back().kv_length);
    p.kv_length = end, p.num_heads = 32, p.num_kv_heads = kv_heads, p.head_dim = 128, p.capacity = len;
    p.dtype = tf::DType::BF16;
    calls.push_back(p);
    *flops += tf::cuda::attention_prefill_flops(p);
    if (end == len) break;
  }
  return calls;
}

// One layer of the chunked prefill: chunks of `chunk` queries over a cache of `len` slots.
void BM_AttentionPrefillChunked(benchmark::State& state) {
  if (!have_device(state)) return;
  const int64_t len = state.range(0), kv_heads = state.range(1), chunk = state.range(3);
  const int config = int(state.range(2));
  const auto dt = tf::DType::BF16;
  const int64_t heads = 32, hd = 128;
  if (!config_available(state, config, hd)) return;
  const size_t kv_bytes = size_t(kv_heads * len * hd * 2), q_bytes = size_t(chunk * heads * hd * 2);
  tf::cuda::DeviceBuffer k(kv_bytes), v(kv_bytes), q(q_bytes), out(q_bytes);
  fill_random(k, dt, 1), fill_random(v, dt, 2), fill_random(q, dt, 3);
  double flops = 0;
  const auto calls = chunk_calls(q, k, v, out, len, kv_heads, chunk, &flops);
  const auto before = tf::cuda::cudnn_attention_stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& p : calls) tf::cuda::attention_prefill_config(p, config);  // warm-up: cuDNN builds its graphs
  cudaDeviceSynchronize();
  const double cold_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto after = tf::cuda::cudnn_attention_stats();
  state.SetLabel(std::string(config_name(config)) + " chunk " + std::to_string(chunk));
  time_iterations(state, flops, [&] {
    for (const auto& p : calls) tf::cuda::attention_prefill_config(p, config);
  });
  state.counters["calls"] = double(calls.size());
  state.counters["first_pass_s"] = cold_s;
  state.counters["plan_s_cold"] = after.plan_seconds - before.plan_seconds;
  state.counters["graphs"] = double(after.graphs_built - before.graphs_built);
  state.counters["graphs_dynamic"] = double(after.graphs_dynamic - before.graphs_dynamic);
}

std::vector<uint16_t> download_bits(const tf::cuda::DeviceBuffer& b) {
  std::vector<uint16_t> h(b.bytes() / 2);
  cudaMemcpy(h.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost);
  return h;
}

void BM_AttentionPrefillCudnnConfigs(benchmark::State& state) {
  if (!have_device(state) || !config_available(state, tf::cuda::kPrefillCudnn, 128)) return;
  const int64_t len = state.range(0), kv_heads = state.range(1), chunk = state.range(2);
  const auto dt = tf::DType::BF16;
  const size_t kv_bytes = size_t(kv_heads * len * 128 * 2), q_bytes = size_t(chunk * 32 * 128 * 2);
  tf::cuda::DeviceBuffer k(kv_bytes), v(kv_bytes), q(q_bytes), out(q_bytes);
  fill_random(k, dt, 1), fill_random(v, dt, 2), fill_random(q, dt, 3);
  double flops = 0;
  const auto calls = chunk_calls(q, k, v, out, len, kv_heads, chunk, &flops);
  // The last call's output (a whole chunk's rows) is what each configuration is checked on.
  auto median_ms = [&](auto run) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int r = 0; r < 3; ++r) {
      cudaEventRecord(e0);
      run();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      ms.push_back(t);
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    std::sort(ms.begin(), ms.end());
    return double(ms[1]);
  };
  auto to_float = [](uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  const std::string chosen = tf::cuda::attention_prefill_cudnn_config(calls.back());
  for (const auto& p : calls) tf::cuda::attention_prefill_config(p, tf::cuda::kPrefillCudnn);  // warm-up
  cudaDeviceSynchronize();
  const auto reference = download_bits(out);
  const double default_ms =
      median_ms([&] { for (const auto& p : calls) tf::cuda::attention_prefill_config(p, tf::cuda::kPrefillCudnn); });
  const double tf_default = flops / (default_ms / 1e3) / 1e12;
  std::printf("cudnn_config %lld %lld %lld default(%s) %.3f %.1f 0\n", (long long)len, (long long)kv_heads,
              (long long)chunk, chosen.c_str(), default_ms, tf_default);
  std::string best_tag = "default";
  double best_ms = default_ms;
  int built = 0, listed = 0, wrong = 0;
  for (const auto& tag : tf::cuda::attention_prefill_cudnn_candidates(calls.back())) {
    ++listed;
    bool ok = true;
    for (const auto& p : calls) ok = ok && tf::cuda::attention_prefill_cudnn_with(p, tag);  // builds; the warm-up
    cudaDeviceSynchronize();
    if (!ok) {
      std::printf("cudnn_config %lld %lld %lld %s refused\n", (long long)len, (long long)kv_heads, (long long)chunk,
                  tag.c_str());
      continue;
    }
    ++built;
    const auto got = download_bits(out);
    double max_diff = 0;
    bool close = true;
    for (size_t i = 0; i < got.size(); ++i) {
      const float g = to_float(got[i]), r = to_float(reference[i]);
      const float d = std::fabs(g - r);
      if (!(d <= 1.6e-2f + 3.2e-2f * std::fabs(r))) close = false;
      if (std::isfinite(d)) max_diff = std::max<double>(max_diff, d);
    }
    const double ms = median_ms([&] { for (const auto& p : calls) tf::cuda::attention_prefill_cudnn_with(p, tag); });
    std::printf("cudnn_config %lld %lld %lld %s %.3f %.1f %.3g%s\n", (long long)len, (long long)kv_heads,
                (long long)chunk, tag.c_str(), ms, flops / (ms / 1e3) / 1e12, max_diff, close ? "" : " MISMATCH");
    if (!close) ++wrong;
    if (close && ms < best_ms) best_ms = ms, best_tag = tag;
  }
  std::fflush(stdout);
  for (auto _ : state) state.SetIterationTime(best_ms / 1e3);
  state.SetLabel(best_tag);
  state.counters["default_TFLOPS"] = tf_default;
  state.counters["best_TFLOPS"] = flops / (best_ms / 1e3) / 1e12;
  state.counters["best_gain"] = default_ms / best_ms;
  state.counters["configs_listed"] = listed;
  state.counters["configs_built"] = built;
  state.counters["configs_mismatched"] = wrong;
}
BENCHMARK(BM_AttentionPrefillCudnnConfigs)
    ->Args({32768, 32, 8192})
    ->Args({32768, 32, 32768})
    ->Args({131072, 32, 8192})
    ->Args({131072, 8, 8192})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void Shapes(benchmark::internal::Benchmark* b) {
  // Issue 18: ours vs cuDNN, bf16, MHA 32/32 and GQA 32/8, at 32K, 64K and 128K.
  for (int64_t config : {tf::cuda::kPrefillOurs, tf::cuda::kPrefillCudnn})
    for (int64_t kv : {32, 8})
      for (int64_t len : {32768, 65536, 131072}) b->Args({len, kv, 1, config});
  b->Args({32768, 32, 0, tf::cuda::kPrefillCudnn});  // f16
  for (int64_t config : {tf::cuda::kPrefillMma, tf::cuda::kPrefillWgmma}) {
    for (int64_t bf16 : {0, 1})
      for (int64_t len : {8192, 32768, 131072}) b->Args({len, 32, bf16, config});
    b->Args({131072, 8, 1, config});
  }
  b->Args({32768, 32, 0, tf::cuda::kPrefillWgmma3});
  b->Args({131072, 32, 1, tf::cuda::kPrefillWgmma3});
  for (int64_t config = 1; config <= 5; ++config) b->Args({32768, 32, 0, config});  // mma.sync tile variants
}
BENCHMARK(BM_AttentionPrefill)->Apply(Shapes)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

void ChunkedShapes(benchmark::internal::Benchmark* b) {
  for (int64_t config : {tf::cuda::kPrefillOurs, tf::cuda::kPrefillCudnn})
    for (int64_t kv : {32, 8})
      for (int64_t chunk : {2048, 8192}) b->Args({131072, kv, config, chunk});
  for (int64_t config : {tf::cuda::kPrefillOurs, tf::cuda::kPrefillCudnn}) b->Args({32768, 32, config, 2048});
}
BENCHMARK(BM_AttentionPrefillChunked)->Apply(ChunkedShapes)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
#endif

BENCHMARK_MAIN();
