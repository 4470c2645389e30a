#include "activation.cuh"
#include "common.cuh"

namespace tf::cuda {
namespace {

template <class T>
__global__ void silu_mul_kernel(const T* gate, const T* up, T* out, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = load_f32(gate + i);
    store_f32(out + i, (g / (1.0f + __expf(-g))) * load_f32(up + i));
  }
}

}  // namespace

void silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  TF_CHECK(p.gate && p.up && p.out, "cuda::silu_mul: null pointer");
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((p.count + threads - 1) / threads, 65535 * 8);
  TF_DISPATCH_HALF(p.dtype, T, {
    silu_mul_kernel<T><<<unsigned(blocks), threads, 0, stream>>>(
        static_cast<const T*>(p.gate), static_cast<const T*>(p.up), static_cast<T*>(p.out), p.count);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
