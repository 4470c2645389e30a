#include "common.cuh"
#include "kv_gather.cuh"

namespace tf::cuda {
namespace {

// grid (m, layers * kv_heads); threads over head_dim / 2 pairs.
template <class T>
__global__ void kv_gather_kernel(KvGatherParams p) {
  const int64_t j = blockIdx.x, row = blockIdx.y;  // row = layer * kv_heads + head
  const int64_t src = p.per_head ? p.src_slots[row * p.m + j] : p.src_slots[j];
  const int64_t D = p.head_dim, half = D / 2;
  const T* ks = static_cast<const T*>(p.src_k) + (row * p.src_capacity + src) * D;
  const T* vs = static_cast<const T*>(p.src_v) + (row * p.src_capacity + src) * D;
  T* kd = static_cast<T*>(p.dst_k) + (row * p.dst_capacity + p.dst_slot0 + j) * D;
  T* vd = static_cast<T*>(p.dst_v) + (row * p.dst_capacity + p.dst_slot0 + j) * D;
  const int delta = p.rotate_delta ? p.rotate_delta[j] : 0;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float x1 = to_f32(ks[i]), x2 = to_f32(ks[i + half]);
    if (delta != 0) {
      float s, c;
      sincosf(p.inv_freq[i] * float(delta), &s, &c);
      kd[i] = from_f32<T>(x1 * c - x2 * s);
      kd[i + half] = from_f32<T>(x2 * c + x1 * s);
    } else {
      kd[i] = ks[i];
      kd[i + half] = ks[i + half];
    }
    vd[i] = vs[i];
    vd[i + half] = vs[i + half];
  }
}

// The gather without rotation, one thread per 16-byte vector of K and of V
// (the rotating kernel above moves 2-byte elements, which at the retrieval
// cache's 4M slots of a 7B model is launch- and load-bound).
// grid (m * head_dim / 8 vectors / 256, layers * kv_heads); 32-bit index math.
template <class T>
__global__ void kv_copy_slots_kernel(KvGatherParams p) {
  const int vecs = int(p.head_dim / 8);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= int(p.m) * vecs) return;
  const int64_t row = blockIdx.y;  // layer * kv_heads + head
  const int j = i / vecs, v = i - j * vecs;
  const int64_t src = p.per_head ? p.src_slots[row * p.m + j] : p.src_slots[j];
  const int64_t from = (row * p.src_capacity + src) * p.head_dim + v * 8;
  const int64_t to = (row * p.dst_capacity + p.dst_slot0 + j) * p.head_dim + v * 8;
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dst_k) + to) = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.src_k) + from);
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dst_v) + to) = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.src_v) + from);
}

// One warp per (head, chunk): sum the chunk's keys, dot with the group query.
template <class T>
__global__ void chunk_score_kernel(ChunkScoreParams p) {
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= p.kv_heads * p.num_chunks) return;
  const int64_t g = w / p.num_chunks, c = w % p.num_chunks;
  const T* K = static_cast<const T*>(p.k) + (g * p.capacity + c * p.chunk) * p.head_dim;
  const float* q = p.q_sum + g * p.head_dim;
  float dot = 0.0f;
  for (int64_t d = lane; d < p.head_dim; d += 32) {
    float s = 0.0f;
    for (int64_t t = 0; t < p.chunk; ++t) s += to_f32(K[t * p.head_dim + d]);
    dot += q[d] * s;
  }
  dot = warp_sum(dot);
  if (lane == 0) p.scores[g * p.num_chunks + c] = dot / float(p.chunk);
}

}  // namespace

void kv_gather(const KvGatherParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  TF_CHECK(p.src_k && p.src_v && p.dst_k && p.dst_v && p.src_slots && p.head_dim % 2 == 0,
           "cuda::kv_gather: bad params");
  TF_CHECK(!p.rotate_delta || p.inv_freq, "cuda::kv_gather: rotation needs inv_freq");
  TF_CHECK(p.dst_slot0 >= 0 && p.dst_slot0 + p.m <= p.dst_capacity,
           "cuda::kv_gather: destination slots exceed capacity " << p.dst_capacity);
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (!p.rotate_delta && p.head_dim % 8 == 0 && aligned(p.src_k) && aligned(p.src_v) && aligned(p.dst_k) &&
      aligned(p.dst_v)) {
    const int64_t vectors = p.m * (p.head_dim / 8), rows = p.layers * p.kv_heads;
    TF_CHECK(vectors < (int64_t(1) << 31) && rows <= 65535,
             "cuda::kv_gather: " << rows << " rows of " << vectors << " vectors exceed one grid");
    const dim3 grid(unsigned((vectors + 255) / 256), unsigned(rows));
    TF_DISPATCH_HALF(p.dtype, T, { kv_copy_slots_kernel<T><<<grid, 256, 0, stream>>>(p); });
    CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(unsigned(p.m), unsigned(p.layers * p.kv_heads));
  TF_DISPATCH_HALF(p.dtype, T, { kv_gather_kernel<T><<<grid, 64, 0, stream>>>(p); });
  CUDA_CHECK_LAUNCH();
}

void chunk_scores(const ChunkScoreParams& p, cudaStream_t stream) {
  if (p.num_chunks == 0) return;
  TF_CHECK(p.k && p.q_sum && p.scores && p.chunk >= 1, "cuda::chunk_scores: bad params");
  const int64_t warps = p.kv_heads * p.num_chunks;
  const unsigned blocks = unsigned((warps * 32 + 255) / 256);
  TF_DISPATCH_HALF(p.dtype, T, { chunk_score_kernel<T><<<blocks, 256, 0, stream>>>(p); });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
