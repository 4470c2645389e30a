#include <cstdlib>
#include <cstring>

#include "pdl.cuh"

namespace tf::cuda {

bool pdl_enabled() {
  static const bool on = [] {
    const char* s = std::getenv("TRIFORCE_PDL");
    if (s && *s) {
      TF_CHECK(std::strcmp(s, "0") == 0 || std::strcmp(s, "1") == 0, "TRIFORCE_PDL=" << s << ": expected 0 or 1");
      if (std::strcmp(s, "0") == 0) return false;
    }
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major >= 9;  // griddepcontrol is sm_90+
  }();
  return on;
}

}  // namespace tf::cuda
