// Token selection for every level of every method: temperature and top-p are
// applied here and only here; T = 0 means exact greedy (argmax, lowest id on ties).
#pragma once
#include <cstdint>
#include <vector>

namespace tf {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

// probs[vocab] <- the distribution a token is drawn from (one-hot at T = 0).
void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& sp, float* probs);

// Inverse-CDF draw from probs with the uniform number `draw` of the seed's Philox stream.
int32_t draw_from(const float* probs, int64_t vocab, uint64_t seed, uint64_t draw);

// The index of the largest value, the lowest index on ties (NaNs never win,
// unless x[0] is one). Every greedy decision of every level goes through it.
int64_t argmax_lowest(const float* x, int64_t n);

// sampling_distribution + draw_from (argmax at T = 0).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& sp, uint64_t draw);

}  // namespace tf
