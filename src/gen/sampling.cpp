#include "gen/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"

namespace tf {

namespace {
int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}
}  // namespace

void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& sp, float* probs) {
  if (sp.greedy()) {
    std::fill(probs, probs + vocab, 0.0f);
    probs[argmax(logits, vocab)] = 1.0f;
    return;
  }
  // Softmax of logits / T in double for a stable, backend-independent reference.
  const double inv_t = 1.0 / sp.temperature;
  double mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, double(logits[i]) * inv_t);
  std::vector<double> p(vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += (p[i] = std::exp(double(logits[i]) * inv_t - mx));
  for (auto& v : p) v /= sum;
  if (sp.top_p < 1.0f) {
    // As transformers' TopPLogitsWarper: sort ascending, drop the tokens whose
    // cumulative mass is <= 1 - top_p, always keep the most likely one.
    std::vector<int64_t> idx(vocab);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return p[a] < p[b]; });
    double cum = 0;
    const double cut = 1.0 - double(sp.top_p);
    for (int64_t r = 0; r < vocab - 1; ++r) {
      cum += p[idx[r]];
      if (cum <= cut) p[idx[r]] = 0;
      else break;
    }
    double kept = 0;
    for (auto v : p) kept += v;
    for (auto& v : p) v /= kept;
  }
  for (int64_t i = 0; i < vocab; ++i) probs[i] = float(p[i]);
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
  if (sp.greedy()) return int32_t(argmax(logits, vocab));
  std::vector<float> probs(vocab);
  sampling_distribution(logits, vocab, sp, probs.data());
  return draw_from(probs.data(), vocab, sp.seed, draw);
}

}  // namespace tf
