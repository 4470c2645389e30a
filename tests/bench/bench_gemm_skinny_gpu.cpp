// The skinny GEMM on the GPU (Google Benchmark, CUDA-event time after
// warm-up, 5 repetitions: read the median), every variant against cuBLAS,
// on the Llama-2-7B shapes in bf16 for n = 1, 2, 7, 8, 16, 32 rows. Reported
// as weight GB/s and as a fraction of the measured 4.22 TB/s H200 HBM read
// peak (x and y are a rounding error at these sizes). Weights rotate through
// enough copies (>= 512 MB) that every call reads them from HBM, not the
// 50 MB L2. BM_Skinny7BLinears times every linear of one 7B step (32 layers
// + lm_head, 13.2 GB) back to back: the GEMM part of a decode step (n = 1)
// and of a 7-token verification (n = 7).
// Args: variant (0..3 = tf::cuda::SkinnyVariant, -1 = cuBLAS), shape, n.
#include <benchmark/benchmark.h>

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include "bench_device.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "device_buffer.cuh"
#include "gemm.cuh"
#include "gemm_skinny.cuh"

namespace {

constexpr double kPeakBytesPerS = 4.22e12;  // measured H200 HBM read (results/h200)
constexpr int kCublas = -1;

struct Shape {
  const char* name;
  int64_t out, in;
  bool f32_out;
};
// q/k/v stacked, o, gate/up stacked, down, lm_head (f32 logits).
const Shape kShapes[] = {{"qkv", 12288, 4096, false},
                         {"o", 4096, 4096, false},
                         {"gate_up", 22016, 4096, false},
                         {"down", 4096, 11008, false},
                         {"lm_head", 32000, 4096, true}};
constexpr int kLayers = 32;

using tf::bench::have_device;

void linear(int variant, const void* x, const void* w, void* y, int64_t n, const Shape& s) {
  const tf::DType yt = s.f32_out ? tf::DType::F32 : tf::DType::BF16;
  if (variant == kCublas) {
    tf::cuda::GemmParams p;
    p.x = x, p.w = w, p.y = y, p.n = n, p.in = s.in, p.out = s.out, p.dtype = tf::DType::BF16, p.y_dtype = yt;
    tf::cuda::gemm(p);
    return;
  }
  tf::cuda::SkinnyGemmParams p;
  p.x = x, p.w = w, p.y = y, p.n = n, p.in = s.in, p.out = s.out, p.dtype = tf::DType::BF16, p.y_dtype = yt;
  p.variant = variant;
  tf::cuda::gemm_skinny(p);
}

std::string label(int variant) {
  return variant == kCublas ? "cublas" : tf::cuda::skinny_variant_name(tf::cuda::SkinnyVariant(variant));
}

void report(benchmark::State& state, double bytes, int variant) {
  state.SetBytesProcessed(int64_t(bytes) * state.iterations());
  state.counters["frac_of_peak"] =
      benchmark::Counter(bytes / kPeakBytesPerS * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["GBps"] = benchmark::Counter(bytes / 1e9 * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(label(variant));
}

// Times `body` kBatch times back to back per iteration (as in a step, where
// the next launch is queued before this one ends), reported per call.
template <class F>
void time_calls(benchmark::State& state, int batch, F&& body) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) body(i);  // warm-up (and cuBLAS's heuristics)
  cudaDeviceSynchronize();
  size_t it = 0;
  for (auto _ : state) {
    cudaEventRecord(e0);
    for (int b = 0; b < batch; ++b) body(it++);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(double(ms) / 1e3 / batch);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("CUDA error");
}

void BM_SkinnyGemm(benchmark::State& state) {
  if (!have_device(state)) return;
  const int variant = int(state.range(0));
  const Shape& s = kShapes[state.range(1)];
  const int64_t n = state.range(2);
  const size_t wbytes = size_t(s.out * s.in * 2);
  const size_t copies = std::max<size_t>(2, ((size_t(512) << 20) + wbytes - 1) / wbytes);
  std::vector<tf::cuda::DeviceBuffer> ws;
  for (size_t c = 0; c < copies; ++c) {
    ws.emplace_back(wbytes);
    cudaMemset(ws.back().get(), 0x3c, wbytes);  // finite bf16 values; timing does not depend on them
  }
  tf::cuda::DeviceBuffer x(size_t(n * s.in * 2)), y(size_t(n * s.out * 4));
  cudaMemset(x.get(), 0x3c, x.bytes());
  time_calls(state, 10, [&](size_t it) { linear(variant, x.get(), ws[it % copies].get(), y.get(), n, s); });
  state.counters["n"] = double(n);
  report(state, double(wbytes), variant);
  state.SetLabel(label(variant) + " " + s.name);
}

void BM_Skinny7BLinears(benchmark::State& state) {
  if (!have_device(state)) return;
  const int variant = int(state.range(0));
  const int64_t n = state.range(1);
  // One buffer per weight of every layer, as the model holds them.
  std::vector<tf::cuda::DeviceBuffer> ws;
  double bytes = 0;
  for (int l = 0; l < kLayers; ++l)
    for (int k = 0; k < 4; ++k) {
      const size_t b = size_t(kShapes[k].out * kShapes[k].in * 2);
      ws.emplace_back(b);
      cudaMemset(ws.back().get(), 0x3c, b);
      bytes += double(b);
    }
  const Shape& head = kShapes[4];
  ws.emplace_back(size_t(head.out * head.in * 2));
  cudaMemset(ws.back().get(), 0x3c, ws.back().bytes());
  bytes += double(ws.back().bytes());
  tf::cuda::DeviceBuffer x(size_t(n * 11008 * 2)), y(size_t(n * 32000 * 4));
  cudaMemset(x.get(), 0x3c, x.bytes());
  time_calls(state, 1, [&](size_t) {
    for (int l = 0; l < kLayers; ++l)
      for (int k = 0; k < 4; ++k) linear(variant, x.get(), ws[size_t(l * 4 + k)].get(), y.get(), n, kShapes[k]);
    linear(variant, x.get(), ws.back().get(), y.get(), n, head);
  });
  state.counters["n"] = double(n);
  report(state, bytes, variant);
}

void Variants(benchmark::internal::Benchmark* b, bool per_shape) {
  for (int v = kCublas; v < tf::cuda::kSkinnyVariants; ++v)
    if (per_shape) {
      for (int64_t sh = 0; sh < int64_t(std::size(kShapes)); ++sh)
        for (int64_t n : {1, 2, 7, 8, 16, 32}) b->Args({v, sh, n});
    } else {
      for (int64_t n : {1, 7, 8, 32}) b->Args({v, n});
    }
}

BENCHMARK(BM_SkinnyGemm)
    ->ArgNames({"variant", "shape", "n"})
    ->Apply([](benchmark::internal::Benchmark* b) { Variants(b, true); })
    ->UseManualTime()
    ->MinTime(0.05)
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_Skinny7BLinears)
    ->ArgNames({"variant", "n"})
    ->Apply([](benchmark::internal::Benchmark* b) { Variants(b, false); })
    ->UseManualTime()
    ->MinTime(0.2)
    ->Unit(benchmark::kMillisecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

}  // namespace
#endif

BENCHMARK_MAIN();
