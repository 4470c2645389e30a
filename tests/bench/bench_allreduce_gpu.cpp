// The tensor-parallel collective of the 7B shape: one allreduce of a row-parallel
// output [rows, 4096] per o and down projection, so two per layer. Run under
// mpirun -np N with one GPU per rank (NCCL_NVLS_ENABLE=0); at N = 1 it measures
// NCCL's floor on one GPU. Every rank runs the same fixed iteration count (an
// adaptive count could differ between ranks and deadlock the collective); rank 0
// reports. Time: CUDA events around kBatch back-to-back allreduces on the
// model's compute stream, after warm-up; the median over iterations.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "parallel/launch.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/device.h"
#include "parallel/gpu_comm.h"
#include "stream.cuh"

using namespace tf;

namespace {

constexpr int64_t kHidden = 4096;  // Llama-2-7B
constexpr int kBatch = 32;         // allreduces per timed sample (one per row-parallel linear of 16 layers)
parallel::Communicator* g_comm = nullptr;

void BM_Allreduce(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const DType dt = state.range(1) == 0 ? DType::F32 : DType::BF16;
  Tensor t = empty_tensor(Device::CUDA, dt, {rows, kHidden});
  cudaMemset(t.data, 0, t.bytes());
  cudaStream_t s = cuda::compute_stream();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3 * kBatch; ++i) g_comm->allreduce_sum(t);  // warm-up
  cudaStreamSynchronize(s);
  std::vector<double> us;
  for (auto _ : state) {
    cudaEventRecord(e0, s);
    for (int i = 0; i < kBatch; ++i) g_comm->allreduce_sum(t);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(double(ms) * 1e-3 / kBatch);
    us.push_back(double(ms) * 1e3 / kBatch);
  }
  std::sort(us.begin(), us.end());
  const double med = us.empty() ? 0 : us[us.size() / 2];
  state.counters["allreduce_us"] = med;
  state.counters["per_layer_us"] = 2 * med;  // o and down
  state.counters["bytes"] = double(t.bytes());
  state.counters["ranks"] = g_comm->size();
  state.SetLabel(std::string(parallel::gpu_communicator_kind()) + (dt == DType::F32 ? " f32" : " bf16"));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace

// rows: a decode step, a verification of 7, a prefill chunk; dtype 0 = f32 (the model's partials), 1 = bf16
BENCHMARK(BM_Allreduce)
    ->ArgsProduct({{1, 7, 32, 2048}, {0, 1}})
    ->Iterations(50)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
#endif

int main(int argc, char** argv) {
  tf::parallel::init(&argc, &argv);
#ifndef TRIFORCE_HAVE_CUDA
  std::fprintf(stderr, "bench_allreduce_gpu: built without CUDA\n");
  tf::parallel::finalize();
  return 2;
#else
  try {
    auto comm = parallel::make_gpu_communicator();
    g_comm = comm.get();
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    comm.reset();
  } catch (const std::exception& e) {
    parallel::abort_all(e.what());
  }
  parallel::finalize();
  return 0;
#endif
}
