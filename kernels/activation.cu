#include "activation.cuh"
#include "activation_tile.cuh"
#include "common.cuh"
#include "pdl.cuh"

namespace tf::cuda {
namespace {

// One kernel for the flat and the row-strided inputs: the arithmetic is the
// same instructions either way, so the stacked gate/up path keeps the bits.
template <class T>
__global__ void silu_mul_kernel(const T* gate, const T* up, T* out, int64_t count, int64_t cols, int64_t ld) {
  pdl_wait();  // kernels/pdl.cuh: nothing above reads activations or writes
  pdl_trigger();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t src = cols > 0 ? (i / cols) * ld + i % cols : i;
    store_f32(out + i, silu_mul_f32(load_f32(gate + src), load_f32(up + src)));
  }
}

}  // namespace

void silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  TF_CHECK(p.gate && p.up && p.out, "cuda::silu_mul: null pointer");
  TF_CHECK(p.cols == 0 || (p.cols > 0 && p.ld >= p.cols && p.count % p.cols == 0),
           "cuda::silu_mul: rows of " << p.cols << " spaced " << p.ld << " do not tile " << p.count << " elements");
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((p.count + threads - 1) / threads, 65535 * 8);
  TF_DISPATCH_HALF(p.dtype, T, {
    launch_step(silu_mul_kernel<T>, dim3(unsigned(blocks)), dim3(threads), 0, stream, static_cast<const T*>(p.gate),
                static_cast<const T*>(p.up), static_cast<T*>(p.out), p.count, p.cols, p.ld);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
