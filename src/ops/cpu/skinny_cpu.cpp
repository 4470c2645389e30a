#include "ops/cpu/skinny_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "ops/cpu/cpu_threads.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define TF_HAVE_AVX2_BUILD 1
#else
#define TF_HAVE_AVX2_BUILD 0
#endif

namespace tf::ops::cpu {

namespace generic {
#define TF_SKINNY_AVX2 0
#include "ops/cpu/skinny_body.inc"
#undef TF_SKINNY_AVX2
}  // namespace generic

#if TF_HAVE_AVX2_BUILD
// The AVX2 build of the same body, for CPUs that have it (checked at run time:
// the binary itself targets baseline x86-64).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
namespace avx2 {
#define TF_SKINNY_AVX2 1
#include "ops/cpu/skinny_body.inc"
#undef TF_SKINNY_AVX2
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

namespace {

std::atomic<bool> g_force_generic{false}, g_force_blas{false};

// TRIFORCE_CPU_KERNELS, read once: unset or "auto", "generic", or "blas".
const char* kernels_env() {
  static const char* const v = [] {
    const char* e = std::getenv("TRIFORCE_CPU_KERNELS");
    if (!e || !*e || std::strcmp(e, "auto") == 0) return "auto";
    TF_CHECK(std::strcmp(e, "generic") == 0 || std::strcmp(e, "blas") == 0,
             "TRIFORCE_CPU_KERNELS: expected auto, generic or blas, got '" << e << "'");
    return std::strcmp(e, "generic") == 0 ? "generic" : "blas";
  }();
  return v;
}

bool cpu_has_avx2() {
#if TF_HAVE_AVX2_BUILD
  static const bool has = [] {
    __builtin_cpu_init();
    if (std::strcmp(kernels_env(), "generic") == 0) return false;
    // F16C (the f16 weights' widening) by CPUID leaf 1, ECX bit 29: every AVX2 CPU has it, but the body is
    // built for all three, so all three are checked.
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return has;
#else
  return false;
#endif
}

bool use_avx2() { return cpu_has_avx2() && !g_force_generic.load(std::memory_order_relaxed); }

// Below this many weights a linear runs on the calling thread: waking the
// pool costs more than the rows.
constexpr int64_t kParallelMinWeights = 32 * 1024;

template <typename WT>
void linear_skinny_any(const float* x, int64_t n, int64_t in, const WT* w, int64_t outd, float* y) {
  if (n <= 0 || outd <= 0) return;
  const bool v = use_avx2();
  auto rows = [&](int64_t b, int64_t e) {  // tiles of kMR output rows [b, e)
    const int64_t o0 = b * kMR, o1 = std::min(outd, e * kMR);
#if TF_HAVE_AVX2_BUILD
    if (v) return avx2::linear_rows(x, n, in, w, o0, o1, outd, y);
#endif
    generic::linear_rows(x, n, in, w, o0, o1, outd, y);
  };
  const int64_t tiles = (outd + kMR - 1) / kMR;
  if (outd * in < kParallelMinWeights) return rows(0, tiles);
  parallel_for(tiles, rows);
}

}  // namespace

void linear_skinny(const float* x, int64_t n, int64_t in, const float* w, int64_t outd, float* y) {
  linear_skinny_any(x, n, in, w, outd, y);
}

void linear_skinny(const float* x, int64_t n, int64_t in, const uint16_t* w_f16, int64_t outd, float* y) {
  linear_skinny_any(x, n, in, w_f16, outd, y);
}

void attention_skinny(const float* q, const int32_t* q_positions, int64_t n, const KVView& kv, float* out,
                      const AttentionParams& p) {
  const float scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(float(p.head_dim));
#if TF_HAVE_AVX2_BUILD
  if (use_avx2())
    return avx2::attention_rows(q, q_positions, n, kv, out, p.num_heads, p.num_kv_heads, p.head_dim, scale);
#endif
  generic::attention_rows(q, q_positions, n, kv, out, p.num_heads, p.num_kv_heads, p.head_dim, scale);
}

bool skinny_enabled() {
  return std::strcmp(kernels_env(), "blas") != 0 && !g_force_blas.load(std::memory_order_relaxed);
}

float exp_sum_row(float* s, int64_t cnt, float m) {
#if TF_HAVE_AVX2_BUILD
  if (use_avx2()) return avx2::exp_sum_row(s, cnt, m);
#endif
  return generic::exp_sum_row(s, cnt, m);
}

const char* skinny_isa() { return use_avx2() ? "avx2+fma" : "generic"; }

void force_generic_kernels(bool on) { g_force_generic.store(on, std::memory_order_relaxed); }

void force_blas_kernels(bool on) { g_force_blas.store(on, std::memory_order_relaxed); }

}  // namespace tf::ops::cpu
