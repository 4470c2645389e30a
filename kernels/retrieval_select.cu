#include "common.cuh"
#include "retrieval_select.cuh"

namespace tf::cuda {
namespace {

constexpr int kScoreThreads = 256;
constexpr int kSelectThreads = 512;

// One warp per (row, chunk): lane e reads 16-byte vectors e, e + 32, ... of the
// chunk's chunk * head_dim keys (vector e = dims 8(e % vecs) .. of token e / vecs)
// and dots them with the matching 8 query values. Identical chunks give
// bit-identical scores (the order of the sums depends only on the shape), so
// the CPU's exact ties stay ties.
template <class T>
__global__ void __launch_bounds__(kScoreThreads) retrieval_score_kernel(RetrievalScoreParams p) {
  const int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (item >= p.rows * p.num_chunks) return;  // whole warps: item is uniform in a warp
  const int64_t row = item / p.num_chunks, c = item % p.num_chunks;
  const int vecs = int(p.head_dim / 8), n = int(p.chunk) * vecs;
  const T* K = static_cast<const T*>(p.k) + (row * p.capacity + c * p.chunk) * p.head_dim;
  const float* q = p.q_sum + row * p.head_dim;
  float dot = 0.0f;
  auto dot8 = [](const float* k8, float4 a, float4 b) {
    return a.x * k8[0] + a.y * k8[1] + a.z * k8[2] + a.w * k8[3] + b.x * k8[4] + b.y * k8[5] + b.z * k8[6] +
           b.w * k8[7];
  };
  if (32 % vecs == 0) {
    // head_dim 64/128/256: a lane always reads the same 8 dims, so its query
    // values load once.
    const int v = lane % vecs;
    const float4 qa = *reinterpret_cast<const float4*>(q + v * 8), qb = *reinterpret_cast<const float4*>(q + v * 8 + 4);
#pragma unroll 4
    for (int e = lane; e < n; e += 32) {
      float k8[8];
      load8_f32(K + int64_t(e) * 8, k8);
      dot += dot8(k8, qa, qb);
    }
  } else {
    for (int e = lane; e < n; e += 32) {
      const int v = e % vecs;
      float k8[8];
      load8_f32(K + int64_t(e) * 8, k8);
      dot += dot8(k8, *reinterpret_cast<const float4*>(q + v * 8), *reinterpret_cast<const float4*>(q + v * 8 + 4));
    }
  }
  dot = warp_sum(dot);
  if (lane == 0) p.scores[item] = dot;
}

// Order-preserving bits of an fp32 score: a > b  <=>  key(a) > key(b); -0 as +0.
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// How many threads before this one (in thread order) have `flag`, and the
// block's total. Every thread of the block must call it.
__device__ __forceinline__ int64_t block_count_before(bool flag, int64_t& total, int* warp_counts) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const unsigned m = __ballot_sync(0xffffffffu, flag);
  __syncthreads();  // warp_counts is free (read by the previous call)
  if (lane == 0) warp_counts[warp] = __popc(m);
  __syncthreads();
  int before = __popc(m & ((1u << lane) - 1u)), all = 0;
  for (int w = 0; w < nw; ++w) {
    const int c = warp_counts[w];
    before += w < warp ? c : 0;
    all += c;
  }
  total = all;
  return before;
}

// One block per (layer, KV head) row; see the header.
__global__ void __launch_bounds__(kSelectThreads) retrieval_select_kernel(RetrievalSelectParams p) {
  __shared__ uint32_t hist[256];
  __shared__ int warp_counts[32];
  __shared__ uint32_t found_digit, found_rem;
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x;
  const float* s = p.scores + row * p.num_chunks;
  int32_t* chunks = p.chunks + row * p.keep;
  const int64_t cand = p.num_chunks - 1;  // chunks 1 .. num_chunks - 1 compete ...
  const int64_t k = p.keep - 1;           // ... for keep - 1 places
  if (p.keep > 0 && threadIdx.x == 0) chunks[0] = 0;
  if (k > 0) {
    const bool all = k >= cand;
    // The k-th largest key, MSB digit first: each pass histograms the digit of
    // the candidates that match the digits found so far.
    uint32_t prefix = 0, mask = 0, rem = uint32_t(k);  // rem: places left among the matching ones
    for (int shift = 24; shift >= 0 && !all; shift -= 8) {
      for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
      __syncthreads();
      for (int64_t base = 0; base < cand; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        uint32_t digit = 256;  // no bin
        if (i < cand) {
          const uint32_t key = order_key(s[i + 1]);
          if ((key & mask) == prefix) digit = (key >> shift) & 255u;
        }
        // Scores of a row share their top bits: one atomic per distinct digit of the warp.
        const unsigned peers = __match_any_sync(0xffffffffu, digit);
        if (digit < 256 && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], uint32_t(__popc(peers)));
      }
      __syncthreads();
      if (threadIdx.x < 32) {
        // Lane l holds bins 255 - 8l .. 248 - 8l; the lane whose range holds the
        // rem-th largest finds its digit.
        uint32_t local = 0;
        for (int j = 0; j < 8; ++j) local += hist[255 - 8 * lane - j];
        uint32_t incl = local;
        for (int o = 1; o < 32; o <<= 1) {
          const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += y;
        }
        uint32_t acc = incl - local;
        if (acc < rem && rem <= incl)
          for (int j = 0; j < 8; ++j) {
            const int b = 255 - 8 * lane - j;
            if (acc + hist[b] >= rem) {
              found_digit = uint32_t(b);
              found_rem = rem - acc;
              break;
            }
            acc += hist[b];
          }
      }
      __syncthreads();
      prefix |= found_digit << shift;
      mask |= 0xFFu << shift;
      rem = found_rem;
    }
    // prefix is now the k-th largest key; take every key above it and the
    // first `rem` equal to it, in index order, which is also the output order.
    int64_t seen_eq = 0, out = 1;
    for (int64_t base = 0; base < cand; base += blockDim.x) {
      const int64_t i = base + threadIdx.x;
      const bool valid = i < cand;
      const uint32_t key = valid ? order_key(s[i + 1]) : 0u;
      const bool gt = valid && (all || key > prefix), eq = valid && !all && key == prefix;
      int64_t n_eq, n_sel;
      const int64_t eq_before = block_count_before(eq, n_eq, warp_counts);
      const bool sel = gt || (eq && seen_eq + eq_before < int64_t(rem));
      const int64_t sel_before = block_count_before(sel, n_sel, warp_counts);
      if (sel) chunks[out + sel_before] = int32_t(i + 1);
      seen_eq += n_eq;
      out += n_sel;
    }
  }
  __syncthreads();  // the chunk ids written above are visible to the whole block
  const int64_t kept = p.keep * p.chunk, region = kept + p.remainder, rem_from = p.num_chunks * p.chunk;
  int32_t* slots = p.slots + row * region;
  for (int64_t j = threadIdx.x; j < region; j += blockDim.x)
    slots[j] = int32_t(j < kept ? int64_t(chunks[j / p.chunk]) * p.chunk + j % p.chunk : rem_from + (j - kept));
}

}  // namespace

