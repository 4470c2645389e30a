// The exact distributions a losslessness test compares sampled tokens with:
// the target's first and second generated tokens, computed by enumerating
// every first token the first distribution allows.
#pragma once
#include <cstdint>
#include <vector>

#include "gen/sampling.h"
#include "model/llama.h"

namespace tf::testing {

inline void exact_first_two(LlamaModel& m, const std::vector<int32_t>& prompt, const SamplingParams& sp,
                            std::vector<double>& p1, std::vector<double>& p2) {
  const int64_t V = m.config().vocab_size;
  FullKVCache cache = m.make_cache(int64_t(prompt.size()) + 2);
  Tensor lg = m.forward(prompt, cache, 1);
  std::vector<float> d(static_cast<size_t>(V)), d2(static_cast<size_t>(V));
  sampling_distribution(lg.ptr<float>(), V, sp, d.data());
  p1.assign(d.begin(), d.end());
  p2.assign(size_t(V), 0.0);
  for (int32_t x = 0; x < V; ++x) {
    if (d[size_t(x)] <= 0) continue;
    cache.truncate(int64_t(prompt.size()));
    Tensor l2 = m.forward(std::vector<int32_t>{x}, cache, 1);
    sampling_distribution(l2.ptr<float>(), V, sp, d2.data());
    for (int64_t y = 0; y < V; ++y) p2[size_t(y)] += double(d[size_t(x)]) * double(d2[size_t(y)]);
  }
}

}  // namespace tf::testing
