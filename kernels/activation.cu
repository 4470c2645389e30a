#include "activation.cuh"
#include "common.cuh"
#include "pdl.cuh"

namespace tf::cuda {
namespace {

__device__ __forceinline__ float silu_times(float g, float u) { return (g / (1.0f + __expf(-g))) * u; }

template <class T>
__global__ void silu_mul_kernel(const T* gate, const T* up, T* out, int64_t count) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    store_f32(out + i, silu_times(load_f32(gate + i), load_f32(up + i)));
}

// gu rows [gate | up] of a stacked gate/up GEMM (2 * cols each) -> out [rows, cols].
template <class T>
__global__ void silu_mul_halves_kernel(const T* __restrict__ gu, T* __restrict__ out, int64_t count, int64_t cols) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const T* row = gu + r * 2 * cols;
    store_f32(out + i, silu_times(load_f32(row + c), load_f32(row + cols + c)));
  }
}

}  // namespace

void silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  TF_CHECK(p.gate && p.out && (p.up || p.halves > 0), "cuda::silu_mul: null pointer");
  TF_CHECK(p.halves == 0 || p.count % p.halves == 0, "cuda::silu_mul: count " << p.count << " is not rows x " << p.halves);
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((p.count + threads - 1) / threads, 65535 * 8);
  TF_DISPATCH_HALF(p.dtype, T, {
    if (p.halves > 0)
      launch_pdl(silu_mul_halves_kernel<T>, dim3(unsigned(blocks)), dim3(threads), 0, stream,
                 static_cast<const T*>(p.gate), static_cast<T*>(p.out), p.count, p.halves);
    else
      launch_pdl(silu_mul_kernel<T>, dim3(unsigned(blocks)), dim3(threads), 0, stream, static_cast<const T*>(p.gate),
                 static_cast<const T*>(p.up), static_cast<T*>(p.out), p.count);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
