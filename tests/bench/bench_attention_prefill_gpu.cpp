// Causal prefill attention on the GPU (Google Benchmark, manual CUDA-event
// time after warm-up): one layer's attention over a whole prompt of n tokens
// (queries = all n slots of the KV), in ms and TFLOPS of matrix work (the
// causal QK^T and PV products, attention_prefill_flops), and as a fraction of
// the H200's dense fp16/bf16 peak of 989 TFLOPS. Shapes: Llama-2-7B (32 heads,
// MHA) and Llama-3.1-8B (32/8 GQA), head_dim 128, f16 and bf16, on both
// kernels side by side: config 6 = mma.sync (kPrefillMma), 7 = wgmma with 2
// K/V stages (kPrefillWgmma), 8 = wgmma with 3 stages; 1..5 mma.sync tile
// variants. Args: length, kv heads, bf16?, config (attention_prefill_config).
#include <benchmark/benchmark.h>

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <vector>

#include "attention_prefill.cuh"
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

void BM_AttentionPrefill(benchmark::State& state) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    state.SkipWithError("no CUDA device");
    return;
  }
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

  if ((config == tf::cuda::kPrefillWgmma || config == tf::cuda::kPrefillWgmma3) &&
      !tf::cuda::attention_prefill_wgmma_available(hd)) {
    state.SkipWithError("wgmma kernel unavailable (needs an sm_90 device and a build with CUDA arch 90)");
    return;
  }
  state.SetLabel(config == tf::cuda::kPrefillWgmma    ? "wgmma"
                 : config == tf::cuda::kPrefillWgmma3 ? "wgmma 3 stages"
                 : config == tf::cuda::kPrefillMma    ? "mma"
                                                      : "mma variant");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 2; ++i) tf::cuda::attention_prefill_config(p, config);  // warm-up
  cudaDeviceSynchronize();
  for (auto _ : state) {
    cudaEventRecord(e0);
    tf::cuda::attention_prefill_config(p, config);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(double(ms) / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  const double flops = tf::cuda::attention_prefill_flops(p);
  state.counters["TFLOPS"] = benchmark::Counter(flops / 1e12 * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["frac_of_peak"] =
      benchmark::Counter(flops / kPeakFlops * double(state.iterations()), benchmark::Counter::kIsRate);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t config : {tf::cuda::kPrefillMma, tf::cuda::kPrefillWgmma}) {
    for (int64_t bf16 : {0, 1})
      for (int64_t len : {8192, 32768, 131072}) b->Args({len, 32, bf16, config});
    b->Args({131072, 8, 1, config});
  }
  b->Args({32768, 32, 0, tf::cuda::kPrefillWgmma3});
  b->Args({131072, 32, 1, tf::cuda::kPrefillWgmma3});
  for (int64_t config = 1; config <= 5; ++config) b->Args({32768, 32, 0, config});  // mma.sync tile variants
}
BENCHMARK(BM_AttentionPrefill)->Apply(Shapes)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
#endif

BENCHMARK_MAIN();
