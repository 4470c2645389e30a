#include "common.cuh"
#include "convert.cuh"

namespace tf::cuda {
namespace {

template <class T>
__global__ void cast_kernel(T* __restrict__ out, const float* __restrict__ in, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(in[i]);
}

}  // namespace

void cast_from_f32(const CastParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  TF_CHECK(p.in && p.out, "cuda::cast_from_f32: null pointers");
  const int64_t b = (p.count + 255) / 256;
  const int blocks = int(b < 4096 ? b : 4096);
  TF_DISPATCH_HALF(p.dtype, T, {
    cast_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(p.out), p.in, p.count);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
