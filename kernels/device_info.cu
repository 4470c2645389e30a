#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <sstream>

#include "device_info.cuh"

namespace tf::cuda {

std::string device_summary() {
  std::ostringstream os;
  int runtime = 0, driver = 0, ndev = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  int nccl = 0;
  ncclGetVersion(&nccl);
  os << "CUDA runtime " << runtime / 1000 << "." << (runtime % 1000) / 10 << ", driver " << driver / 1000 << "."
     << (driver % 1000) / 10 << ", cuBLASLt " << cublasLtGetVersion() << ", NCCL " << nccl << "\n";
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    os << "no CUDA device\n";
    return os.str();
  }
  for (int d = 0; d < ndev; ++d) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, d);
    os << "GPU " << d << ": " << p.name << ", sm_" << p.major << p.minor << ", " << p.multiProcessorCount
       << " SMs, " << (p.totalGlobalMem >> 20) << " MiB, L2 " << (p.l2CacheSize >> 20) << " MiB\n";
  }
  return os.str();
}

}  // namespace tf::cuda
