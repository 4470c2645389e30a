#include "pdl.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/check.h"

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

namespace {
constexpr int64_t kAuto = -2, kAll = -1;
// TRIFORCE_PREFETCH_MIB, read once: kAll (unset or "all"), kAuto ("auto") or bytes.
int64_t prefetch_env() {
  static const int64_t v = [] {
    const char* s = std::getenv("TRIFORCE_PREFETCH_MIB");
    if (!s || !*s) return kAll;
    const std::string t(s);
    if (t == "all") return kAll;
    if (t == "auto") return kAuto;
    char* end = nullptr;
    const long long mib = std::strtoll(t.c_str(), &end, 10);
    TF_CHECK(end && *end == '\0' && t.size() <= 7 && t[0] != '-' && t[0] != '+' && mib <= 1048576,
             "TRIFORCE_PREFETCH_MIB=" << t << ": expected all, auto or an integer from 0 to 1048576");
    return int64_t(mib) << 20;
  }();
  return v;
}
// A quarter of the current device's L2, cached per device.
int64_t quarter_l2_bytes() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int64_t> cache[kMaxDevices] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  int64_t b = cache[dev].load(std::memory_order_relaxed);
  if (b == 0) {
    int l2 = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    b = std::max<int64_t>(int64_t(l2) / 4, 1);
    cache[dev].store(b, std::memory_order_relaxed);
  }
  return b;
}
}  // namespace

unsigned prefetch_blocks_within(int64_t budget_bytes, int64_t rows_per_block, int64_t row_bytes) {
  if (budget_bytes < 0) return std::numeric_limits<unsigned>::max();
  const int64_t block_bytes = std::max<int64_t>(rows_per_block * row_bytes, 1);
  // Every block whose rows start inside the budget.
  const int64_t blocks = (budget_bytes + block_bytes - 1) / block_bytes;
  return unsigned(std::min<int64_t>(blocks, std::numeric_limits<unsigned>::max()));
}

unsigned prefetch_blocks(int64_t rows_per_block, int64_t row_bytes) {
  const int64_t env = prefetch_env();
  return prefetch_blocks_within(env == kAuto ? quarter_l2_bytes() : env, rows_per_block, row_bytes);
}

}  // namespace tf::cuda
