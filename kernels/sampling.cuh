// Token selection on f32 logits [n, vocab]: greedy argmax, and an inverse-CDF
// draw whose uniform comes from tf::philox_uniform(seed, offset + row)
// (core/philox.h), so host and device draw the same number. The distribution
// drawn from (temperature, top-p) is softmax_top_p.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

struct ArgmaxParams {
  const float* x = nullptr;  // [n, vocab]
  int32_t* out = nullptr;    // [n]: first index of the row maximum (NaN entries are skipped)
  int64_t n = 0, vocab = 0;
};
void argmax(const ArgmaxParams& p, cudaStream_t stream = nullptr);

struct SampleParams {
  const float* probs = nullptr;   // [n, vocab], non-negative (need not sum to 1)
  int32_t* out = nullptr;         // [n]
  int64_t n = 0, vocab = 0;
  uint64_t seed = 0;
  uint64_t offset = 0;            // row r uses draw offset + r of the stream `seed`
};
// out[r] = the first index i with cumsum(probs[r])[i] > u * sum(probs[r]),
// u = philox_uniform(seed, offset + r); falls back to the last non-zero entry.
void sample(const SampleParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
