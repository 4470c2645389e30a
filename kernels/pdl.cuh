// Programmatic dependent launch (Hopper PDL) for the decode-path kernels.
//
// A kernel launched through launch_pdl may start while the kernel before it
// on the stream is still draining. It must therefore call pdl_wait() before
// it reads anything an earlier kernel wrote and before it writes anything an
// earlier kernel may still read; only loads of data no kernel writes (the
// weights) may come before. pdl_wait() returns once every earlier kernel has
// finished and its writes are visible, so the dependency stays transitive
// along the stream. Without the launch attribute (PDL off, the legacy
// stream, pre-Hopper devices) both instructions are no-ops.
//
// TRIFORCE_PDL=0 turns the attribute off for the whole process (the benchmark
// comparison); it is on by default on devices of compute capability >= 9.0.
#pragma once
#include <cuda_runtime.h>

#include "common.cuh"

namespace tf::cuda {

// TRIFORCE_PDL (read once per process) and the device's capability (sm_90+);
// set_pdl_enabled overrides the variable from then on (tests comparing PDL
// on and off in one process; graphs keep the launches they were recorded with).
bool pdl_enabled();
void set_pdl_enabled(bool on);

#if defined(__CUDACC__)
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// Lets the next kernel's blocks launch (they wait in pdl_wait); a block that
// never calls it counts as triggered when it exits.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic
// stream serialization attribute when PDL is on and the stream is a created
// one (the tests' legacy-stream launches stay plain). Works eagerly and under
// stream capture (the edge becomes a programmatic graph dependency).
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (stream != nullptr && pdl_enabled()) {
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}
#endif

}  // namespace tf::cuda
