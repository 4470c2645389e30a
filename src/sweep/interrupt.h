// One line when a sweep is stopped by SIGINT, SIGTERM or SIGHUP. Dying at once is
// safe (the results file is only ever replaced whole), but silent; the handler
// writes "sweep interrupted (SIGINT): <out> holds N runs; the same command
// resumes", removes a half-written <out>.tmp and re-raises the signal with its
// default action, so the exit status still names the signal. A signal the
// process was started ignoring (nohup, a background job without job control)
// stays ignored.
#pragma once
#include <signal.h>

#include <cstdint>
#include <string>

namespace tf::sweep {

void install_interrupt_note(const std::string& out, int64_t runs_in_file);
// After every saved run.
void set_interrupt_note_runs(int64_t runs_in_file);

// Holds SIGINT, SIGTERM and SIGHUP back while alive (delivered at its end), so
// that a run's save and the note's count change together.
class DeferSignals {
 public:
  DeferSignals();
  ~DeferSignals();
  DeferSignals(const DeferSignals&) = delete;
  DeferSignals& operator=(const DeferSignals&) = delete;

 private:
  sigset_t old_;
};

}  // namespace tf::sweep
