#include <algorithm>

#include "common.cuh"
#include "softmax_top_p.cuh"

namespace tf::cuda {
namespace {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBuckets = 2048;  // 11-bit digits; each thread scans two
constexpr int kFixedBits = 43;  // mass = exp(s - max) * 2^43: 2^21 tokens of at most 2^43 fit in a u64
static_assert(kBuckets == 2 * kThreads, "select_bucket gives each thread two buckets");

struct Shared {
  u64 mass[kBuckets];
  uint32_t count[kBuckets];
  u64 warp_m[kWarps];
  uint32_t warp_c[kWarps];
  uint32_t bucket;  // select_bucket's answer
  u64 below_m;      // cumulative mass and count before that bucket
  uint32_t below_c;
};

// Ascending s <-> ascending key. -0 becomes +0: the CPU compares values, so they tie.
__device__ __forceinline__ uint32_t order_key(float s) {
  const uint32_t u = __float_as_uint(s == 0.0f ? 0.0f : s);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ u64 fixed_mass(float e) { return __float2ull_rn(ldexpf(e, kFixedBits)); }

__device__ __forceinline__ u64 warp_sum_u64(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ u64 block_sum_u64(Shared& sh, u64 v) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum_u64(v);
  __syncthreads();
  if (lane == 0) sh.warp_m[warp] = v;
  __syncthreads();
  return warp_sum_u64(lane < kWarps ? sh.warp_m[lane] : 0);
}

// Exclusive block scan of (m, c) in thread order.
__device__ void block_exclusive_scan(Shared& sh, u64& m, uint32_t& c) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const u64 m0 = m;
  const uint32_t c0 = c;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 mo = __shfl_up_sync(0xffffffffu, m, o);
    const uint32_t co = __shfl_up_sync(0xffffffffu, c, o);
    if (lane >= o) m += mo, c += co;
  }
  __syncthreads();
  if (lane == 31) sh.warp_m[warp] = m, sh.warp_c[warp] = c;
  __syncthreads();
  if (warp == 0) {
    u64 wm = sh.warp_m[lane];
    uint32_t wc = sh.warp_c[lane];
    const u64 wm0 = wm;
    const uint32_t wc0 = wc;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const u64 mo = __shfl_up_sync(0xffffffffu, wm, o);
      const uint32_t co = __shfl_up_sync(0xffffffffu, wc, o);
      if (lane >= o) wm += mo, wc += co;
    }
    sh.warp_m[lane] = wm - wm0, sh.warp_c[lane] = wc - wc0;
  }
  __syncthreads();
  m = sh.warp_m[warp] + m - m0;
  c = sh.warp_c[warp] + c - c0;
}

// Adds one token (when `part`) to its digit's bucket. Integer atomics: the
// sums do not depend on the order. A warp whose lanes all hit one bucket (a
// flat row, or one exponent band) adds once instead of 32 times.
template <bool kMass>
__device__ __forceinline__ void hist_add(Shared& sh, bool part, uint32_t digit, u64 m) {
  const unsigned same = __match_any_sync(0xffffffffu, part ? digit : 0xffffffffu);
  if (same == 0xffffffffu) {
    if (!part) return;  // the whole warp is outside the prefix
    if (kMass) m = warp_sum_u64(m);
    if ((threadIdx.x & 31) == 0) {
      if (kMass) atomicAdd(&sh.mass[digit], m);
      atomicAdd(&sh.count[digit], 32u);
    }
  } else if (part) {
    if (kMass) atomicAdd(&sh.mass[digit], m);
    atomicAdd(&sh.count[digit], 1u);
  }
}

__device__ void clear_hist(Shared& sh) {
  __syncthreads();
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) sh.mass[b] = 0, sh.count[b] = 0;
  __syncthreads();
}

// The first bucket b (ascending) for which dropped(base + buckets 0..b) is
// false, with the cumulative (mass, count) before it; `dropped` is monotone
// and true for the base itself. Each thread owns buckets 2t and 2t+1.
template <class Pred>
__device__ void select_bucket(Shared& sh, u64& base_m, uint32_t& base_c, uint32_t& bucket, Pred dropped) {
  __syncthreads();  // the histogram is complete
  const int b0 = 2 * threadIdx.x;
  const u64 m0 = sh.mass[b0], m1 = sh.mass[b0 + 1];
  const uint32_t c0 = sh.count[b0], c1 = sh.count[b0 + 1];
  u64 m = m0 + m1;
  uint32_t c = c0 + c1;
  block_exclusive_scan(sh, m, c);
  const u64 bm = base_m + m;
  const uint32_t bc = base_c + c;
  const bool p_before = dropped(bm, bc), p0 = dropped(bm + m0, bc + c0), p1 = dropped(bm + m0 + m1, bc + c0 + c1);
  if (p_before && !p0) sh.bucket = b0, sh.below_m = bm, sh.below_c = bc;
  if (p0 && !p1) sh.bucket = b0 + 1, sh.below_m = bm + m0, sh.below_c = bc + c0;
  __syncthreads();
  bucket = sh.bucket, base_m = sh.below_m, base_c = sh.below_c;
}

