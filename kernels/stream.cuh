// The one stream every forward-pass launch and device copy goes on. A single
// ordered stream keeps eager runs simple and is what a CUDA graph captures;
// helpers that overlap work (the KV offload copy stream) order themselves
// against it with events.
#pragma once
#include <cuda_runtime.h>

namespace tf::cuda {

cudaStream_t compute_stream();

}  // namespace tf::cuda
