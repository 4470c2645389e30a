#include "sweep/interrupt.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace tf::sweep {

namespace {

// The handler may only read: both messages are written before `current` flips
// to them, so it never sees one half-formatted.
char g_message[2][1200];
volatile sig_atomic_t g_current = 0;
char g_out[1024];
char g_tmp[1040];
// A process-directed signal can land on another thread (MPI's, the sanitizer's), which the saving thread's
// mask does not cover: such a handler leaves the signal pending until the save is done.
volatile sig_atomic_t g_saving = 0;
volatile sig_atomic_t g_pending = 0;

void put(const char* s) {
  const ssize_t w = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)w;
}

void on_signal(int sig) {
  if (g_saving) {
    g_pending = sig;
    return;
  }
  put(sig == SIGINT ? "triforce: sweep interrupted (SIGINT): "
      : sig == SIGTERM ? "triforce: sweep interrupted (SIGTERM): "
                       : "triforce: sweep interrupted (SIGHUP): ");
  put(g_message[g_current]);
  ::unlink(g_tmp);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void set_interrupt_note_runs(int64_t runs) {
  const int next = 1 - g_current;
  std::snprintf(g_message[next], sizeof g_message[next], "%s holds %lld run%s; the same command resumes\n", g_out,
                (long long)runs, runs == 1 ? "" : "s");
  g_current = next;
}

void install_interrupt_note(const std::string& out, int64_t runs) {
  std::snprintf(g_out, sizeof g_out, "%s", out.c_str());
  if (out.size() + 5 <= sizeof g_tmp) std::snprintf(g_tmp, sizeof g_tmp, "%s.tmp", out.c_str());
  set_interrupt_note_runs(runs);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int other : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, other);  // one note, not two
    ::sigaction(sig, &sa, nullptr);
  }
}

DeferSignals::DeferSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  g_saving = 1;
}

DeferSignals::~DeferSignals() {
  g_saving = 0;
  ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  if (const int sig = g_pending) {
    g_pending = 0;
    ::raise(sig);
  }
}

}  // namespace tf::sweep
