// ops::softmax_top_p on the GPU against its CPU body (Google Benchmark,
// after warm-up, 5 repetitions: read the median): rows of normal(0, 3)
// logits, vocab 32000 (Llama 2) and 128256 (Llama 3), n = 1 and 8 rows,
// top_p 0.9 (filtering) and 1 (temperature softmax only). The GPU time is
// CUDA events around the launch; the CPU time is the host body's wall time.
// Args: device (0 = cpu, 1 = cuda), vocab, n, top_p x 100.
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "ops/ops.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using tf::Device;
using tf::DType;
using tf::Tensor;

void BM_SoftmaxTopP(benchmark::State& state) {
  const bool cuda = state.range(0) == 1;
  const int64_t V = state.range(1), n = state.range(2);
  const float top_p = float(state.range(3)) / 100.0f;
#ifdef TRIFORCE_HAVE_CUDA
  int ndev = 0;
  if (cuda && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)) {
    cudaGetLastError();
    state.SkipWithError("no CUDA device");
    return;
  }
#else
  if (cuda) {
    state.SkipWithError("built without CUDA");
    return;
  }
#endif
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(size_t(n * V));
  for (auto& v : x) v = d(g);
  const Device dev = cuda ? Device::CUDA : Device::CPU;
  Tensor l = tf::empty_tensor(dev, DType::F32, {n, V}), p = tf::empty_tensor(dev, DType::F32, {n, V});
  tf::copy_bytes(l.data, dev, x.data(), Device::CPU, x.size() * 4);
  const tf::ops::SoftmaxParams sp{1.0f, top_p, 1};
  tf::ops::softmax_top_p(l, p, sp);  // warm-up
#ifdef TRIFORCE_HAVE_CUDA
  cudaEvent_t e0, e1;
  if (cuda) {
    cudaDeviceSynchronize();
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
  }
#endif
  for (auto _ : state) {
#ifdef TRIFORCE_HAVE_CUDA
    if (cuda) {
      cudaEventRecord(e0);
      tf::ops::softmax_top_p(l, p, sp);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      state.SetIterationTime(double(ms) / 1e3);
      continue;
    }
#endif
    const auto t0 = std::chrono::steady_clock::now();
    tf::ops::softmax_top_p(l, p, sp);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
#ifdef TRIFORCE_HAVE_CUDA
  if (cuda) {
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
#endif
  state.SetLabel(cuda ? "cuda" : "cpu");
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t dev : {1, 0})
    for (int64_t V : {32000, 128256})
      for (int64_t n : {1, 8})
        for (int64_t tp : {90, 100}) b->Args({dev, V, n, tp});
}
BENCHMARK(BM_SoftmaxTopP)
    ->ArgNames({"cuda", "vocab", "n", "top_p_x100"})
    ->Apply(Shapes)
    ->UseManualTime()
    ->MinTime(0.05)
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
