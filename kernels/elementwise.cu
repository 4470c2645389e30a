#include "common.cuh"
#include "core/philox.h"
#include "elementwise.cuh"

namespace tf::cuda {
namespace {

template <class T>
__global__ void add_kernel(T* __restrict__ r, const T* __restrict__ x, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    r[i] = from_f32<T>(to_f32(r[i]) + to_f32(x[i]));
}

// grid (n, kv_heads); 16-byte copies (head_dim is a multiple of 8 halves).
__global__ void kv_write_kernel(uint4* __restrict__ kc, uint4* __restrict__ vc, const uint4* __restrict__ kn,
                                const uint4* __restrict__ vn, int64_t slot0, const int32_t* __restrict__ slots,
                                int64_t kvh, int64_t vecs, int64_t cap) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int64_t slot = slots ? int64_t(slots[t]) : slot0 + t;
  if (slot < 0 || slot >= cap) return;  // the host checked the claim; never write outside the layer
  const int64_t src = (t * kvh + h) * vecs, dst = (h * cap + slot) * vecs;
  for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
    kc[dst + j] = kn[src + j];
    vc[dst + j] = vn[src + j];
  }
}

template <class T>
__global__ void random_kernel(T* __restrict__ out, RandomFillParams p) {
  const uint64_t seed = p.seed;
  const float mean = p.mean, scale = p.scale;
  const bool uniform = p.uniform;
  for (int64_t li = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; li < p.count;
       li += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p.first + (p.cols > 0 ? (li / p.cols) * p.full_cols + li % p.cols : li);
    const float u1 = philox_uniform(seed, 2 * uint64_t(i));
    float v;
    if (uniform) {
      v = mean + scale * (2.0f * u1 - 1.0f);
    } else {
      const float u2 = philox_uniform(seed, 2 * uint64_t(i) + 1);
      const float r = sqrtf(-2.0f * logf(fmaxf(u1, 1e-12f)));
      v = mean + scale * r * cospif(2.0f * u2);
    }
    out[li] = from_f32<T>(v);
  }
}

int blocks_for(int64_t count) {
  const int64_t b = (count + 255) / 256;
  return int(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

__global__ void set_i32_kernel(int32_t* p, int32_t value) { *p = value; }

}  // namespace

void set_i32(int32_t* p, int32_t value, cudaStream_t stream) {
  set_i32_kernel<<<1, 1, 0, stream>>>(p, value);
  CUDA_CHECK_LAUNCH();
}

void add_inplace(const AddParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  TF_CHECK(p.residual && p.x, "cuda::add_inplace: null pointers");
  TF_DISPATCH_HALF(p.dtype, T, {
    add_kernel<T><<<blocks_for(p.count), 256, 0, stream>>>(static_cast<T*>(p.residual),
                                                            static_cast<const T*>(p.x), p.count);
  });
  CUDA_CHECK_LAUNCH();
}

void kv_write(const KvWriteParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TF_CHECK(p.k_cache && p.v_cache && p.k_new && p.v_new && p.kv_heads > 0 && p.head_dim % 8 == 0,
           "cuda::kv_write: bad params (head_dim " << p.head_dim << " must be a multiple of 8)");
  TF_CHECK(p.slots || (p.slot >= 0 && p.slot + p.n <= p.capacity),
           "cuda::kv_write: slots [" << p.slot << ", " << p.slot + p.n << ") exceed capacity " << p.capacity);
  TF_CHECK(is_half_dtype(p.dtype), "cuda::kv_write: dtype must be f16/bf16");
  const int64_t vecs = p.head_dim / 8;
  kv_write_kernel<<<dim3(unsigned(p.n), unsigned(p.kv_heads)), 32, 0, stream>>>(
      static_cast<uint4*>(p.k_cache), static_cast<uint4*>(p.v_cache), static_cast<const uint4*>(p.k_new),
      static_cast<const uint4*>(p.v_new), p.slot, p.slots, p.kv_heads, vecs, p.capacity);
  CUDA_CHECK_LAUNCH();
}

void random_fill(const RandomFillParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  TF_CHECK(p.out, "cuda::random_fill: null output");
  TF_CHECK(p.cols == 0 || (p.cols > 0 && p.full_cols >= p.cols && p.count % p.cols == 0),
           "cuda::random_fill: window of " << p.cols << " columns in rows of " << p.full_cols
                                           << " does not tile " << p.count << " elements");
  if (p.dtype == DType::F32) {
    random_kernel<float><<<blocks_for(p.count), 256, 0, stream>>>(static_cast<float*>(p.out), p);
  } else {
    TF_DISPATCH_HALF(p.dtype, T, { random_kernel<T><<<blocks_for(p.count), 256, 0, stream>>>(static_cast<T*>(p.out), p); });
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
