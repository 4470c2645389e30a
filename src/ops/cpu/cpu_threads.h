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

// fn(begin, end) over a static split of [0, items) into at most cpu_threads()
// contiguous ranges, the calling thread taking the first; returns when all are
// done. Ranges depend only on `items` and the thread count, never on timing,
// and callers write disjoint outputs, so results do not depend on the split.
// Called from inside a range (or from a second thread while one runs) it runs
// fn(0, items) on the calling thread.
void parallel_for(int64_t items, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tf::ops::cpu
