#include "gen/sampling.h"

#include <algorithm>
#include <cmath>

#include "core/philox.h"
#include "ops/ops.h"

namespace tf {

namespace {

// The largest value (NaNs skipped unless x[0] is one), in 8 independent chains.
float max_value(const float* x, int64_t n) {
  float m[8];
  for (int k = 0; k < 8; ++k) m[k] = x[0];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
  float best = m[0];
  for (int k = 1; k < 8; ++k) best = m[k] > best ? m[k] : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

}  // namespace

int64_t argmax_lowest(const float* x, int64_t n) {
  // The plain `if (x[i] > x[best])` scan is one dependent compare per element
  // (~30 us for a 32K vocabulary, several times per speculative step): find the
  // largest value with 8 independent running maxima instead, then its first index.
  if (n <= 0 || std::isnan(x[0])) return 0;
  const float best = max_value(x, n);
  for (int64_t j = 0; j < n; ++j)
    if (x[j] == best) return j;
  return 0;
}

void RowSampler::reference(const float* logits, int64_t vocab, const SamplingParams& sp, float* probs) {
  // The op is the single definition of temperature + top-p (HF TopPLogitsWarper
  // semantics); every backend's sampling kernel is tested against it.
  sparse_ = false;
  Tensor l, pr;
  l.data = const_cast<float*>(logits);
  pr.data = probs;
  l.shape = pr.shape = {1, vocab};
  ops::SoftmaxParams p;
  p.temperature = sp.temperature;
  p.top_p = sp.top_p;
  ops::softmax_top_p(l, pr, p);
}

void RowSampler::distribution(const float* logits, int64_t vocab, const SamplingParams& sp, float* probs) {
  support_.clear();
  if (sp.greedy()) {
    std::fill(probs, probs + vocab, 0.0f);
    support_.push_back(int32_t(argmax_lowest(logits, vocab)));
    probs[support_[0]] = 1.0f;
    sparse_ = true;
    return;
  }
  const float T = sp.temperature;
  // Division by T > 0 is monotone, so this is the op's max of logits / T.
  const float m = vocab > 0 ? max_value(logits, vocab) / T : 0.0f;
  if (vocab <= 0 || !std::isfinite(m) || !(T > 0.0f)) return reference(logits, vocab, sp, probs);
  if (sp.top_p < 1.0f) {
    if (top_p_fast(logits, vocab, T, m, sp.top_p, probs)) return;
    ++fallbacks_;
    return reference(logits, vocab, sp, probs);
  }
  // The op's arithmetic in its order (every exponential, a double sum in id
  // order, one float inverse), in two passes and no allocation.
  sparse_ = false;
  double sum = 0.0;
  for (int64_t j = 0; j < vocab; ++j) {
    const float e = std::exp(logits[j] / T - m);
    probs[j] = e;
    sum += e;
  }
  if (!std::isfinite(sum)) return reference(logits, vocab, sp, probs);  // NaN logits: whatever the op does
  const float inv = float(1.0 / sum);
  for (int64_t j = 0; j < vocab; ++j) probs[j] *= inv;
}

// The op sorts all s = logit / T ascending (stable) and drops tokens from the
// bottom while the cumulative mass is <= 1 - top_p: it keeps the K largest,
// where K is the least k >= 1 whose remaining mass R(k) = tot - top_k mass
// satisfies R(k) <= (1 - top_p) tot, and ties at the cut keep the higher ids.
// Here tot comes from approximate exponentials (within 1e-5 of the exact sum)
// and the top masses from the exact ones; K is taken only when R(K) and
// R(K - 1) clear the threshold by kMargin of tot, far beyond both that error
// and the op's own rounding (~1e-11), so the op would cut at the same K.
bool RowSampler::top_p_fast(const float* l, int64_t V, float T, float m, float top_p, float* probs) {
  constexpr double kMargin = 1e-4;
  const double thresh = double(float(1.0 - double(top_p)));  // the op's float threshold
  if (!(thresh > 2 * kMargin && thresh < 1.0 - 2 * kMargin)) return false;
  const detail::ApproxMass am = detail::approx_exp_masses(l, V, T, m);
  const double tot = am.total;
  if (!std::isfinite(tot) || tot < 0.5) return false;  // the largest term is 1
  // The narrowest band below the max whose complement is surely dropped.
  int c = 0;
  while (c < 3 && tot - am.above[c] > (thresh - 2 * kMargin) * tot) ++c;
  if (c == 3) return false;
  const float cut = -detail::kMassCuts[c];
  cand_.clear();
  // A raw-logit bound 1e-3 (relative) below the band, which rounding cannot
  // cross, skips the division for the many tokens far below it.
  const float below = (m + cut - 1e-3f * (std::fabs(m) + std::fabs(cut) + 1.0f)) * T;
  for (int64_t j = 0; j < V; ++j) {
    if (!(l[j] > below)) continue;
    const float s = l[j] / T;
    const float d = s - m;
    if (d > cut) cand_.push_back({s, int32_t(j), std::exp(d)});
  }
  double band = 0.0;
  for (const Candidate& x : cand_) band += x.e;
  if (tot - band > (thresh - kMargin) * tot) return false;  // the kept set might reach below the band
  // The op's order from the top: larger s first, on ties the higher id (kept longer).
  std::sort(cand_.begin(), cand_.end(),
            [](const Candidate& a, const Candidate& b) { return a.s > b.s || (a.s == b.s && a.id > b.id); });
  const size_t n = cand_.size();
  double top = 0.0, prev = 0.0;
  size_t K = 0;
  while (K < n) {
    prev = top;
    top += cand_[K++].e;
    if (tot - top <= thresh * tot) break;
  }
  if (tot - top > (thresh - kMargin) * tot) return false;
  if (K > 1 && tot - prev <= (thresh + kMargin) * tot) return false;
  // The op's normaliser: the kept exponentials summed in double in id order.
  std::sort(cand_.begin(), cand_.begin() + int64_t(K),
            [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  double sum = 0.0;
  for (size_t k = 0; k < K; ++k) sum += cand_[k].e;
  const float inv = float(1.0 / sum);
  std::fill(probs, probs + V, 0.0f);
  for (size_t k = 0; k < K; ++k) {
    probs[cand_[k].id] = cand_[k].e * inv;
    support_.push_back(cand_[k].id);
  }
  sparse_ = true;
  return true;
}

int32_t RowSampler::draw(const float* probs, int64_t vocab, uint64_t seed, uint64_t draw) const {
  if (sparse_) return draw_from_ids(probs, support_.data(), int64_t(support_.size()), seed, draw);
  return draw_from(probs, vocab, seed, draw);
}

void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& sp, float* probs) {
  thread_local RowSampler sampler;
  sampler.distribution(logits, vocab, sp, probs);
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

int32_t draw_from_ids(const float* probs, const int32_t* ids, int64_t n, uint64_t seed, uint64_t draw) {
  // draw_from's sums skip only exact zeros here, which leave a double sum unchanged.
  double total = 0;
  for (int64_t k = 0; k < n; ++k) total += probs[ids[k]];
  const double u = double(philox_uniform(seed, draw)) * total;
  double cum = 0;
  int32_t last_nonzero = 0;
  for (int64_t k = 0; k < n; ++k) {
    const float v = probs[ids[k]];
    if (v <= 0) continue;
    last_nonzero = ids[k];
    cum += v;
    if (u < cum) return ids[k];
  }
  return last_nonzero;
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& sp, uint64_t draw) {
  if (sp.greedy()) return int32_t(argmax_lowest(logits, vocab));
  thread_local RowSampler sampler;
  thread_local std::vector<float> probs;
  probs.resize(size_t(vocab));
  sampler.distribution(logits, vocab, sp, probs.data());
  return sampler.draw(probs.data(), vocab, sp.seed, draw);
}

}  // namespace tf
