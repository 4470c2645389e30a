#include "stream.cuh"

#include "common.cuh"

namespace tf::cuda {

// A created stream per device (graph capture cannot record the legacy default
// stream). It is a blocking stream on purpose: anything still launched on the
// legacy stream (tests, one-off setup) stays ordered with it, so only the
// forward path has to name it.
cudaStream_t compute_stream() {
  static cudaStream_t streams[64] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (!streams[dev & 63]) CUDA_CHECK(cudaStreamCreateWithFlags(&streams[dev & 63], cudaStreamDefault));
  return streams[dev & 63];
}

}  // namespace tf::cuda
