// Reproducible test inputs for the GPU kernel tests: xorshift64 values in
// [-1, 1) written into [begin, end) of a host vector, seeded per tensor.
#pragma once
#include <cstdint>
#include <vector>

namespace tf::testing {

inline void fill_uniform(std::vector<float>& v, size_t begin, size_t end, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = begin; i < end; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v[i] = float(int64_t(s >> 40) - (1ll << 23)) / float(1ll << 23);  // [-1, 1)
  }
}

}  // namespace tf::testing
