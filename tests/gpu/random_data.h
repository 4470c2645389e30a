// Reproducible test inputs for the GPU kernel tests: xorshift64 values in
// [-1, 1) written into [begin, end) of a host vector, seeded per tensor, and
// token ids spread over a vocabulary.
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

// n token ids in [0, vocab), a different sequence per salt.
inline std::vector<int32_t> tokens_for(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t((i * 7919 + salt * 104729 + 13) % vocab);
  return t;
}

}  // namespace tf::testing
