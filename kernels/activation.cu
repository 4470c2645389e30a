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

// Prefill shapes: 16-byte vectors, blockIdx.y = row, so no division per
// element. Each element is silu_mul_f32 rounded once, as in the kernel above,
// so both give the same bits.
template <class T>
__global__ void silu_mul_vec8_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out,
                                     int64_t cols, int64_t ld) {
  const int64_t j = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (j >= cols) return;
  const int64_t src = int64_t(blockIdx.y) * ld + j;
  const uint4 g = *reinterpret_cast<const uint4*>(gate + src), u = *reinterpret_cast<const uint4*>(up + src);
  const T* ge = reinterpret_cast<const T*>(&g);
  const T* ue = reinterpret_cast<const T*>(&u);
  uint4 o;
  T* oe = reinterpret_cast<T*>(&o);
#pragma unroll
  for (int i = 0; i < 8; ++i) oe[i] = from_f32<T>(silu_mul_f32(to_f32(ge[i]), to_f32(ue[i])));
  *reinterpret_cast<uint4*>(out + int64_t(blockIdx.y) * cols + j) = o;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  TF_CHECK(p.gate && p.up && p.out, "cuda::silu_mul: null pointer");
  TF_CHECK(p.cols == 0 || (p.cols > 0 && p.ld >= p.cols && p.count % p.cols == 0),
           "cuda::silu_mul: rows of " << p.cols << " spaced " << p.ld << " do not tile " << p.count << " elements");
  // Flat input as rows: one row of `count` (grid.x covers it), or the given rows.
  const int64_t cols = p.cols > 0 ? p.cols : p.count, ld = p.cols > 0 ? p.ld : p.count, rows = p.count / cols;
  if (p.vec8 && cols % 8 == 0 && ld % 8 == 0 && rows <= 65535 && (cols / 8 + 255) / 256 <= 0x7fffffff &&
      aligned16(p.gate) && aligned16(p.up) && aligned16(p.out)) {
    const int threads = 256;
    dim3 grid(unsigned((cols / 8 + threads - 1) / threads), unsigned(rows));
    TF_DISPATCH_HALF(p.dtype, T, {
      silu_mul_vec8_kernel<T><<<grid, threads, 0, stream>>>(static_cast<const T*>(p.gate), static_cast<const T*>(p.up),
                                                             static_cast<T*>(p.out), cols, ld);
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((p.count + threads - 1) / threads, 65535 * 8);
  TF_DISPATCH_HALF(p.dtype, T, {
    launch_step(silu_mul_kernel<T>, dim3(unsigned(blocks)), dim3(threads), 0, stream, static_cast<const T*>(p.gate),
                static_cast<const T*>(p.up), static_cast<T*>(p.out), p.count, p.cols, p.ld);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
