// Shared by every kernel file: error checks that throw tf::Error with the
// caller's file:line, and (under nvcc only) f16/bf16 load/store helpers plus
// warp/block reductions. Everything accumulates in fp32.
//
// This header is also included by host-only C++ (the tests, later ops/), so
// CUDA-only syntax stays behind __CUDACC__.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/tensor.h"

namespace tf::cuda {

inline void cuda_check_at(cudaError_t e, const char* file, int line, const char* expr) {
  if (e != cudaSuccess)
    ::tf::fail_at(file, line,
                  std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + expr);
}

inline void cublas_check_at(cublasStatus_t s, const char* file, int line, const char* expr) {
  if (s != CUBLAS_STATUS_SUCCESS)
    ::tf::fail_at(file, line, std::string("cuBLAS error ") + cublasGetStatusString(s) + " in " + expr);
}

// Storage dtypes the kernels take for activations / KV (accumulation is fp32).
inline bool is_half_dtype(DType t) { return t == DType::F16 || t == DType::BF16; }

}  // namespace tf::cuda

#define CUDA_CHECK(expr) ::tf::cuda::cuda_check_at((expr), __FILE__, __LINE__, #expr)
#define CUBLAS_CHECK(expr) ::tf::cuda::cublas_check_at((expr), __FILE__, __LINE__, #expr)
// After a launch: configuration errors surface here, at the launcher's line.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tf::cuda {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <class T> __device__ __forceinline__ float load_f32(const T* p) { return to_f32(*p); }
template <class T> __device__ __forceinline__ void store_f32(T* p, float x) { *p = from_f32<T>(x); }

// 8 consecutive 16-bit elements (one 16-byte transaction) -> 8 floats.
template <class T> __device__ __forceinline__ void load8_f32(const T* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_f32(e[i]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace tf::cuda

// Instantiate a templated launch body for the two 16-bit storage types.
#define TF_DISPATCH_HALF(dtype, T, ...)                                          \
  do {                                                                           \
    if ((dtype) == ::tf::DType::F16) {                                           \
      using T = __half;                                                          \
      __VA_ARGS__;                                                               \
    } else if ((dtype) == ::tf::DType::BF16) {                                   \
      using T = __nv_bfloat16;                                                   \
      __VA_ARGS__;                                                               \
    } else {                                                                     \
      TF_FAIL("kernel: dtype " << ::tf::dtype_name(dtype) << " is not f16/bf16"); \
    }                                                                            \
  } while (0)
#endif
