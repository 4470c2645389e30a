// Programmatic dependent launch (PDL) for the decode step's kernels.
//
// A kernel launched with launch_step() may start while the kernel before it
// on the stream is still draining, when the step's PDL scope is on
// (pdl_begin, set by the model for steps of <= 32 tokens behind
// TRIFORCE_PDL). Its launch, block ramp and weight prefetch then overlap the
// predecessor's tail; inside stream capture (CUDA >= 12.3) the attribute
// becomes a programmatic graph edge.
//
// THE RULE for every kernel launched through launch_step():
//  1. Before pdl_wait() it may only read memory no kernel of the step writes
//     (weights, and its own params) and prefetch it; it writes no global
//     memory and reads no activation, cache, length or workspace. That covers
//     read-after-write (a predecessor's output) and write-after-read (a buffer
//     a predecessor still reads) alike.
//  2. Every block calls pdl_wait() on every path before it exits, early
//     returns included. pdl_wait() returns once the previous grid has
//     completed and its writes are visible; because each kernel of the chain
//     waits, the previous grid completed only after ITS predecessor did, so
//     the guarantee is transitive over the whole step.
//  3. pdl_trigger() (let the next kernel launch) may come anywhere: it moves
//     no data, the next kernel's pdl_wait() still waits for this one to
//     complete.
// Launched without the attribute (PDL off, prefill, another caller) both
// instructions are no-ops, so a kernel's bits never depend on the switch.
//
// Host side: the attribute is only set when the previous operation on the
// stream was a kernel of the step. The caller ends the chain with
// pdl_break() after anything else it enqueues in the scope (a copy, an NCCL
// collective: neither is PDL-aware), so the kernel after it launches normally.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"

namespace tf::cuda {

// The calling thread's PDL scope: on for a step's launches, off elsewhere.
void pdl_begin(bool on);
void pdl_end();
// The next launch_step() of the scope launches normally (a non-kernel or a
// foreign kernel was enqueued in between).
void pdl_break();
// Whether the next launch may overlap its predecessor; marks the chain open.
bool pdl_take_launch();
// Whether the calling thread is inside a step's PDL scope.
bool pdl_scope_on();
// Launches that carried the attribute since the process started (tests check
// that the switch reached the kernels).
int64_t pdl_launches();
// How many blocks of a skinny GEMM, from block 0, prefetch their weight rows
// (rows_per_block rows of row_bytes each) into L2, by TRIFORCE_PREFETCH_MIB:
// unset or "all", every block (as measured so far); "auto", those whose rows
// start in the first quarter of the current device's L2 worth of the matrix;
// N, in its first N MiB. Why a bound may pay: every resident block prefetches
// its whole tile at once, so a 7B's first wave (about a thousand blocks of
// 128 KB at a hidden size of 4096) asks for more than L2 holds and may evict
// its own lines before reading them, while a bounded head of the matrix still
// starts the weight stream as the previous kernel drains.
unsigned prefetch_blocks(int64_t rows_per_block, int64_t row_bytes);
// The same for a budget in bytes (< 0: every block; 0: none).
unsigned prefetch_blocks_within(int64_t budget_bytes, int64_t rows_per_block, int64_t row_bytes);

#if defined(__CUDACC__)
template <class... KArgs, class... Args>
void launch_step(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                 Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  const bool overlap = pdl_take_launch();
  cfg.attrs = overlap ? attr : nullptr;
  cfg.numAttrs = overlap ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}

// griddepcontrol needs sm_90; older targets serialise as before.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// Ask L2 for `bytes` (a multiple of 16) at a 16-byte aligned global address:
// a weight tile fetched while the predecessor drains. No data moves into the
// thread; the later loads are unchanged, so are the bits.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Under PDL a skinny GEMM's block (gemm_skinny.cu, gemm_skinny_norm.cu) asks
// L2 for its weight rows [j0, j0 + rows) (contiguous: W is row-major) before
// it waits for the previous kernel, so the weight stream starts while that one
// drains; x is read only after the wait. The loads and the arithmetic are unchanged: same bits with or without.
template <class T>
__device__ __forceinline__ void prefetch_rows(const T* w, int64_t j0, int64_t rows, int64_t in) {
  // 16 KB pieces, one a thread: a short hint each, issued in parallel.
  constexpr int64_t kPiece = 16384;
  const int64_t bytes = rows * in * int64_t(sizeof(T));
  const char* base = reinterpret_cast<const char*>(w + j0 * in);
  for (int64_t off = int64_t(threadIdx.x) * kPiece; off < bytes; off += int64_t(blockDim.x) * kPiece)
    prefetch_l2(base + off, uint32_t(min(kPiece, bytes - off)));
}
template <class T>
__device__ __forceinline__ void prefetch_rows_then_wait(const T* w, int64_t j0, int64_t rows, int64_t in,
                                                        int64_t out, bool prefetch) {
  if (prefetch && j0 < out) prefetch_rows(w, j0, min(rows, out - j0), in);
  pdl_wait();
  pdl_trigger();
}
#endif

}  // namespace tf::cuda
