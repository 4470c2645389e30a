// Per-kernel GPU time of a benchmark's timed iterations, from CUPTI's kernel
// activity records: what each kernel really takes in the overlapped run
// (graph replays and PDL included), where ncu serialises kernels and flushes
// caches between them, and how long the GPU sat idle between kernels.
//
// TRIFORCE_KERNEL_TRACE=DIR turns it on: kernel_trace_end writes DIR/<label>.csv
// (kernel, launches and us per iteration, us each, share of busy time; copies
// and memsets as [memcpy] and [memset]) and prints one line: per iteration the
// busy time (the union of the records' intervals), the span (first start to
// last end) and the idle rest, which includes the host's time between
// iterations. Without CUPTI in the build, or with the variable unset, both
// calls do nothing. Tracing adds a little host work per launch, so read the
// benchmark's own time from an untraced run.
#pragma once
#include <string>

namespace tf::bench {

void kernel_trace_begin();
// iterations: the timed iterations since kernel_trace_begin (per-iteration figures).
void kernel_trace_end(const std::string& label, long iterations);

}  // namespace tf::bench
