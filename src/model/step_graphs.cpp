#include "model/step_graphs.h"

#include <utility>

#include "core/check.h"
#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include "stream.cuh"
#endif

namespace tf {

namespace {
// Keys accumulate as caches come and go (each copy of a cache has new storage);
// the least recently used graph goes past this many.
constexpr size_t kMaxGraphs = 64;

void destroy_exec(void* exec) {
#ifdef TRIFORCE_HAVE_CUDA
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
#endif
}
}  // namespace

StepGraphs::StepGraphs(StepGraphs&& o) noexcept
    : entries_(std::move(o.entries_)),
      clock_(o.clock_),
      captures_(o.captures_),
      replays_(o.replays_),
      eager_runs_(o.eager_runs_) {
  o.entries_.clear();
}

StepGraphs& StepGraphs::operator=(StepGraphs&& o) noexcept {
  if (this != &o) {
    clear();
    entries_ = std::move(o.entries_);
    o.entries_.clear();
    clock_ = o.clock_, captures_ = o.captures_, replays_ = o.replays_, eager_runs_ = o.eager_runs_;
  }
  return *this;
}

void StepGraphs::clear() {
  for (Entry& e : entries_) destroy_exec(e.exec);
  entries_.clear();
}

StepGraphs::Entry& StepGraphs::find_or_add(const StepGraphKey& key) {
  for (Entry& e : entries_)
    if (e.key == key) return e;
  if (entries_.size() >= kMaxGraphs) {
    size_t oldest = 0;
    for (size_t i = 1; i < entries_.size(); ++i)
      if (entries_[i].last_use < entries_[oldest].last_use) oldest = i;
    destroy_exec(entries_[oldest].exec);
    entries_.erase(entries_.begin() + std::ptrdiff_t(oldest));
  }
  entries_.push_back(Entry{key});
  return entries_.back();
}

void StepGraphs::run(const StepGraphKey& key, const std::function<void()>& enqueue) {
#ifdef TRIFORCE_HAVE_CUDA
  Entry& e = find_or_add(key);
  e.last_use = ++clock_;
  cudaStream_t s = cuda::compute_stream();
  if (e.exec) {
    const cudaError_t r = cudaGraphLaunch(static_cast<cudaGraphExec_t>(e.exec), s);
    TF_CHECK(r == cudaSuccess, "CUDA graph launch failed: " << cudaGetErrorString(r));
    ++replays_;
    return;
  }
  if (e.eager_only || e.uses++ == 0) {
    ++eager_runs_;
    return enqueue();
  }
  // Capture. Thread-local mode: a call from this thread that would break the
  // capture (a legacy-stream launch, a synchronous copy) fails it instead of
  // running, and the step then runs eagerly.
  cudaGraph_t graph = nullptr;
  TF_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess,
           "CUDA graph: cannot begin a capture on the compute stream");
  bool ok = true;
  try {
    enqueue();
  } catch (...) {
    ok = false;
  }
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  cudaGraphExec_t exec = nullptr;
  if (ok && end == cudaSuccess && graph) ok = cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  else ok = false;
  if (graph) cudaGraphDestroy(graph);
  if (!ok) {
    if (exec) cudaGraphExecDestroy(exec);
    (void)cudaGetLastError();  // the failed capture's error is not the step's
    e.eager_only = true;
    ++eager_runs_;
    return enqueue();          // a real error (bad shape, ...) throws from here
  }
  e.exec = exec;
  ++captures_;
  const cudaError_t r = cudaGraphLaunch(exec, s);
  TF_CHECK(r == cudaSuccess, "CUDA graph launch failed: " << cudaGetErrorString(r));
#else
  (void)key;
  enqueue();
#endif
}

}  // namespace tf
