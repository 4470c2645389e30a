#include "common.cuh"
#include "core/philox.h"
#include "speculative_sampling.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

struct DrawScratch {
  double warp_sum[kWarps];
  long long last_nz[kWarps];
  double total;
  int pick;
};

// The draw of one row whose entries are value(i), i < vocab (see the header's
// rule), by the whole block: thread t owns the contiguous chunk
// [t * c, (t + 1) * c), an inclusive scan of the chunks' double sums places u *
// total in one chunk, and that thread walks it. Returns the token in every
// thread, and the row's total through *total.
template <class Value>
__device__ int32_t block_draw(const Value& value, int64_t vocab, float u, DrawScratch& sh, double* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c = (vocab + kThreads - 1) / kThreads;
  const int64_t b = min(vocab, int64_t(threadIdx.x) * c), e = min(vocab, b + c);
  double s = 0.0;
  long long last = -1;
  for (int64_t i = b; i < e; ++i) {
    const float v = value(i);
    if (v > 0.0f) {
      s += double(v);
      last = i;
    }
  }
  // Inclusive scan of s over the block: within each warp, then over the warps' sums.
  double incl = s;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  long long wl = last;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) wl = max(wl, __shfl_xor_sync(0xffffffffu, wl, o));
  if (lane == 31) sh.warp_sum[warp] = incl;
  if (lane == 0) sh.last_nz[warp] = wl;
  if (threadIdx.x == 0) sh.pick = -1;
  __syncthreads();
  if (warp == 0) {
    double w = sh.warp_sum[lane];
    long long l = sh.last_nz[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l = max(l, __shfl_xor_sync(0xffffffffu, l, o));
    sh.warp_sum[lane] = w;  // now the inclusive sum up to warp `lane`
    if (lane == 31) sh.total = w;
    if (lane == 0) sh.last_nz[0] = l;
  }
  __syncthreads();
  if (warp > 0) incl += sh.warp_sum[warp - 1];
  const double tot = sh.total;
  const double target = double(u) * tot;
  const double excl = incl - s;
  // The first chunk whose inclusive sum exceeds the target (sums are
  // non-decreasing, so at most one thread sees excl <= target < incl).
  if (tot > 0.0 && s > 0.0 && incl > target && excl <= target) {
    double cum = excl;
    int pick = int(last);  // rounding inside the chunk left the target above it
    for (int64_t i = b; i < e; ++i) {
      const float v = value(i);
      if (v <= 0.0f) continue;
      cum += double(v);
      if (target < cum) {
        pick = int(i);
        break;
      }
    }
    sh.pick = pick;
  }
  __syncthreads();
  int32_t token = sh.pick;
  if (token < 0) token = sh.last_nz[0] >= 0 ? int32_t(sh.last_nz[0]) : 0;  // u * total at the very top, or all zero
  *total = tot;
  __syncthreads();  // the scratch is free for the next draw
  return token;
}

__global__ void __launch_bounds__(kThreads) draw_rows_kernel(DrawRowsParams p) {
  __shared__ DrawScratch sh;
  const float* row = p.probs + int64_t(blockIdx.x) * p.vocab;
  const float u = philox_uniform(p.seed, p.counter + blockIdx.x);
  double total;
  const int32_t t = block_draw([&](int64_t i) { return row[i]; }, p.vocab, u, sh, &total);
  if (threadIdx.x == 0) p.out[blockIdx.x] = t;
}

__global__ void __launch_bounds__(kThreads) verify_rows_kernel(VerifyRowsParams p) {
  __shared__ DrawScratch sh;
  __shared__ int rejected_at;
  const int64_t V = p.vocab;
  if (threadIdx.x == 0) {
    int k = int(p.g);
    for (int i = 0; i < int(p.g); ++i) {
      const int32_t x = p.x[i];
      const double px = p.p[int64_t(i) * V + x], qx = p.q[int64_t(i) * V + x];
      const double u = philox_uniform(p.seed, p.counter + uint64_t(i));
      if (!(qx > 0 ? u * qx < px : px > 0)) {
        k = i;
        break;
      }
    }
    rejected_at = k;
  }
  __syncthreads();
  const int k = rejected_at;
  const float* pk = p.p + int64_t(k) * V;
  double total;
  int32_t token;
  if (k == int(p.g)) {  // every proposal accepted: the bonus from p_g
    token = block_draw([&](int64_t i) { return pk[i]; }, V, philox_uniform(p.seed, p.counter + p.g), sh, &total);
  } else {
    const float u = philox_uniform(p.seed, p.counter + uint64_t(k) + 1);
    total = 0.0;
    if (p.residual) {
      const float* qk = p.q + int64_t(k) * V;
      token = block_draw([&](int64_t i) { return fmaxf(pk[i] - qk[i], 0.0f); }, V, u, sh, &total);
    }
    if (total <= 0.0) token = block_draw([&](int64_t i) { return pk[i]; }, V, u, sh, &total);
  }
  if (threadIdx.x == 0) {
    p.out[0] = k;
    p.out[1] = token;
    p.out[2] = k < int(p.g) ? 1 : 0;
  }
}

__global__ void expand_columns_kernel(ExpandColumnsParams p) {
  float* out = p.out + int64_t(blockIdx.x) * p.vocab;
  const float* in = p.in + int64_t(blockIdx.x) * p.k;
  for (int64_t i = threadIdx.x; i < p.vocab; i += blockDim.x) out[i] = p.fill;
  __syncthreads();  // the fill lands before any column written over it
  for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) out[p.ids[j]] = in[j];
}

}  // namespace

void draw_rows(const DrawRowsParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.probs && p.out && p.vocab > 0 && p.vocab < (int64_t(1) << 31), "cuda::draw_rows: bad params");
  draw_rows_kernel<<<unsigned(p.n), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void verify_rows(const VerifyRowsParams& p, cudaStream_t stream) {
  TF_CHECK(p.q && p.p && p.out && p.vocab > 0 && p.vocab < (int64_t(1) << 31) && p.g >= 0 &&
               p.g <= kMaxVerifyProposals,
           "cuda::verify_rows: bad params (g " << p.g << ", vocab " << p.vocab << ")");
  for (int64_t i = 0; i < p.g; ++i)
    TF_CHECK(p.x[i] >= 0 && p.x[i] < p.vocab, "cuda::verify_rows: proposal " << p.x[i] << " outside the vocabulary");
  verify_rows_kernel<<<1, kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void expand_columns(const ExpandColumnsParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.in && p.ids && p.out && p.k <= p.vocab, "cuda::expand_columns: bad params");
  expand_columns_kernel<<<unsigned(p.n), 256, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
