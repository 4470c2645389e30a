#include "common.cuh"
#include "pdl.cuh"
#include "core/philox.h"
#include "sampling.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;

__global__ void argmax_kernel(ArgmaxParams p) {
  pdl_wait();  // reads only the previous kernels' output (the logits)
  const int64_t vocab = p.vocab;
  const float* r = p.x + int64_t(blockIdx.x) * vocab;
  // Each thread: the lowest of its indices among the maxima of its non-NaN
  // entries (a strictly larger value replaces; -inf is taken only while
  // nothing is held; NaN never compares true).
  float best = -INFINITY;
  int64_t bi = vocab;  // "none yet"
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = r[i];
    if (v > best || (bi == vocab && v == best)) {
      best = v;
      bi = i;
    }
  }
  // Reduce (value desc, index asc) across the block: the lowest index of the
  // row's maxima, whatever the thread count or order.
  __shared__ float sv[kThreads / 32];
  __shared__ int64_t si[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) {
      best = ov;
      bi = oi;
    }
  }
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = bi;
  }
  __syncthreads();
  pdl_trigger();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < int(blockDim.x >> 5); ++w)
    if (sv[w] > best || (sv[w] == best && si[w] < bi)) {
      best = sv[w];
      bi = si[w];
    }
  int64_t id;
  if (!p.ids) {
    // argmax_lowest: a NaN first entry wins (its scan starts from it); else bi
    // (never "none": entry 0 is not NaN).
    id = isnan(r[0]) || bi == vocab ? 0 : bi;
  } else if (p.ids[0] == 0 && isnan(r[0])) {
    id = 0;  // the full row's entry 0 is that NaN
  } else if (bi == vocab) {
    // Every held logit is NaN: the maximum of the full row is the -inf of the
    // first id outside the set (there is one, or entry 0 was NaN above).
    id = p.first_missing < p.full_vocab ? p.first_missing : 0;
  } else if (best > -INFINITY) {
    id = p.ids[bi];  // ids ascend, so the lowest held index is the lowest id
  } else {
    // The maximum is -inf: the lowest id holding -inf, held or not.
    id = min(int64_t(p.ids[bi]), p.first_missing);
  }
  p.out[blockIdx.x] = int32_t(id);
}

// One block per row; thread t owns the contiguous chunk [t*c, (t+1)*c).
__global__ void sample_kernel(const float* __restrict__ probs, int32_t* __restrict__ out, int64_t vocab,
                              uint64_t seed, uint64_t offset) {
  __shared__ float part[kThreads];
  __shared__ int sel_chunk;
  __shared__ float sel_base, target_sh;
  const int64_t row = blockIdx.x;
  const float* pr = probs + row * vocab;
  const int64_t c = (vocab + blockDim.x - 1) / blockDim.x;
  const int64_t b = int64_t(threadIdx.x) * c, e = min(vocab, b + c);
  float s = 0.0f;
  for (int64_t i = b; i < e; ++i) s += pr[i];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int t = 0; t < int(blockDim.x); ++t) total += part[t];
    const float u = philox_uniform(seed, offset + uint64_t(row));
    const float target = u * total;
    float acc = 0.0f;
    int chunk = -1;
    int last_nz = -1;
    float last_base = 0.0f;
    for (int t = 0; t < int(blockDim.x); ++t) {
      if (part[t] > 0.0f) {
        last_nz = t;
        last_base = acc;
      }
      if (chunk < 0 && acc + part[t] > target && part[t] > 0.0f) {
        chunk = t;
        sel_base = acc;
      }
      acc += part[t];
    }
    if (chunk < 0) {
      chunk = last_nz;
      sel_base = last_base;
    }
    sel_chunk = chunk;
    target_sh = target;
  }
  __syncthreads();
  if (int(threadIdx.x) == sel_chunk) {
    float acc = sel_base;
    int64_t pick = -1, last_nz = b;
    for (int64_t i = b; i < e; ++i) {
      if (pr[i] > 0.0f) last_nz = i;
      acc += pr[i];
      if (acc > target_sh && pr[i] > 0.0f) {
        pick = i;
        break;
      }
    }
    out[row] = int32_t(pick >= 0 ? pick : last_nz);
  } else if (threadIdx.x == 0 && sel_chunk < 0) {
    out[row] = 0;  // an all-zero row
  }
}

}  // namespace

void argmax(const ArgmaxParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.x && p.out && p.vocab > 0, "cuda::argmax: bad params");
  TF_CHECK(!p.ids || (p.full_vocab >= p.vocab && p.first_missing >= 0 && p.first_missing <= p.full_vocab),
           "cuda::argmax: a reduced vocabulary of " << p.vocab << " ids needs its full vocabulary");
  launch_step(argmax_kernel, dim3(unsigned(p.n)), dim3(kThreads), 0, stream, p);
}

void sample(const SampleParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.probs && p.out && p.vocab > 0, "cuda::sample: bad params");
  sample_kernel<<<unsigned(p.n), kThreads, 0, stream>>>(p.probs, p.out, p.vocab, p.seed, p.offset);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
