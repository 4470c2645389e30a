// A small persistent thread pool for the CPU kernels that do not go through
// BLAS (ops/cpu/skinny_cpu.h). It runs as many threads as OpenBLAS would (its
// openblas_get_num_threads(), which honours OPENBLAS_NUM_THREADS /
// OMP_NUM_THREADS and the per-node share parallel::init sets under mpirun), so
// the step's BLAS and non-BLAS ops use the same cores.
#pragma once

#include <cstdint>
#include <functional>

namespace tf::ops::cpu {

// Threads a parallel_for uses now (>= 1).
int cpu_threads();

// fn(begin, end) over [0, items) cut into up to 4 * cpu_threads() contiguous
// chunks, which the calling thread and the workers claim as they come free;
// returns when all are done. Which thread runs a chunk depends on timing, so
// callers must write disjoint outputs whose values do not depend on the cut
// (the skinny kernels' outputs never do). Called from inside a chunk (or from
// a second thread while a call runs) it runs fn(0, items) on the calling thread.
void parallel_for(int64_t items, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tf::ops::cpu
