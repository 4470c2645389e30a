#include <cublas_v2.h>

#include "common.cuh"
#include "gemm.cuh"

namespace tf::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F32: return CUDA_R_32F;
    default: TF_FAIL("cuda::gemm: unsupported dtype " << dtype_name(t));
  }
}

// One handle per device for the process (cuBLAS handles are expensive to make).
cublasHandle_t handle_for_current_device() {
  static cublasHandle_t handles[64] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  TF_CHECK(dev >= 0 && dev < 64, "cuda::gemm: device index " << dev << " out of range");
  if (!handles[dev]) {
    CUBLAS_CHECK(cublasCreate(&handles[dev]));
    CUBLAS_CHECK(cublasSetMathMode(handles[dev], CUBLAS_DEFAULT_MATH));
  }
  return handles[dev];
}

}  // namespace

void gemm(const GemmParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.out == 0) return;
  TF_CHECK(p.x && p.w && p.y && p.in > 0, "cuda::gemm: bad params");
  TF_CHECK(p.y_dtype == p.dtype || p.y_dtype == DType::F32, "cuda::gemm: y must be the input dtype or f32");
  cublasHandle_t h = handle_for_current_device();
  CUBLAS_CHECK(cublasSetStream(h, stream));
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(p.out), int(p.n), int(p.in), &alpha, p.w,
                            cuda_type(p.dtype), int(p.in), p.x, cuda_type(p.dtype), int(p.in), &beta, p.y,
                            cuda_type(p.y_dtype), int(p.out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tf::cuda
