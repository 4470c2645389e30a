// How fast `blocks` SMs stream bytes (kernels/stream_bandwidth.cuh; issue 17):
// the per-SM rate a step confined to a thread block cluster (<= 16 SMs) would
// stream its weights at, against the whole GPU. Args: blocks (one an SM), mode
// (0: 16-byte register loads, 32 KB in flight an SM; 1: TMA bulk copies, 128 KB
// in flight), source (0: HBM, 1: L2, the region read once before). 2 MB a
// block from HBM; from L2 at most 32 MB in all. Manual time = the stream's.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>

#ifdef TRIFORCE_HAVE_CUDA
#include "bench_device.h"
#include "stream_bandwidth.cuh"
#endif

namespace {

void BM_Stream(benchmark::State& state) {
#ifdef TRIFORCE_HAVE_CUDA
  if (!tf::bench::have_device(state)) return;
  const int blocks = int(state.range(0));
  const bool l2 = state.range(2) == 1;
  constexpr int64_t kStage = 32 * 1024;
  const int64_t per_block = l2 ? std::max<int64_t>(kStage, (int64_t(32) << 20) / blocks / kStage * kStage)
                               : int64_t(2) << 20;
  double us = 0;
  for (auto _ : state) {
    us = tf::cuda::stream_us(blocks, per_block, tf::cuda::StreamMode(state.range(1)), l2);
    if (us < 0) {
      state.SkipWithError("bulk copies need sm_90");
      return;
    }
    state.SetIterationTime(us * 1e-6);
  }
  state.counters["bytes_per_sm"] = double(per_block);
  state.counters["GBps_per_sm"] = double(per_block) / us * 1e-3;
  state.counters["GBps_total"] = double(per_block) * blocks / us * 1e-3;
#else
  state.SkipWithError("built without CUDA");
#endif
}
BENCHMARK(BM_Stream)
    ->ArgsProduct({{1, 8, 16, 32, 66, 132}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(10)  // each probe allocates and fills its buffer: a fixed count, not a time target
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
