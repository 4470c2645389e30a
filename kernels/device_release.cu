#include "device_release.cuh"

#include <algorithm>
#include <mutex>
#include <vector>

#include <cuda_runtime.h>

namespace tf::cuda {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<void (*)()> releases;
};
Registry& registry() {
  static Registry* r = new Registry;  // used from owners' destructors-free paths until exit
  return *r;
}

}  // namespace

void at_device_release(void (*release)()) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (std::find(r.releases.begin(), r.releases.end(), release) == r.releases.end()) r.releases.push_back(release);
}

void release_device_state() {
  std::vector<void (*)()> releases;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    releases.swap(r.releases);
  }
  if (releases.empty()) return;
  // Queued work may still read a workspace; an error here (a dead context) only means there is nothing to wait for.
  if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  for (auto it = releases.rbegin(); it != releases.rend(); ++it) (*it)();
  cudaGetLastError();  // a release's ignored error must not surface in a later, unrelated check
}

}  // namespace tf::cuda
