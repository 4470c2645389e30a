#include "pdl.cuh"

namespace tf::cuda {

namespace {
// Per thread: each thread drives its own stream's step (tensor-parallel ranks
// run on threads of their own).
thread_local bool t_on = false;
thread_local bool t_chain = false;  // the previous op of the scope was a launch_step kernel
int64_t g_launches = 0;
}  // namespace

void pdl_begin(bool on) {
  t_on = on;
  t_chain = false;  // what came before the scope (input copies) is not a step kernel
}

void pdl_end() { t_on = t_chain = false; }

void pdl_break() { t_chain = false; }

bool pdl_take_launch() {
  const bool overlap = t_on && t_chain;
  t_chain = t_on;
  if (overlap) __atomic_add_fetch(&g_launches, 1, __ATOMIC_RELAXED);
  return overlap;
}

bool pdl_scope_on() { return t_on; }

int64_t pdl_launches() { return __atomic_load_n(&g_launches, __ATOMIC_RELAXED); }

}  // namespace tf::cuda