void retrieval_scores(const RetrievalScoreParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.num_chunks == 0) return;
  TF_CHECK(p.k && p.q_sum && p.scores && p.chunk >= 1 && p.head_dim % 8 == 0 && p.head_dim > 0 &&
               p.num_chunks * p.chunk <= p.capacity,
           "cuda::retrieval_scores: bad params (head_dim " << p.head_dim << " must be a multiple of 8)");
  const int64_t warps = p.rows * p.num_chunks, per_block = kScoreThreads / 32;
  const int64_t blocks = (warps + per_block - 1) / per_block;
  TF_CHECK(blocks < (int64_t(1) << 31), "cuda::retrieval_scores: " << warps << " chunks exceed one grid");
  TF_DISPATCH_HALF(p.dtype, T, { retrieval_score_kernel<T><<<unsigned(blocks), kScoreThreads, 0, stream>>>(p); });
  CUDA_CHECK_LAUNCH();
}

void retrieval_select(const RetrievalSelectParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.keep * p.chunk + p.remainder == 0) return;
  TF_CHECK(p.slots && (p.keep == 0 || p.chunks) && (p.keep <= 1 || p.scores) && p.keep >= 0 &&
               p.keep <= p.num_chunks && p.chunk >= 1 && p.remainder >= 0 && p.remainder < p.chunk,
           "cuda::retrieval_select: bad params");
  TF_CHECK(p.rows < (int64_t(1) << 31) && (p.num_chunks + 1) * p.chunk <= (int64_t(1) << 31),
           "cuda::retrieval_select: " << p.rows << " rows of " << p.num_chunks << " chunks exceed int32 slots");
  retrieval_select_kernel<<<unsigned(p.rows), kSelectThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
