// What a batch-1 step's dependent phases can synchronise with, and what each
// costs on this GPU (issue 17: a SmolLM2 step is ~218 dependent kernels at
// ~2.5 us each, and the persistent step's grid barrier measured 1.9 us). Three
// probes, each returning microseconds per synchronisation, for the benchmarks
// in tests/bench/bench_sync_latency_gpu.cpp:
//   kernel boundary: a chain of dependent launches (each kernel reads the
//     counter the one before wrote), plain or with programmatic dependent
//     launch, eager or replayed as one CUDA graph;
//   cluster barrier: barrier.cluster arrive/wait between the CTAs of a thread
//     block cluster (sm_90), each round also handing a word to the next CTA
//     through distributed shared memory, so the barrier carries data;
//   flag handoff: one block releases a flag in global memory and a block on
//     another SM acquires it (half a ping-pong): the floor of any dataflow
//     scheme that waits on counters instead of barriers.
// Each probe checks that the work it timed really happened (the counter
// reached its count, every handed word arrived) and fails otherwise.
#pragma once

namespace tf::cuda {

// kernels dependent launches of `blocks` blocks each (every block waits for
// the previous kernel; block 0 increments the counter).
double kernel_boundary_us(int kernels, int blocks, bool pdl, bool graph);
// A cluster of `cluster` CTAs (2..16; over 8 needs the non-portable size),
// `iters` rounds, as many clusters as fit the GPU at once. Returns a negative
// number where the GPU or the build cannot run clusters of that size.
double cluster_barrier_us(int cluster, int iters);
// One-way latency of a release/acquire flag between two SMs, over `iters`
// round trips.
double flag_handoff_us(int iters);

}  // namespace tf::cuda
