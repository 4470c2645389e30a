#include "sync_latency.cuh"

#include <cooperative_groups.h>

#include <cstdint>

#include "common.cuh"
#include "device_buffer.cuh"
#include "device_props.cuh"
#include "pdl.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 128;

// ---- kernel boundary ----
// Every block waits for the previous kernel (as every step kernel does); block
// 0 then increments the counter the previous kernel wrote: a real dependency.
__global__ void chain_kernel(unsigned* counter) {
  pdl_wait();
  pdl_trigger();
  if (blockIdx.x == 0 && threadIdx.x == 0) *counter = *counter + 1;
}

void launch_chain(unsigned* counter, int kernels, int blocks, bool pdl, cudaStream_t s) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  for (int k = 0; k < kernels; ++k) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(blocks));
    cfg.blockDim = dim3(kThreads);
    cfg.stream = s;
    const bool overlap = pdl && k > 0;  // the first follows a copy or an event: a plain launch
    cfg.attrs = overlap ? attr : nullptr;
    cfg.numAttrs = overlap ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, chain_kernel, counter));
  }
}

// ---- cluster barrier ----
// Round i: CTA r writes i * size + r into CTA r + 1's slot (distributed shared
// memory), then the cluster barrier (arrive.release, wait.acquire), then each
// CTA checks the word its predecessor handed it. Two slots alternate, so the
// write of round i + 1 never meets the read of round i, and one barrier a
// round suffices (the write of round i + 2 comes after barrier i + 1, which
// the reader reached only after its read of round i).
__global__ void cluster_kernel(int iters, unsigned* bad) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  __shared__ unsigned slot[2];
  cg::cluster_group cl = cg::this_cluster();
  const unsigned rank = cl.block_rank(), size = cl.num_blocks();
  unsigned* next = cl.map_shared_rank(slot, (rank + 1) % size);
  const unsigned from = (rank + size - 1) % size;
  if (threadIdx.x == 0) slot[0] = slot[1] = ~0u;
  cl.sync();
  unsigned errors = 0;
  for (int i = 0; i < iters; ++i) {
    if (threadIdx.x == 0) next[i & 1] = unsigned(i) * size + rank;
    cl.sync();
    if (threadIdx.x == 0) errors += slot[i & 1] != unsigned(i) * size + from;
  }
  cl.sync();  // no CTA exits while a neighbour may still write its shared memory
  if (threadIdx.x == 0 && errors) atomicAdd(bad, errors);
#else
  if (threadIdx.x == 0) atomicAdd(bad, 1u);
#endif
}

// ---- flag handoff ----
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Spins until *p == v; gives up (and counts a failure) after ~2^26 polls, so
// a broken handoff ends the probe instead of hanging the GPU.
__device__ __forceinline__ bool await(const unsigned* p, unsigned v) {
  for (int polls = 0; polls < (1 << 26); ++polls)
    if (ld_acquire(p) == v) return true;
  return false;
}
// Two blocks (on two SMs: each takes more than half an SM's shared memory),
// one thread each: block 0 releases round i and waits for block 1's answer.
__global__ void handoff_kernel(unsigned* flags, int iters, unsigned* bad) {
  extern __shared__ unsigned char keep_sm_busy[];
  if (threadIdx.x != 0) return;
  keep_sm_busy[0] = 0;
  const int me = int(blockIdx.x);
  unsigned* mine = flags + 32 * me;  // separate 128-byte lines
  const unsigned* theirs = flags + 32 * (1 - me);
  for (int i = 1; i <= iters; ++i) {
    if (me == 0) {
      st_release(mine, unsigned(i));
      if (!await(theirs, unsigned(i))) { atomicAdd(bad, 1u); return; }
    } else {
      if (!await(theirs, unsigned(i))) { atomicAdd(bad, 1u); return; }
      st_release(mine, unsigned(i));
    }
  }
}

unsigned read_word(const unsigned* d) {
  unsigned h = 0;
  CUDA_CHECK(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

double kernel_boundary_us(int kernels, int blocks, bool pdl, bool graph) {
  TF_CHECK(kernels >= 2 && blocks >= 1, "kernel_boundary_us: " << kernels << " kernels of " << blocks << " blocks");
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceBuffer counter(sizeof(unsigned));
  CUDA_CHECK(cudaMemsetAsync(counter.get(), 0, sizeof(unsigned), s));
  unsigned* c = counter.as<unsigned>();
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch_chain(c, kernels, blocks, pdl, s);
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  auto run = [&] {
    if (graph) CUDA_CHECK(cudaGraphLaunch(exec, s));
    else launch_chain(c, kernels, blocks, pdl, s);
  };
  run();  // warm-up (module load, graph upload)
  double us = 0;
  {
    EventTimer t;
    t.start(s);
    run();
    us = t.stop_us(s) / kernels;
  }
  const unsigned got = read_word(c);
  if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaStreamDestroy(s));
  TF_CHECK(got == unsigned(2 * kernels),
           "kernel_boundary_us: the chain counted " << got << ", expected " << 2 * kernels);
  return us;
}

double cluster_barrier_us(int cluster, int iters) {
  TF_CHECK(cluster >= 2 && cluster <= 16 && iters >= 1, "cluster_barrier_us: cluster " << cluster);
  if (current_cc_major() < 9) return -1.0;
  if (cluster > 8 &&
      cudaFuncSetAttribute(cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    cudaGetLastError();
    return -1.0;
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cluster);
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(cluster));
  cfg.blockDim = dim3(kThreads);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, cluster_kernel, &cfg) != cudaSuccess || clusters <= 0) {
    cudaGetLastError();
    return -1.0;
  }
  cfg.gridDim = dim3(unsigned(cluster * clusters));
  DeviceBuffer bad(sizeof(unsigned));
  CUDA_CHECK(cudaMemset(bad.get(), 0, sizeof(unsigned)));
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_kernel, 16, bad.as<unsigned>()));  // warm-up
  EventTimer t;
  t.start();
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_kernel, iters, bad.as<unsigned>()));
  const double us = t.stop_us();
  const unsigned errors = read_word(bad.as<unsigned>());
  TF_CHECK(errors == 0, "cluster_barrier_us: " << errors << " words handed through shared memory were wrong");
  return us / iters;
}

double flag_handoff_us(int iters) {
  TF_CHECK(iters >= 1, "flag_handoff_us: " << iters << " rounds");
  int dev = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int smem = optin / 2 + 1024;  // two such blocks cannot share an SM
  CUDA_CHECK(cudaFuncSetAttribute(handoff_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  DeviceBuffer flags(64 * sizeof(unsigned)), bad(sizeof(unsigned));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // both blocks resident at once, or the launch fails
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(2);
  cfg.blockDim = dim3(32);
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  auto once = [&](int n) {
    CUDA_CHECK(cudaMemset(flags.get(), 0, 64 * sizeof(unsigned)));
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, handoff_kernel, flags.as<unsigned>(), n, bad.as<unsigned>()));
  };
  CUDA_CHECK(cudaMemset(bad.get(), 0, sizeof(unsigned)));
  once(16);  // warm-up
  CUDA_CHECK(cudaMemset(flags.get(), 0, 64 * sizeof(unsigned)));
  EventTimer t;
  t.start();
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, handoff_kernel, flags.as<unsigned>(), iters, bad.as<unsigned>()));
  const double us = t.stop_us();
  const unsigned errors = read_word(bad.as<unsigned>());
  TF_CHECK(errors == 0, "flag_handoff_us: a handoff timed out (" << errors << ")");
  return us / (2.0 * iters);
}

}  // namespace tf::cuda
