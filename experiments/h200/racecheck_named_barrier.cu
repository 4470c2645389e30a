// Does compute-sanitizer's racecheck report hazards between shared-memory accesses that a __syncthreads()
// orders, once some warps of the block have used a named barrier the others never executed?
//
// Why it is asked: run 3 of experiments/h200/sanitize.sh reported ~20 hazard sites in persistent_step_kernel
// (kernels/persistent_step.cu), every one between two accesses that a bar.sync 0 run by all 256 threads
// separates (rmsnorm_vec8_rows' own barriers, the SiLU prologue's, mma_tile's, the tile loop's), and only in
// code after the first attention phase: there warps 0-3 run the split tile on named barrier 1 (128 threads, a
// data-dependent number of times) while warps 4-7 wait at the grid barrier's __syncthreads(). The layer-0 copy
// of the same norm and GEMV code, which runs before any named barrier, had no report. This kernel has the same
// shape with nothing else in it; every access pair in it is ordered.
//   mode 0: no named barrier (the control)
//   mode 1: warps 0-3 run bar.sync 1, 128 a varying number of times, warps 4-7 none (the persistent kernel)
//   mode 2: as 1, and warps 4-7 run bar.sync 2, 128 as many times (equal barrier counts per warp)
// Reading: 0 hazards in mode 0 and some in mode 1 = racecheck misorders accesses after a partial-block named
// barrier, and the persistent kernel's reports are that (no barrier is missing there); mode 2 tells whether
// equal per-warp barrier counts avoid it. Hazards in mode 0 too = racecheck sees something this file gets wrong.
//   nvcc -std=c++17 -O3 -arch=sm_90 -lineinfo experiments/h200/racecheck_named_barrier.cu -o /tmp/rnb
//   for m in 0 1 2; do compute-sanitizer --tool racecheck --racecheck-report analysis --print-limit 10 /tmp/rnb $m; done
#include <cstdio>
#include <cstdlib>
#include <vector>

// An immediate barrier id, as split_sync's compiles to in the persistent kernel (BAR.SYNC 0x1, 0x80).
template <int ID> __device__ __forceinline__ void named_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(128) : "memory");
}

template <int ID> __device__ __forceinline__ void half_block_phase(float (&scratch)[128], int t, int n, float& acc) {
  for (int i = 0; i < n; ++i) {
    scratch[t] = float(t + i);
    named_sync<ID>();
    acc += scratch[127 - t];
    named_sync<ID>();
  }
}

__global__ void __launch_bounds__(256) kernel(int mode, int rounds, float* out) {
  __shared__ float scratch[2][128];
  __shared__ float xs[256];
  __shared__ float part[7 * 32];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  float acc = 0.0f;
  for (int r = 0; r < rounds; ++r) {
    // The attention phase: each half of the block on its own barrier, a block- and round-dependent count.
    const int n = 1 + (int(blockIdx.x) + r) % 3;
    if (mode != 0 && tid < 128) half_block_phase<1>(scratch[0], tid, n, acc);
    if (mode == 2 && tid >= 128) half_block_phase<2>(scratch[1], tid - 128, n, acc);
    __syncthreads();  // the grid barrier's
    // A norm writing the GEMV's x rows: every warp writes, every warp reads another's.
    xs[tid] = acc + float(r);
    __syncthreads();
    acc += xs[255 - tid];
    __syncthreads();
    // mma_tile's partial sums over two tiles: warps 1-7 write, warp 0 reads, the loop's barrier between tiles.
    for (int tile = 0; tile < 2; ++tile) {
      if (warp > 0) part[(warp - 1) * 32 + lane] = acc + float(tile);
      __syncthreads();
      if (warp == 0)
        for (int v = 0; v < 7; ++v) acc += part[v * 32 + lane];
      __syncthreads();
    }
  }
  out[blockIdx.x * blockDim.x + tid] = acc;
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? std::atoi(argv[1]) : 1;
  if (mode < 0 || mode > 2) {
    std::fprintf(stderr, "usage: %s [0|1|2]\n", argv[0]);
    return 2;
  }
  const int blocks = 8, rounds = 4;
  float* out = nullptr;
  if (cudaMalloc(&out, sizeof(float) * blocks * 256) != cudaSuccess) return 1;
  kernel<<<blocks, 256>>>(mode, rounds, out);
  std::vector<float> h(blocks * 256);
  const cudaError_t e = cudaMemcpy(h.data(), out, sizeof(float) * h.size(), cudaMemcpyDeviceToHost);
  cudaFree(out);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "mode %d: %s\n", mode, cudaGetErrorString(e));
    return 1;
  }
  double sum = 0;
  for (float v : h) sum += v;
  std::printf("mode %d: ran, checksum %.6g\n", mode, sum);
  return 0;
}

// Answer (H100, compute-sanitizer 2025.3.1, 2026-12-06, results/h100/sanitize-run4): mode 0 no hazard,
// mode 1 6,784 hazards at two sites (lines 50/52: xs, 56/59: part), mode 2 no hazard.
