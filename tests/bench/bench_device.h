// The GPU benchmarks' common guard: skip (not fail) a benchmark on a machine
// without a CUDA device, clearing the error the probe left.
#pragma once
#ifdef TRIFORCE_HAVE_CUDA
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

namespace tf::bench {

inline bool have_device(benchmark::State& state) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    state.SkipWithError("no CUDA device");
    return false;
  }
  return true;
}

}  // namespace tf::bench
#endif
