// Token selection on f32 logits [n, vocab]: greedy argmax, and an inverse-CDF
// draw whose uniform comes from tf::philox_uniform(seed, offset + row)
// (core/philox.h), so host and device draw the same number. The distribution
// drawn from (temperature, top-p) is softmax_top_p.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// out[r] = tf::argmax_lowest of row r (gen/sampling.h), the one greedy rule of
// every level: 0 when the row's entry 0 is NaN; otherwise the lowest index
// among the maxima of its non-NaN entries (compared with ==, so -0 ties +0).
// With `ids` (a draft's reduced vocabulary, model/draft_vocab.h) row r holds
// the logits of ids[0 .. vocab) of a full_vocab-token row that is -inf
// elsewhere (what expand_restricted_logits makes), and out[r] is the rule
// applied to that full row, which is never built. Launched through
// launch_step (kernels/pdl.cuh): it waits before reading anything.
struct ArgmaxParams {
  const float* x = nullptr;  // [n, vocab]
  int32_t* out = nullptr;    // [n]
  int64_t n = 0, vocab = 0;
  const int32_t* ids = nullptr;  // device [vocab], strictly increasing, or null
  int64_t full_vocab = 0;        // with ids: the full row's length
  int64_t first_missing = 0;     // with ids: the lowest id of [0, full_vocab) not in ids (full_vocab: none)
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
