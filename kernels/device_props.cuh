// The current device's properties that launch code sizes grids by, and a pair
// of CUDA events timing what a stream runs between them. Plain C++ over the
// runtime: host code of any .cu or .cpp may use it.
#pragma once
#include <cuda_runtime.h>

#include "common.cuh"

namespace tf::cuda {

// Streaming multiprocessors of the current device (at least 1).
inline int current_sm_count() {
  int dev = 0, c = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev));
  return c > 0 ? c : 1;
}

// The current device's compute capability, major part (9 on Hopper).
inline int current_cc_major() {
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major;
}

// start(), the work, stop(): microseconds between the two on the stream.
class EventTimer {
 public:
  EventTimer() {
    CUDA_CHECK(cudaEventCreate(&a_));
    CUDA_CHECK(cudaEventCreate(&b_));
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  void start(cudaStream_t s = nullptr) { CUDA_CHECK(cudaEventRecord(a_, s)); }
  // Records the end, waits for it, and returns the microseconds since start().
  double stop_us(cudaStream_t s = nullptr) {
    CUDA_CHECK(cudaEventRecord(b_, s));
    CUDA_CHECK(cudaEventSynchronize(b_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
    return double(ms) * 1e3;
  }

 private:
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

}  // namespace tf::cuda
