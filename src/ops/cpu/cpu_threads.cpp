#include "ops/cpu/cpu_threads.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tf::ops::cpu {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// A step calls the pool ~300 times with a few microseconds of host work in
// between: an idle worker first spins (a call then costs a store, not a futex
// wake), then yields the core (this VM's two cores are shared; a spinning
// thread must not starve the one it waits for), then sleeps until the next call.
constexpr int kSpins = 2000, kYields = 200;

// Each call is cut into chunks taken from a shared counter, by the workers and
// by the caller: a worker the OS has descheduled delays the call by at most
// the chunk it holds, not by its whole share.
constexpr int64_t kChunksPerThread = 4;

class Pool {
 public:
  void run(int threads, int64_t items, const std::function<void(int64_t, int64_t)>& fn) {
    grow(threads - 1);
    const int64_t chunks = std::min<int64_t>(items, threads * kChunksPerThread);
    fn_ = &fn;
    items_ = items;
    chunks_ = chunks;
    done_.store(0, std::memory_order_relaxed);
    call_ = (call_ + 1) & kCallMask;
    claim_.store((call_ << 40) | (uint64_t(chunks) << 20), std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();
    in_range_ = true;
    work();
    in_range_ = false;
    for (int spins = 0; done_.load(std::memory_order_acquire) != chunks; ++spins) {
      if (spins < kSpins) cpu_relax();
      else std::this_thread::yield();  // a worker holding a chunk was descheduled
    }
  }
  static thread_local bool in_range_;

 private:
  // claim_ = call:24 | chunks:20 | next:20, one word: a worker late for a call
  // (woken for it, run after it ended) cannot claim a chunk of the next one,
  // and fn_/items_ are read only under a claimed chunk, which keeps its call open.
  static constexpr uint64_t kCallMask = (uint64_t(1) << 24) - 1, kField = (uint64_t(1) << 20) - 1;
  bool claim(int64_t& chunk) {
    uint64_t w = claim_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t next = w & kField, chunks = (w >> 20) & kField;
      if (next >= chunks) return false;
      if (claim_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        chunk = int64_t(next);
        return true;
      }
    }
  }
  void work() {
    for (int64_t c; claim(c);) {
      (*fn_)(items_ * c / chunks_, items_ * (c + 1) / chunks_);
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  void grow(int want) {
    while (int(workers_.size()) < want)
      workers_.emplace_back([this, seen = wake_.load()] { loop(seen); });
  }
  void loop(uint32_t seen) {
    in_range_ = true;
    for (;;) {
      uint32_t g;
      for (int spins = 0; (g = wake_.load(std::memory_order_acquire)) == seen; ++spins) {
        if (spins < kSpins) cpu_relax();
        else if (spins < kSpins + kYields) std::this_thread::yield();
        else wake_.wait(seen, std::memory_order_acquire);
      }
      seen = g;
      work();
    }
  }

  std::vector<std::thread> workers_;  // never joined: the pool lives as long as the process
  std::atomic<uint32_t> wake_{0};
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};
  uint64_t call_ = 0;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t items_ = 0, chunks_ = 0;
};
thread_local bool Pool::in_range_ = false;

std::mutex g_pool_mu;  // one parallel_for at a time; a second caller runs serially
Pool* g_pool = nullptr;

}  // namespace

int cpu_threads() { return std::max(1, openblas_get_num_threads()); }

void parallel_for(int64_t items, const std::function<void(int64_t, int64_t)>& fn) {
  if (items <= 0) return;
  const int threads = cpu_threads();
  if (threads <= 1 || items <= 1 || Pool::in_range_) return fn(0, items);
  std::unique_lock<std::mutex> lock(g_pool_mu, std::try_to_lock);
  if (!lock.owns_lock()) return fn(0, items);
  if (!g_pool) g_pool = new Pool;  // leaked on purpose: its threads outlive static destructors
  g_pool->run(threads, items, fn);
}

}  // namespace tf::ops::cpu
