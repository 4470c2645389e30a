#include "stream.cuh"

namespace tf::cuda {

// The legacy default stream for now: every launcher still defaults to it.
cudaStream_t compute_stream() { return 0; }

}  // namespace tf::cuda
