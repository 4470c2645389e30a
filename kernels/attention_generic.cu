#include <cmath>

#include "attention_generic.cuh"
#include "common.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxPerLane = 8;  // head_dim <= 256

template <class T>
__global__ void attention_generic_kernel(AttentionGenericParams p) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (warp >= p.n * p.num_heads) return;
  const int64_t i = warp / p.num_heads, h = warp % p.num_heads;
  const int64_t g = h / (p.num_heads / p.num_kv_heads);
  const int D = int(p.head_dim);
  const T* q = static_cast<const T*>(p.q) + (i * p.num_heads + h) * D;
  const T* K = static_cast<const T*>(p.k_cache) + g * p.head_stride;
  const T* V = static_cast<const T*>(p.v_cache) + g * p.head_stride;
  float qv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int d = lane + 32 * e;
    qv[e] = d < D ? to_f32(q[d]) * p.scale : 0.0f;
    acc[e] = 0.0f;
  }
  const int64_t last = min(int64_t(*p.kv_length) - 1, int64_t(p.q_slots[i]));
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j <= last; ++j) {
    const T* kr = K + j * p.token_stride;
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int d = lane + 32 * e;
      if (d < D) s += qv[e] * to_f32(kr[d]);
    }
    s = warp_sum(s);
    const float mn = fmaxf(m, s), a = __expf(m - mn), w = __expf(s - mn);
    l = l * a + w;
    const T* vr = V + j * p.token_stride;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int d = lane + 32 * e;
      if (d < D) acc[e] = acc[e] * a + w * to_f32(vr[d]);
    }
    m = mn;
  }
  T* o = static_cast<T*>(p.out) + (i * p.num_heads + h) * D;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < D) o[d] = from_f32<T>(l > 0.0f ? acc[e] / l : 0.0f);
  }
}

}  // namespace

void attention_generic(const AttentionGenericParams& p0, cudaStream_t stream) {
  AttentionGenericParams p = p0;
  TF_CHECK(p.q && p.k_cache && p.v_cache && p.out && p.kv_length && p.q_slots, "cuda::attention_generic: null pointer");
  TF_CHECK(p.head_dim > 0 && p.head_dim <= 32 * kMaxPerLane,
           "cuda::attention_generic: head_dim " << p.head_dim << " outside 1.." << 32 * kMaxPerLane);
  TF_CHECK(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0, "cuda::attention_generic: bad head counts");
  if (p.n == 0) return;
  if (p.head_stride == 0) p.head_stride = p.token_stride;
  if (p.scale == 0.0f) p.scale = 1.0f / std::sqrt(float(p.head_dim));
  const int64_t warps = p.n * p.num_heads;
  const int threads = 128;
  const unsigned blocks = unsigned((warps * 32 + threads - 1) / threads);
  TF_DISPATCH_HALF(p.dtype, T, { attention_generic_kernel<T><<<blocks, threads, 0, stream>>>(p); });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
