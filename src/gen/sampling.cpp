#include "gen/sampling.h"

#include <algorithm>
#include <cmath>

#include "core/philox.h"
#include "ops/ops.h"

namespace tf {

int64_t argmax_lowest(const float* x, int64_t n) {
  // The plain `if (x[i] > x[best])` scan is one dependent compare per element
  // (~30 us for a 32K vocabulary, several times per speculative step): find the
  // largest value with 8 independent running maxima instead, then its first index.
  if (n <= 0 || std::isnan(x[0])) return 0;
  float m[8];
  for (int k = 0; k < 8; ++k) m[k] = x[0];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
  float best = m[0];
  for (int k = 1; k < 8; ++k) best = m[k] > best ? m[k] : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  for (int64_t j = 0; j < n; ++j)
    if (x[j] == best) return j;
  return 0;
}

void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& sp, float* probs) {
  if (sp.greedy()) {
    std::fill(probs, probs + vocab, 0.0f);
    probs[argmax_lowest(logits, vocab)] = 1.0f;
    return;
  }
  // The op is the single definition of temperature + top-p (HF TopPLogitsWarper
  // semantics); every backend's sampling kernel is tested against it.
  Tensor l, pr;
  l.data = const_cast<float*>(logits);
  pr.data = probs;
  l.shape = pr.shape = {1, vocab};
  ops::SoftmaxParams p;
  p.temperature = sp.temperature;
  p.top_p = sp.top_p;
  ops::softmax_top_p(l, pr, p);
}

int32_t draw_from(const float* probs, int64_t vocab, uint64_t seed, uint64_t draw) {
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) total += probs[i];
  const double u = double(philox_uniform(seed, draw)) * total;
  double cum = 0;
  int64_t last_nonzero = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (probs[i] <= 0) continue;
    last_nonzero = i;
    cum += probs[i];
    if (u < cum) return int32_t(i);
  }
  return int32_t(last_nonzero);  // rounding left u at the very top
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& sp, uint64_t draw) {
  if (sp.greedy()) return int32_t(argmax_lowest(logits, vocab));
  std::vector<float> probs(vocab);
  sampling_distribution(logits, vocab, sp, probs.data());
  return draw_from(probs.data(), vocab, sp.seed, draw);
}

}  // namespace tf
