#include <cstdlib>
#include <cstring>

#include "pdl.cuh"

namespace tf::cuda {
namespace {

bool device_supports_pdl() {
  static const bool ok = [] {
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major >= 9;  // griddepcontrol is sm_90+
  }();
  return ok;
}

bool env_allows_pdl() {
  static const bool on = [] {
    const char* s = std::getenv("TRIFORCE_PDL");
    if (!s || !*s) return true;
    TF_CHECK(std::strcmp(s, "0") == 0 || std::strcmp(s, "1") == 0, "TRIFORCE_PDL=" << s << ": expected 0 or 1");
    return std::strcmp(s, "1") == 0;
  }();
  return on;
}

int g_override = -1;  // -1: the environment's choice

}  // namespace

void set_pdl_enabled(bool on) { g_override = on ? 1 : 0; }

bool pdl_enabled() {
  const bool want = g_override >= 0 ? g_override == 1 : env_allows_pdl();
  return want && device_supports_pdl();
}

}  // namespace tf::cuda
