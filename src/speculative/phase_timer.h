// Wall-clock accounting of the phases of a run (prefill, draft, middle,
// verify, retrieval build) in nanoseconds, on std::chrono::steady_clock.
// A device backend launches work asynchronously, so the clock would charge a
// kernel to whichever phase happens to wait for it: give the PhaseClock a
// `sync` callback (e.g. one that synchronizes the stream) and every read of
// the clock is preceded by it. On CPU it stays empty.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>

namespace tf::speculative {

class PhaseClock {
 public:
  explicit PhaseClock(std::function<void()> sync = {}) : sync_(std::move(sync)) {}
  int64_t now_ns() const {
    if (sync_) sync_();
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  std::function<void()> sync_;
};

// Adds the time between construction and destruction to `acc`.
class ScopedPhase {
 public:
  ScopedPhase(const PhaseClock& clock, int64_t& acc) : clock_(clock), acc_(acc), t0_(clock.now_ns()) {}
  ~ScopedPhase() { acc_ += clock_.now_ns() - t0_; }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  const PhaseClock& clock_;
  int64_t& acc_;
  int64_t t0_;
};

}  // namespace tf::speculative