// One block per row. limit = the most tokens that may be dropped
// (vocab - max(1, min_tokens_to_keep)); filter = top_p < 1 and limit > 0.
__global__ void __launch_bounds__(kThreads) softmax_top_p_kernel(const float* logits, float* probs, int64_t V,
                                                                  float temp, float thresh, bool filter,
                                                                  uint32_t limit) {
  __shared__ Shared sh;
  const float* l = logits + int64_t(blockIdx.x) * V;
  float* pr = probs + int64_t(blockIdx.x) * V;
  const int tid = threadIdx.x;

  // s = logits / T exactly as the CPU divides (not a multiply by 1/T).
  float mx = -INFINITY;
  for (int64_t j = tid; j < V; j += kThreads) mx = fmaxf(mx, l[j] / temp);
  mx = block_max(mx);

  // Total mass, and the first digit's histogram (key bits 31..21).
  if (filter) clear_hist(sh);
  u64 tot = 0;
  for (int64_t j0 = 0; j0 < V; j0 += kThreads) {
    const int64_t j = j0 + tid;
    const bool part = j < V;
    const float s = part ? l[j] / temp : 0.0f;
    const u64 m = part ? fixed_mass(expf(s - mx)) : 0;
    tot += m;
    if (filter) hist_add<true>(sh, part, order_key(s) >> 21, m);
  }
  tot = block_sum_u64(sh, tot);

  uint32_t vkey = 0, idx_cut = 0;  // kept: key > vkey, or key == vkey and index >= idx_cut
  u64 drop_m = 0;
  if (filter) {
    // Token t is dropped iff its inclusive cumulative mass is <= thresh * total and fewer than
    // `limit` tokens precede it; both are monotone along the order, so a bucket is dropped whole
    // iff its last token is.
    const u64 thr = u64(double(thresh) * double(tot));
    auto dropped = [&](u64 m, uint32_t c) { return m <= thr && c <= limit; };
    u64 base_m = 0;
    uint32_t base_c = 0, b = 0, prefix = 0;
    select_bucket(sh, base_m, base_c, b, dropped);
    prefix = b;
    // Key bits 20..10, then 9..0, among the tokens of the chosen prefix.
    for (int pass = 1; pass <= 2; ++pass) {
      const int shift = pass == 1 ? 21 : 10, low = pass == 1 ? 10 : 0;
      const uint32_t mask = pass == 1 ? 0x7FFu : 0x3FFu;
      clear_hist(sh);
      for (int64_t j0 = 0; j0 < V; j0 += kThreads) {
        const int64_t j = j0 + tid;
        const float s = j < V ? l[j] / temp : 0.0f;
        const uint32_t key = order_key(s);
        const bool part = j < V && (key >> shift) == prefix;
        hist_add<true>(sh, part, (key >> low) & mask, part ? fixed_mass(expf(s - mx)) : 0);
      }
      select_bucket(sh, base_m, base_c, b, dropped);
      prefix = (prefix << (shift - low)) | b;
    }
    vkey = prefix;
    // The cut falls inside the group of tokens equal to vkey (all of one mass e):
    // the d lowest indices of the group go.
    const uint32_t cnt = sh.count[b];
    const u64 e = sh.mass[b] / cnt;
    const uint32_t d_cnt = limit - base_c;
    const u64 d_mass = e > 0 ? (thr - base_m) / e : cnt;
    const uint32_t d = uint32_t(min(u64(d_cnt), d_mass));  // < cnt: the group crosses
    drop_m = base_m + u64(d) * e;
    if (d > 0) {
      // Count select over the group's indices (bits 20..10, then 9..0) for the one of rank d.
      auto before = [&](u64, uint32_t c) { return c <= d; };
      u64 im = 0;
      uint32_t ic = 0, hi = 0;
      for (int pass = 0; pass < 2; ++pass) {
        clear_hist(sh);
        for (int64_t j0 = 0; j0 < V; j0 += kThreads) {
          const int64_t j = j0 + tid;
          const bool tie = j < V && order_key(l[j] / temp) == vkey;
          const bool part = tie && (pass == 0 || uint32_t(j >> 10) == hi);
          hist_add<false>(sh, part, pass == 0 ? uint32_t(j >> 10) : uint32_t(j & 0x3FF), 0);
        }
        select_bucket(sh, im, ic, b, before);
        hi = pass == 0 ? b : (hi << 10) | b;
      }
      idx_cut = hi;
    }
  }

  const float inv = float(double(1ull << kFixedBits) / double(tot - drop_m));
  __syncthreads();  // every read of a select is done before an aliased row is overwritten
  for (int64_t j = tid; j < V; j += kThreads) {
    const float s = l[j] / temp;
    const uint32_t key = order_key(s);
    const bool kept = !filter || key > vkey || (key == vkey && uint32_t(j) >= idx_cut);
    pr[j] = kept ? expf(s - mx) * inv : 0.0f;
  }
}

}  // namespace

void softmax_top_p(const SoftmaxTopPParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.logits && p.probs && p.vocab > 0 && p.vocab <= kSoftmaxTopPMaxVocab,
           "cuda::softmax_top_p: bad params (vocab " << p.vocab << ", at most " << kSoftmaxTopPMaxVocab << ")");
  TF_CHECK(p.temperature > 0.0f, "cuda::softmax_top_p: temperature must be > 0, got " << p.temperature);
  TF_CHECK(p.top_p > 0.0f, "cuda::softmax_top_p: top_p must be > 0, got " << p.top_p);
  const int64_t keep = std::min<int64_t>(p.vocab, std::max<int64_t>(1, p.min_tokens_to_keep));
  const uint32_t limit = uint32_t(p.vocab - keep);
  const bool filter = p.top_p < 1.0f && limit > 0;
  const float thresh = float(1.0 - double(p.top_p));  // as the CPU body computes it
  softmax_top_p_kernel<<<unsigned(p.n), kThreads, 0, stream>>>(p.logits, p.probs, p.vocab, p.temperature, thresh,
                                                               filter, limit);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
