// What one synchronisation between two dependent phases of a batch-1 step
// costs on this GPU (kernels/sync_latency.cuh; issue 17): the floor each
// design of a small-model step pays per phase. A SmolLM2 step has about 7
// dependent phases a layer; the persistent step's grid barrier is
// BM_PersistentBarrier in bench_model_gpu. Manual time = us per sync.
//   BM_KernelBoundary/kernels/blocks/pdl/graph: a chain of dependent launches
//   BM_ClusterBarrier/cluster: barrier.cluster with a DSMEM handoff a round
//   BM_FlagHandoff: a release/acquire flag from one SM to another
#include <benchmark/benchmark.h>

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include "sync_latency.cuh"
#endif

namespace {

#ifdef TRIFORCE_HAVE_CUDA
bool have_device(benchmark::State& state) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    state.SkipWithError("no CUDA device");
    return false;
  }
  return true;
}
#endif

void BM_KernelBoundary(benchmark::State& state) {
#ifdef TRIFORCE_HAVE_CUDA
  if (!have_device(state)) return;
  double us = 0;
  for (auto _ : state) {
    us = tf::cuda::kernel_boundary_us(int(state.range(0)), int(state.range(1)), state.range(2) == 1,
                                      state.range(3) == 1);
    state.SetIterationTime(us * 1e-6);
  }
  state.counters["us_per_sync"] = us;
#else
  state.SkipWithError("built without CUDA");
#endif
}
// 132 blocks: one an SM on an H100/H200, as a step's GEMV grids are.
BENCHMARK(BM_KernelBoundary)
    ->ArgsProduct({{256}, {1, 132}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

void BM_ClusterBarrier(benchmark::State& state) {
#ifdef TRIFORCE_HAVE_CUDA
  if (!have_device(state)) return;
  double us = 0;
  for (auto _ : state) {
    us = tf::cuda::cluster_barrier_us(int(state.range(0)), 10000);
    if (us < 0) {
      state.SkipWithError("clusters of this size do not run here");
      return;
    }
    state.SetIterationTime(us * 1e-6);
  }
  state.counters["us_per_sync"] = us;
#else
  state.SkipWithError("built without CUDA");
#endif
}
BENCHMARK(BM_ClusterBarrier)
    ->Arg(2)->Arg(4)->Arg(8)->Arg(16)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

void BM_FlagHandoff(benchmark::State& state) {
#ifdef TRIFORCE_HAVE_CUDA
  if (!have_device(state)) return;
  double us = 0;
  for (auto _ : state) {
    us = tf::cuda::flag_handoff_us(10000);
    state.SetIterationTime(us * 1e-6);
  }
  state.counters["us_per_sync"] = us;
#else
  state.SkipWithError("built without CUDA");
#endif
}
BENCHMARK(BM_FlagHandoff)->UseManualTime()->Unit(benchmark::kMicrosecond)->Repetitions(5)->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
