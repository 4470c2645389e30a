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
#include "bench_device.h"
#include "sync_latency.cuh"
#endif

namespace {

// Runs probe() (us per sync; negative: not possible here) once an iteration.
template <class Probe> void time_probe(benchmark::State& state, Probe probe) {
#ifdef TRIFORCE_HAVE_CUDA
  if (!tf::bench::have_device(state)) return;
  double us = 0;
  for (auto _ : state) {
    us = probe();
    if (us < 0) {
      state.SkipWithError("not possible on this GPU or build");
      return;
    }
    state.SetIterationTime(us * 1e-6);
  }
  state.counters["us_per_sync"] = us;
#else
  (void)probe;
  state.SkipWithError("built without CUDA");
#endif
}

#ifdef TRIFORCE_HAVE_CUDA
using tf::cuda::cluster_barrier_us;
using tf::cuda::flag_handoff_us;
using tf::cuda::kernel_boundary_us;
#else
double cluster_barrier_us(int, int) { return -1; }
double flag_handoff_us(int) { return -1; }
double kernel_boundary_us(int, int, bool, bool) { return -1; }
#endif

void BM_KernelBoundary(benchmark::State& state) {
  time_probe(state, [&] {
    return kernel_boundary_us(int(state.range(0)), int(state.range(1)), state.range(2) == 1, state.range(3) == 1);
  });
}
// 132 blocks: one an SM on an H100/H200, as a step's GEMV grids are.
BENCHMARK(BM_KernelBoundary)
    ->ArgsProduct({{256}, {1, 132}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(5)  // each probe averages thousands of syncs and builds its own streams: a fixed count
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

void BM_ClusterBarrier(benchmark::State& state) {
  time_probe(state, [&] { return cluster_barrier_us(int(state.range(0)), 10000); });
}
BENCHMARK(BM_ClusterBarrier)
    ->Arg(2)->Arg(4)->Arg(8)->Arg(16)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(5)  // each probe averages thousands of syncs and builds its own streams: a fixed count
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

void BM_FlagHandoff(benchmark::State& state) {
  time_probe(state, [] { return flag_handoff_us(10000); });
}
BENCHMARK(BM_FlagHandoff)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(5)->Repetitions(5)->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
