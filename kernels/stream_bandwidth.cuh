// How fast a few SMs can stream weights (issue 17). A batch-1 step of a small
// model could run on one thread block cluster (up to 16 SMs, synchronised by
// cluster barriers, kernels/sync_latency.cuh) instead of the whole GPU with a
// grid barrier or a kernel boundary per phase; whether that pays depends on
// what one SM can pull, which is its bytes in flight over the load latency.
// This probe streams `bytes_per_block` bytes on each of `blocks` blocks (one
// an SM: each takes most of an SM's shared memory) and returns the time:
//   kRegisterLoads: 16-byte ld.global.nc, 8 in flight per thread of 256 (32 KB
//     an SM), as the skinny GEMM streams its weights;
//   kBulkCopies: cp.async.bulk (TMA) into a ring of 4 shared-memory stages of
//     32 KB (128 KB in flight an SM), completion counted on an mbarrier.
// From a buffer of 1 GiB (HBM: each block reads a region nothing else read
// before) or of `bytes_per_block * blocks` read once beforehand (L2, where it
// fits). Each block sums what it read; the sums are checked against the fill
// pattern, so a pipeline that skipped data fails the probe.
#pragma once
#include <cstdint>

namespace tf::cuda {

enum StreamMode : int { kRegisterLoads = 0, kBulkCopies = 1 };
// Microseconds for the whole stream; negative where the mode cannot run here
// (bulk copies need sm_90).
double stream_us(int blocks, int64_t bytes_per_block, StreamMode mode, bool from_l2);

}  // namespace tf::cuda
