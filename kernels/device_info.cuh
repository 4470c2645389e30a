// Launch-free device queries for `triforce info` and the results metadata:
// what GPU this is and which CUDA runtime, driver, cuBLAS and NCCL it runs.
#pragma once
#include <string>

namespace tf::cuda {

// One line per visible device plus the library versions; "no CUDA device"
// when the runtime finds none (a build machine without a GPU).
std::string device_summary();

}  // namespace tf::cuda
